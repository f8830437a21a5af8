"""Message filtering against the real broker subprocess: TAG and SQL92 subscriptions on the pull's
subscription flag and from heartbeats, the scan cap, SUBSCRIPTION_PARSE_FAILED (23) on every path,
enablePropertyFilter=false refusals, pathological selectors (deep nesting, 1 MiB, the largest IN list and one
item more) on the pull flag,
heartbeat and CHECK_CLIENT_CONFIG paths, and long polling that wakes only for a matching SQL message."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from broker.filter.sql92 import MAX_IN_ITEMS
from tests.support.broker_process import BrokerProcess
from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.message import BatchEntry, encode_batch_body

from tests.support.wire import WireClient, props, pull_fields, records, send_v2_fields

SUSPEND, SUB = 0x2, 0x4
SELECTOR = "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)"


@pytest.fixture(scope="module")
def filter_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("filter"), "broker-filter",
                           extra={"enablePropertyFilter": "true"}).start()
    yield broker
    broker.stop()


@pytest.fixture
async def client(filter_broker):
    c = await WireClient.connect(filter_broker.addr)
    yield c
    await c.close()


async def _send(client, topic, body: bytes, **properties: str) -> None:
    resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0, props(**properties)), body)
    assert resp.code == 0, resp.remark


async def _send_batch(client, topic, entries: list[tuple[bytes, dict[str, str]]]) -> None:
    fields = send_v2_fields(topic, 0, "")
    fields["m"] = "true"
    body = encode_batch_body([BatchEntry(0, payload, props(**p)) for payload, p in entries])
    resp = await client.request(RC.SEND_BATCH_MESSAGE, fields, body)
    assert resp.code == 0, resp.remark


async def _pull(client, topic, group, *, sub="*", expression_type="TAG", offset=0, sys_flag=SUB, suspend_ms=500,
                max_nums=32, timeout=5.0):
    fields = pull_fields(topic, group, 0, offset, sys_flag=sys_flag, subscription=sub, suspend_ms=suspend_ms,
                         max_nums=max_nums)
    fields["expressionType"] = expression_type
    return await client.request(RC.PULL_MESSAGE, fields, timeout=timeout)


async def _heartbeat(client, client_id, group, topic, sub_string, expression_type):
    sub = {"topic": topic, "subString": sub_string, "tagsSet": [], "codeSet": [],
           "subVersion": int(time.time() * 1000), "expressionType": expression_type}
    body = {"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_ACTIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": [sub], "unitMode": False}]}
    return await client.request(RC.HEART_BEAT, {}, json.dumps(body).encode())


async def _check_client(client, group, sub_string, expression_type="SQL92"):
    body = {"clientId": "127.0.0.1@check", "group": group, "subscriptionData": {
        "topic": "Any", "subString": sub_string, "tagsSet": [], "codeSet": [], "subVersion": 1,
        "expressionType": expression_type}}
    return await client.request(RC.CHECK_CLIENT_CONFIG, {}, json.dumps(body).encode())


def _bodies(resp) -> list[bytes]:
    return [m.body for m in records(resp.body)] if resp.code == 0 else []


MESSAGES = [
    (b"m0", {"TAGS": "TagA", "a": "1"}),
    (b"m1", {"TAGS": "TagB", "a": "5"}),
    (b"m2", {"TAGS": "TagC", "a": "2"}),
    (b"m3", {"a": "2"}),
    (b"m4", {"TAGS": "TagB", "a": "3"}),
    (b"m5", {"TAGS": "TagA", "a": "abc"}),
    (b"m6", {"TAGS": "TagA"}),
    (b"m7", {"TAGS": "TagA", "a": "0"}),
]


async def test_sql_and_tag_pulls_on_the_subscription_flag(client):
    topic = "FilterFlag"
    for payload, p in MESSAGES:
        await _send(client, topic, payload, **p)
    sql = await _pull(client, topic, "ff", sub=SELECTOR, expression_type="SQL92")
    assert sql.code == 0, sql.remark
    assert _bodies(sql) == [b"m0", b"m4", b"m7"]
    assert str(sql.ext_fields["nextBeginOffset"]) == "8"
    assert _bodies(await _pull(client, topic, "ff", sub="a IS NULL", expression_type="sql92")) == [b"m6"]
    assert _bodies(await _pull(client, topic, "ff", sub="TAGS NOT IN ('TagA')", expression_type="SQL92")) \
        == [b"m1", b"m2", b"m4"]
    assert _bodies(await _pull(client, topic, "ff", sub=" TagB || TagC ")) == [b"m1", b"m2", b"m4"]
    assert _bodies(await _pull(client, topic, "ff", sub="*")) == [p for p, _ in MESSAGES]
    nothing = await _pull(client, topic, "ff", sub="a > 100", expression_type="SQL92")
    assert nothing.code == R.PULL_RETRY_IMMEDIATELY and str(nothing.ext_fields["nextBeginOffset"]) == "8"
    # a pull starting mid-queue continues from there
    assert _bodies(await _pull(client, topic, "ff", sub=SELECTOR, expression_type="SQL92", offset=1)) == [b"m4", b"m7"]


async def test_concurrent_sql_pulls_on_one_connection_are_all_answered(client):
    """SQL pulls are evaluated one per broker loop turn (answers flushed as each is ready); a burst of them mixed
    with other requests on one connection still gets every answer, each right."""
    topic = "FilterBurst"
    await _send_batch(client, topic, [(f"b{i}".encode(), {"TAGS": ("TagA", "TagB")[i % 2], "a": str(i % 8)})
                                      for i in range(400)])
    expected = [f"b{i}".encode() for i in range(400) if i % 8 < 4]
    offsets = list(range(0, 400, 25))
    requests = [_pull(client, topic, "fb", sub=SELECTOR, expression_type="SQL92", offset=o, max_nums=8)
                for o in offsets]
    requests.append(_pull(client, topic, "fb", sub="*", max_nums=400))
    requests.append(_pull(client, topic, "fb", sub="a >", expression_type="SQL92"))  # parse failure: inline
    requests.append(_pull(client, "FilterBurstNoSuchTopic", "fb", sub=SELECTOR, expression_type="SQL92"))
    answers = await asyncio.gather(*requests)
    for o, answer in zip(offsets, answers):
        assert answer.code == 0, answer.remark
        want = [b for b in expected if int(b[1:]) >= o][:8]
        assert _bodies(answer) == want
    assert len(_bodies(answers[len(offsets)])) == 400
    assert answers[len(offsets) + 1].code == R.SUBSCRIPTION_PARSE_FAILED
    assert answers[len(offsets) + 2].code == R.TOPIC_NOT_EXIST


async def test_subscriptions_registered_by_heartbeat(client):
    topic = "FilterHeartbeat"
    for payload, p in MESSAGES:
        await _send(client, topic, payload, **p)
    assert (await _heartbeat(client, "127.0.0.1@fh1", "fhSql", topic, SELECTOR, "SQL92")).code == 0
    resp = await _pull(client, topic, "fhSql", sub="ignored", sys_flag=0)
    assert resp.code == 0, resp.remark
    assert _bodies(resp) == [b"m0", b"m4", b"m7"]
    assert (await _heartbeat(client, "127.0.0.1@fh2", "fhTag", topic, "TagC", "TAG")).code == 0
    assert _bodies(await _pull(client, topic, "fhTag", sys_flag=0)) == [b"m2"]


async def test_scan_cap_returns_the_offset_to_continue_from(client):
    topic = "FilterScanCap"
    await _send_batch(client, topic, [(b"skip", {"a": "0"})] * 1000)
    await _send(client, topic, b"wanted", a="1")
    first = await _pull(client, topic, "fsc", sub="a = 1", expression_type="SQL92")
    assert first.code == R.PULL_RETRY_IMMEDIATELY and first.body == b""
    assert str(first.ext_fields["nextBeginOffset"]) == "800"
    second = await _pull(client, topic, "fsc", sub="a = 1", expression_type="SQL92", offset=800)
    assert second.code == 0 and _bodies(second) == [b"wanted"]
    assert [m.queue_offset for m in records(second.body)] == [1000]
    assert str(second.ext_fields["nextBeginOffset"]) == "1001"
    # TAG filtering is capped the same way
    tagged = await _pull(client, topic, "fsc", sub="NoSuchTag")
    assert tagged.code == R.PULL_RETRY_IMMEDIATELY and str(tagged.ext_fields["nextBeginOffset"]) == "800"


async def test_parse_failed_on_every_path(client):
    topic = "FilterBroken"
    await _send(client, topic, b"x", a="1")
    bad = "a LIKE 'x%'"
    flagged = await _pull(client, topic, "fb", sub=bad, expression_type="SQL92")
    assert flagged.code == R.SUBSCRIPTION_PARSE_FAILED
    assert flagged.remark.startswith("unexpected 'LIKE' after a complete expression at column 3; expected")
    assert (await _heartbeat(client, "127.0.0.1@fb", "fbReg", topic, bad, "SQL92")).code == 0
    registered = await _pull(client, topic, "fbReg", sys_flag=0)
    assert registered.code == R.SUBSCRIPTION_PARSE_FAILED and registered.remark == flagged.remark
    checked = await _check_client(client, "fbReg", bad)
    assert checked.code == R.SUBSCRIPTION_PARSE_FAILED and checked.remark == flagged.remark
    assert (await _check_client(client, "fbReg", "a > 1")).code == 0
    assert (await _check_client(client, "fbReg", "TagA", "TAG")).code == 0
    odd = await _pull(client, topic, "fb", sub="x", expression_type="CLASS")
    assert odd.code == R.SUBSCRIPTION_PARSE_FAILED and "expression type" in odd.remark


async def test_hostile_selectors_are_answered(client):
    topic = "FilterHostile"
    await _send(client, topic, b"x", a="v9999")
    deep = await _pull(client, topic, "fh", sub="(" * 30_000 + "a = 'x'" + ")" * 30_000,
                       expression_type="SQL92")
    assert deep.code == R.SUBSCRIPTION_PARSE_FAILED and "nested" in deep.remark
    huge = await _pull(client, topic, "fh", sub="a = '" + "x" * (1 << 20) + "'", expression_type="SQL92")
    assert huge.code == R.SUBSCRIPTION_PARSE_FAILED and "the maximum is" in huge.remark
    items = ",".join(f"'v{i}'" for i in range(MAX_IN_ITEMS))
    wide = await _pull(client, topic, "fh", sub=f"a IN ({items}, 'v9999')", expression_type="SQL92")
    assert wide.code == R.SUBSCRIPTION_PARSE_FAILED and "IN-list items" in wide.remark
    wide = await _pull(client, topic, "fh", sub=f"a IN ({items[:-8]}, 'v9999')", expression_type="SQL92")
    assert wide.code == 0 and _bodies(wide) == [b"x"]


async def test_hostile_selectors_by_heartbeat_and_client_check(client, filter_broker):
    """The same inputs registered by heartbeat (then pulled without the subscription flag) and sent in
    CHECK_CLIENT_CONFIG: answered on every path, and the broker keeps serving."""
    topic = "FilterHostileHb"
    await _send(client, topic, b"x", a="v9999")
    items = ",".join(f"'v{i}'" for i in range(MAX_IN_ITEMS - 1)) + ",'v9999'"
    cases = [
        ("deep", "(" * 30_000 + "a = 'x'" + ")" * 30_000, R.SUBSCRIPTION_PARSE_FAILED, "nested"),
        ("huge", "a = '" + "x" * (1 << 20) + "'", R.SUBSCRIPTION_PARSE_FAILED, "the maximum is"),
        ("wide", f"a IN ({items})", R.SUCCESS, None),
    ]
    for name, selector, code, remark_part in cases:
        started = time.monotonic()
        group = f"fhh-{name}"
        assert (await _heartbeat(client, f"127.0.0.1@{group}", group, topic, selector, "SQL92")).code == 0
        pulled = await _pull(client, topic, group, sys_flag=0)
        assert pulled.code == code, (name, pulled.remark)
        checked = await _check_client(client, group, selector)
        assert checked.code == code, (name, checked.remark)
        if remark_part is None:
            assert _bodies(pulled) == [b"x"]
        else:
            assert remark_part in pulled.remark and checked.remark == pulled.remark, name
        assert time.monotonic() - started < 10, name
    async with await WireClient.connect(filter_broker.addr) as fresh:  # still serving
        assert _bodies(await _pull(fresh, topic, "fhh-after", sub="a = 'v9999'", expression_type="SQL92")) == [b"x"]


async def test_long_poll_wakes_only_for_a_matching_sql_message(client, filter_broker):
    topic = "FilterLongPoll"
    await _send(client, topic, b"first", a="no")
    held = asyncio.ensure_future(_pull(client, topic, "flp", sub="a = 'yes'", expression_type="SQL92", offset=1,
                                       sys_flag=SUB | SUSPEND, suspend_ms=8000, timeout=15))
    await asyncio.sleep(0.3)
    async with await WireClient.connect(filter_broker.addr) as producer:
        await _send(producer, topic, b"other", a="no")
        await asyncio.sleep(0.7)
        assert not held.done(), "a non-matching message must not wake the held pull"
        started = time.monotonic()
        await _send(producer, topic, b"wanted", a="yes")
        resp = await asyncio.wait_for(held, 5)
    assert time.monotonic() - started < 2.0
    assert resp.code == 0 and _bodies(resp) == [b"wanted"]
    assert str(resp.ext_fields["nextBeginOffset"]) == "3"


async def test_property_filter_disabled_refuses_sql(shared_broker):
    async with await WireClient.connect(shared_broker.addr) as c:
        await _send(c, "FilterDisabled", b"x", a="1")
        pulled = await _pull(c, "FilterDisabled", "fd", sub="a = 1", expression_type="SQL92")
        assert pulled.code == R.SYSTEM_ERROR and "enablePropertyFilter" in pulled.remark
        assert (await _heartbeat(c, "127.0.0.1@fd", "fdReg", "FilterDisabled", "a = 1", "SQL92")).code == 0
        registered = await _pull(c, "FilterDisabled", "fdReg", sys_flag=0)
        assert registered.code == R.SYSTEM_ERROR and "enablePropertyFilter" in registered.remark
        checked = await _check_client(c, "fd", "a = 1")
        assert checked.code == R.SYSTEM_ERROR and "enablePropertyFilter" in checked.remark
        assert (await _check_client(c, "fd", "TagA", "TAG")).code == 0
        assert _bodies(await _pull(c, "FilterDisabled", "fd", sub="*")) == [b"x"]
