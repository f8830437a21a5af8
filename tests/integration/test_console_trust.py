"""The web console against the real broker process, as an attacker would try it (issue 27): an account reads only
what its permissions allow (through the broker's one Authorizer), failed sign-ins slow down and then lock out per
address and per account, and a foreign Host header (DNS rebinding) is refused. Each with the allowed case."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from tests.support.broker_process import free_port

from protocol.acl_signature import sign
from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.ids import decode_offset_msg_id

from tests.support.console import http, http_at
from tests.support.wire import WireClient, props, send_v2_fields

ACL_YAML = """
globalWhiteRemoteAddresses:
accounts:
  - accessKey: broker_admin
    secretKey: admin-secret-1
    admin: true
  - accessKey: reader_key1
    secretKey: reader-secret-1
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Public=SUB
      - "%DLQ%public-group=SUB"
    groupPerms:
      - public-group=SUB
  - accessKey: app_key01
    secretKey: app_secret01
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"""
ADMIN = ("broker_admin", "admin-secret-1")
READER = ("reader_key1", "reader-secret-1")
APP = ("app_key01", "app_secret01")


def write_acl(path) -> None:
    path.write_text(ACL_YAML)


async def admin_request(client: WireClient, code: int, fields: dict, body: bytes = b""):
    fields = dict(fields, AccessKey=ADMIN[0])
    fields["Signature"] = sign(ADMIN[1], fields, body)
    resp = await client.request(code, fields, body)
    assert resp.code == R.SUCCESS, (code, resp.code, resp.remark)
    return resp


def heartbeat_body(group: str, topic: str) -> bytes:
    return json.dumps({"clientID": f"{group}@1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [],
                                 "subVersion": 1, "expressionType": "TAG"}]}]}).encode()


async def seed_topic(client: WireClient, topic: str, group: str, word: str) -> dict:
    """3 messages on `topic` (keys <word>-1..3, bodies "<word> payload i"), `group` online and committed at 1, and
    one dead letter of `group`; the offsets of the first message and of the dead letter."""
    await admin_request(client, RC.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": "1",
                                                             "writeQueueNums": "1", "perm": "6"})
    first = None
    for i in range(1, 4):
        resp = await admin_request(client, RC.SEND_MESSAGE_V2,
                                   send_v2_fields(topic, 0, props(TAGS="t", KEYS=f"{word}-{i}")),
                                   f"{word} payload {i}".encode())
        first = first or resp.ext_fields["msgId"]
    await admin_request(client, RC.HEART_BEAT, {}, heartbeat_body(group, topic))
    await admin_request(client, RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": "0",
                                                            "commitOffset": "1"})
    uniq = (word.upper().encode().hex() + "0" * 16)[:16] + "F" * 16  # read as an offset id: far past the log
    dead = send_v2_fields("%RETRY%" + group, 0, props(TAGS="t", KEYS=f"{word}-poison", RETRY_TOPIC=topic,
                                                     UNIQ_KEY=uniq))
    dead["j"] = "17"  # past the group's maximum reconsume times: stored in %DLQ%<group>
    resp = await admin_request(client, RC.SEND_MESSAGE_V2, dead, f"{word} dead letter".encode())
    return {"first": first, "first_phys": decode_offset_msg_id(first)[2], "dead_msg_id": resp.ext_fields["msgId"],
            "dead_uniq": uniq}


def sign_in(base: str, creds: tuple[str, str], source: str | None = None):
    return http_at(base, "/api/login", {"accessKey": creds[0], "secretKey": creds[1]}, source=source)


@pytest.fixture
def acl_console(broker_factory, tmp_path):
    write_acl(tmp_path / "plain_acl.yml")
    port = free_port()
    broker = broker_factory(extra={"aclEnable": "true", "dashboardPort": port,
                                   "dashboardSignInDelayAfter": 2, "dashboardSignInLockAfter": 4,
                                   "dashboardSignInAccountDelayAfter": 6, "dashboardSignInAccountLockAfter": 8,
                                   "dashboardSignInLockSeconds": 120})
    broker.console = f"http://127.0.0.1:{port}"
    return broker


async def test_a_sub_only_account_sees_only_its_topics_groups_and_dead_letters(acl_console):
    async with await WireClient.connect(acl_console.addr) as client:  # open: its consumers stay online
        await _sub_only_account(acl_console.console, client)


async def _sub_only_account(base: str, client: WireClient) -> None:
    secret = await seed_topic(client, "Secret", "secret-group", "classified")
    public = await seed_topic(client, "Public", "public-group", "open")
    status, _, reader, _ = await asyncio.to_thread(sign_in, base, READER)
    assert status == 200 and reader
    status, _, admin, _ = await asyncio.to_thread(sign_in, base, ADMIN)
    assert status == 200 and admin

    def get(path: str, cookie: str):
        status, answer, _ = http(base, path, cookie=cookie)
        return status, answer

    async def as_reader(path: str):
        return await asyncio.to_thread(get, path, reader)

    async def as_admin(path: str):
        return await asyncio.to_thread(get, path, admin)

    # listings: the reader's show its own topic and group only
    status, topics = await as_reader("/api/topics")
    names = {t["topic"] for t in topics["topics"]}
    assert status == 200 and "Public" in names and "%DLQ%public-group" in names
    assert not names & {"Secret", "%DLQ%secret-group", "%RETRY%secret-group", "TBW102"}, names
    status, groups = await as_reader("/api/groups")
    assert status == 200 and [g["group"] for g in groups["groups"]] == ["public-group"], groups

    # direct reads of the secret topic, its group and its dead letters: 403 naming what is missing
    for path, missing in (("/api/topics/Secret", "topic:Secret"),
                          ("/api/messages?topic=Secret&key=classified-1", "topic:Secret"),
                          (f"/api/messages?topic=Secret&begin=0&end={int(time.time() * 1000) + 60_000}",
                           "topic:Secret"),
                          (f"/api/messages?id={secret['first']}&topic=Secret", "topic:Secret"),
                          (f"/api/messages/{secret['first_phys']}", "topic:Secret"),
                          ("/api/groups/secret-group", "group:secret-group"),
                          ("/api/dlq/secret-group", "group:secret-group")):
        status, answer = await as_reader(path)
        assert status == 403, (path, status, answer)
        assert missing in answer["error"] and "reader_key1" in answer["error"], (path, answer)
    # a search by id without a topic finds nothing it may not read (the secret message, the secret dead letter)
    for msg_id in (secret["first"], secret["dead_uniq"], secret["dead_msg_id"]):
        status, found = await as_reader(f"/api/messages?id={msg_id}")
        assert (status, found["messages"]) == (200, []), (msg_id, found)
    # broker-wide figures are an admin's (GET_BROKER_RUNTIME_INFO)
    status, overview = await as_reader("/api/overview")
    assert status == 200 and overview["restricted"] is True and "messagesIn" not in overview
    assert "connectionCount" not in overview and overview["brokerName"] == "broker-a"
    status, answer = await as_reader("/api/rates")
    assert status == 403 and "admin" in answer["error"]
    # changes stay an admin's
    status, answer, _ = await asyncio.to_thread(http, base, "/api/groups/public-group/reset",
                                                {"topic": "Public", "timestamp": 0}, cookie=reader)
    assert status == 403 and "not an admin" in answer["error"]

    # what the reader may use, it reads: its topic, messages, group, lag, clients and dead letters
    status, detail = await as_reader("/api/topics/Public")
    assert status == 200 and detail["consumerGroups"] == ["public-group"]
    status, found = await as_reader("/api/messages?topic=Public&key=open-2")
    assert status == 200 and [m["keys"] for m in found["messages"]] == ["open-2"]
    status, found = await as_reader(f"/api/messages?id={public['first']}")
    assert status == 200 and [m["keys"] for m in found["messages"]] == ["open-1"]
    status, message = await as_reader(f"/api/messages/{public['first_phys']}")
    assert status == 200 and message["body"]["text"] == "open payload 1"
    status, group = await as_reader("/api/groups/public-group")
    assert status == 200 and group["lag"] == 2 and [c["clientId"] for c in group["clients"]] == ["public-group@1"]
    # the group also has an offset on Secret: the reader's view of the group leaves that topic (and its lag) out
    await admin_request(client, RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "public-group", "topic": "Secret",
                                                            "queueId": "0", "commitOffset": "0"})
    status, group = await as_reader("/api/groups/public-group")
    assert status == 200 and group["lag"] == 2 and "Secret" not in group["topics"], group
    status, groups = await as_reader("/api/groups")
    assert [(g["topics"], g["lag"]) for g in groups["groups"]] == [(["Public"], 2)], groups
    status, dlq = await as_reader("/api/dlq/public-group")
    assert status == 200 and [m["bodyPreview"] for m in dlq["messages"]] == ["open dead letter"]

    # control: the admin sees everything the reader may not
    status, topics = await as_admin("/api/topics")
    assert {"Secret", "Public", "%DLQ%secret-group", "TBW102"} <= {t["topic"] for t in topics["topics"]}
    status, groups = await as_admin("/api/groups")
    assert {"secret-group", "public-group"} <= {g["group"] for g in groups["groups"]}
    status, message = await as_admin(f"/api/messages/{secret['first_phys']}")
    assert status == 200 and message["body"]["text"] == "classified payload 1"
    status, found = await as_admin(f"/api/messages?id={secret['dead_uniq']}")
    assert status == 200 and [m["topic"] for m in found["messages"]] == ["%DLQ%secret-group"]
    status, group = await as_admin("/api/groups/public-group")
    assert status == 200 and "Secret" in group["topics"] and group["lag"] == 5, group
    status, group = await as_admin("/api/groups/secret-group")
    assert status == 200 and group["lag"] == 2 and [c["clientId"] for c in group["clients"]] == ["secret-group@1"]
    status, dlq = await as_admin("/api/dlq/secret-group")
    assert status == 200 and [m["bodyPreview"] for m in dlq["messages"]] == ["classified dead letter"]
    status, overview = await as_admin("/api/overview")
    assert status == 200 and overview["restricted"] is False and overview["messagesIn"] >= 8
    status, rates = await as_admin("/api/rates")
    assert status == 200 and "points" in rates

    # an account with SUB by default: sees both topics, but not what is DENY by default elsewhere
    status, _, app, _ = await asyncio.to_thread(sign_in, base, APP)
    status, topics = await asyncio.to_thread(get, "/api/topics", app)
    assert {"Secret", "Public"} <= {t["topic"] for t in topics["topics"]}


async def test_guessed_secrets_are_slowed_then_locked_per_address_and_per_account(acl_console):
    base = acl_console.console
    wrong = ("reader_key1", "not-the-secret")

    # one address hammering one account for 4 s: 2 guesses at once, then one after 1 s and one after 2 s, then
    # locked (before: every guess was checked, about 200 a second)
    checked, refused, slowest_refusal = 0, [], 0.0
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:
        started = time.monotonic()
        status, answer, cookie, headers = await asyncio.to_thread(sign_in, base, wrong)
        assert cookie is None
        if status == 401:
            checked += 1
        else:
            assert status == 429, (status, answer)
            slowest_refusal = max(slowest_refusal, time.monotonic() - started)
            refused.append((answer["error"], int(headers["Retry-After"])))
        await asyncio.sleep(0.02)
    assert checked == 4, (checked, refused[:3])
    assert any("from 127.0.0.1: wait 1 s" in e and r == 1 for e, r in refused), refused[:5]
    assert any("from 127.0.0.1: wait 2 s" in e and r == 2 for e, r in refused), refused[:20]
    error, retry_after = refused[-1]
    assert "from 127.0.0.1: sign-in is locked for" in error and 100 <= retry_after <= 120, refused[-1]
    assert slowest_refusal < 0.5  # refused at once: nothing sleeps while holding the request
    # locked: even the right secret from that address is refused, unread
    status, answer, cookie, _ = await asyncio.to_thread(sign_in, base, READER)
    assert (status, cookie) == (429, None) and "locked" in answer["error"]
    # the same account from another address, and another account, sign in
    status, answer, cookie, _ = await asyncio.to_thread(sign_in, base, READER, "127.0.0.2")
    assert status == 200 and answer["accessKey"] == "reader_key1" and cookie
    status, answer, cookie, _ = await asyncio.to_thread(sign_in, base, ADMIN, "127.0.0.2")
    assert status == 200 and answer["admin"] is True and cookie
    status, answer, _ = await asyncio.to_thread(http, base, "/api/session", cookie=cookie)
    assert answer["signedIn"] is True  # the locked address still reaches pages with a session

    # guesses spread over addresses: the account slows down, then locks, for every address
    checked, waits = 0, []
    sources = iter([f"127.0.0.{n}" for n in (3, 3, 4, 4, 5, 5)] + ["127.0.0.6"] * 10)
    source = next(sources)
    while True:
        status, answer, _, headers = await asyncio.to_thread(sign_in, base, wrong, source)
        if status == 401:
            checked += 1
            source = next(sources)
            continue
        assert status == 429 and "for account 'reader_key1'" in answer["error"], answer
        if "locked" in answer["error"]:
            break
        waits.append(int(headers["Retry-After"]))
        await asyncio.sleep(waits[-1] + 0.1)
    assert checked == 8 and waits == [1, 2], (checked, waits)
    status, answer, cookie, _ = await asyncio.to_thread(sign_in, base, READER, "127.0.0.7")
    assert (status, cookie) == (429, None) and "for account 'reader_key1'" in answer["error"]
    status, answer, cookie, _ = await asyncio.to_thread(sign_in, base, ADMIN, "127.0.0.7")
    assert status == 200 and cookie  # other accounts are untouched
    assert "console: failed sign-in for 'reader_key1'" in acl_console.log_text()


def test_a_foreign_host_is_refused_and_the_consoles_own_names_work(broker_factory):
    """ACL off (where rebinding matters most: the console is open to whoever reaches it)."""
    port = free_port()
    broker_factory(extra={"dashboardPort": port, "dashboardAllowedHosts": "console.example.com, ops.example:9999"})
    base = f"http://127.0.0.1:{port}"
    for host in ("rebind.attacker.example", f"rebind.attacker.example:{port}", f"127.0.0.1:{port + 1}",
                 f"ops.example:{port}", "127.0.0.1.attacker.example", f"localhost.:{port + 1}"):
        for path in ("/", "/api/topics", "/api/overview", "/static/app.js"):
            status, answer, _, _ = http_at(base, path, host=host)
            assert status == 421, (host, path, status)
            assert "does not answer to Host" in answer["error"] and "dashboardAllowedHosts" in answer["error"]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "127.0.0.1",
                 "console.example.com", f"console.example.com:{port}", "ops.example:9999", f"LOCALHOST:{port}"):
        status, answer, _, _ = http_at(base, "/api/overview", host=host)
        assert status == 200 and answer["brokerName"] == "broker-a", (host, status, answer)
    status, answer, _, _ = http_at(base, "/", host=f"127.0.0.1:{port}")
    assert status == 200  # the page itself
