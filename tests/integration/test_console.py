"""The web console against the real broker process: its JSON API over HTTP, and its pages in headless Chromium."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import shutil
import socket
import time

import pytest
from tests.support.broker_process import free_port

from protocol.codes import RequestCode as RC
from protocol.ids import decode_offset_msg_id

from tests.support.console import (
    GROUP,
    ORDER_BODY,
    TOPIC,
    http,
    open_page,
    seed_broker,
    start_browser,
    wait_rendered,
)
from tests.support.acl import write_acl
from tests.support.client_helpers import Recorder, push_consumer, wait_for
from tests.support.wire import WireClient, pull_records, send_v2_fields


@pytest.fixture
def console_broker(broker_factory):
    port = free_port()
    broker = broker_factory(extra={"dashboardPort": port})
    broker.console = f"http://127.0.0.1:{port}"
    return broker


@pytest.fixture
def chrome(tmp_path_factory):
    browser = start_browser(tmp_path_factory.mktemp("chromium"))
    yield browser
    browser.quit()


def _screenshot(chrome, tmp_path, name: str) -> None:
    """Kept with the test's files; also copied to $CONSOLE_SCREENSHOTS when set (README's picture)."""
    path = tmp_path / name
    chrome.save_screenshot(str(path))
    target = os.environ.get("CONSOLE_SCREENSHOTS")
    if target:
        shutil.copy(path, os.path.join(target, name))


async def test_pages_show_topics_groups_messages_and_resend_a_dead_letter(console_broker, chrome, tmp_path):
    from selenium.webdriver.common.by import By

    base = console_broker.console
    data = await seed_broker(console_broker.addr)

    overview = await asyncio.to_thread(open_page, chrome, base, "/")
    assert "broker-a" in overview and "DefaultCluster" in overview and "pyrocketmq-broker" in overview
    assert chrome.find_element(By.ID, "ov-in").text == "6"  # 5 orders and the dead letter
    assert chrome.find_elements(By.CSS_SELECTOR, "#rates-chart path.line.in")
    _screenshot(chrome, tmp_path, "console-overview.png")

    topics = await asyncio.to_thread(open_page, chrome, base, "/topics")
    row = next(r for r in chrome.find_elements(By.CSS_SELECTOR, "#topics tbody tr") if r.text.startswith(TOPIC))
    assert row.text.split()[:5] == [TOPIC, "1", "/", "1", "RW-"] and " 5 " in f" {row.text} "
    assert "%DLQ%" not in topics  # retry / dead-letter topics only on request

    topic = await asyncio.to_thread(open_page, chrome, base, f"/topic/{TOPIC}")
    assert chrome.find_element(By.ID, "topic-messages").text == "5"
    assert [c.text for c in chrome.find_elements(By.CSS_SELECTOR, "#queues tbody tr td")][:4] == ["0", "0", "5", "5"]
    assert GROUP in topic

    groups = await asyncio.to_thread(open_page, chrome, base, "/groups")
    row = next(r for r in chrome.find_elements(By.CSS_SELECTOR, "#groups tbody tr") if r.text.startswith(GROUP))
    assert row.text.split()[-3:] == ["4", "0", "1"]  # lag, retry, dead letters
    assert "console-client" not in groups

    await asyncio.to_thread(open_page, chrome, base, f"/group/{GROUP}")
    assert chrome.find_element(By.ID, "group-lag").text == "4"
    assert chrome.find_element(By.ID, "group-dlq").text == "1"
    cells = [c.text for c in chrome.find_elements(By.CSS_SELECTOR, "#lag-table tbody tr td")]
    assert cells[:5] == [TOPIC, "0", "5", "1", "4"]
    assert chrome.find_elements(By.CSS_SELECTOR, "#lag-chart circle.dot.lag")
    _screenshot(chrome, tmp_path, "console-group.png")

    # messages: by key, then the message itself with its body pretty-printed as JSON
    found = await asyncio.to_thread(open_page, chrome, base, f"/messages?topic={TOPIC}&key=order-3")
    assert "1 message(s)" in found and data.order3_uniq_key in found
    chrome.find_element(By.CSS_SELECTOR, "#results tbody a").click()
    offset = chrome.current_url.rsplit("/", 1)[1]
    await asyncio.to_thread(wait_rendered, chrome, f"/message/{offset}")
    assert chrome.find_element(By.ID, "msg-topic").text == TOPIC
    assert json.loads(chrome.find_element(By.ID, "body-json").get_attribute("textContent")) == ORDER_BODY
    chrome.find_element(By.CSS_SELECTOR, "#body-tabs button[data-view=hex]").click()
    hex_text = chrome.find_element(By.ID, "body-hex").text
    assert hex_text.startswith("7b 22 6f 72 64 65 72 22")  # {"order"
    props = chrome.find_element(By.ID, "properties").text
    assert "KEYS order-3" in props and "TAGS paid" in props

    by_id = await asyncio.to_thread(open_page, chrome, base, f"/messages?id={data.dead_uniq_key}")
    assert f"%DLQ%{GROUP}" in by_id

    by_time = await asyncio.to_thread(open_page, chrome, base,
                                      f"/messages?topic={TOPIC}&begin={int(time.time() * 1000) - 600_000}"
                                      f"&end={int(time.time() * 1000) + 1000}")
    assert "5 message(s)" in by_time

    # the dead letter: listed, its retry history, then resent to the group's retry topic
    dlq = await asyncio.to_thread(open_page, chrome, base, f"/dlq/{GROUP}")
    assert data.dead_uniq_key in dlq and "poison message" in dlq and TOPIC in dlq
    chrome.find_element(By.CSS_SELECTOR, "#dead-letters tbody button.resend").click()
    deadline = time.monotonic() + 10
    while "Resent 1 of 1" not in chrome.find_element(By.ID, "flash").text:
        assert time.monotonic() < deadline, chrome.find_element(By.ID, "flash").text
        await asyncio.sleep(0.05)
    async with await WireClient.connect(console_broker.addr) as client:
        resent = await pull_records(client, "%RETRY%" + GROUP, 0)
        assert [(r.body, r.uniq_key, r.properties.get("RETRY_TOPIC")) for r in resent] == \
               [(b"poison message", data.dead_uniq_key, TOPIC)]
    chrome.find_element(By.CSS_SELECTOR, "#dead-letters tbody a").click()
    await asyncio.to_thread(wait_rendered, chrome, chrome.current_url.split("#", 1)[1])
    history = chrome.find_element(By.ID, "history").text
    assert f"%DLQ%{GROUP}" in history and f"%RETRY%{GROUP}" in history


async def test_api_changes_topics_resets_offsets_and_explains_bad_requests(console_broker):
    base = console_broker.console
    await seed_broker(console_broker.addr)

    status, answer, _ = await asyncio.to_thread(http, base, "/api/topics", {"topic": "ConsoleNew", "readQueueNums": 2,
                                                                           "writeQueueNums": 2, "perm": 6})
    assert (status, answer) == (200, {"ok": True, "topic": "ConsoleNew"})
    status, detail, _ = await asyncio.to_thread(http, base, "/api/topics/ConsoleNew")
    assert status == 200 and [q["queueId"] for q in detail["queues"]] == [0, 1]
    assert detail["messageType"] == "NORMAL"  # no type given: NORMAL, as the reference treats such topics
    # a 5.x message type on create/update (the attribute message.type); kept when the queues change
    for fields in ({"messageType": "FIFO"}, {"readQueueNums": 3, "writeQueueNums": 3}):
        status, answer, _ = await asyncio.to_thread(http, base, "/api/topics", {
            "topic": "ConsoleNew", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6, **fields})
        assert status == 200, answer
        status, detail, _ = await asyncio.to_thread(http, base, "/api/topics/ConsoleNew")
        assert detail["messageType"] == "FIFO" and detail["attributes"] == {"message.type": "FIFO"}
    status, answer, _ = await asyncio.to_thread(http, base, "/api/topics", {"topic": "ConsoleNew", "readQueueNums": 2,
                                                                           "writeQueueNums": 2, "messageType": "ODD"})
    assert status == 400 and "value is not in set" in answer["error"]
    status, listing, _ = await asyncio.to_thread(http, base, "/api/topics")
    assert {t["topic"]: t["messageType"] for t in listing["topics"]}["ConsoleNew"] == "FIFO"
    # the broker's own checks answer, remark included
    status, answer, _ = await asyncio.to_thread(http, base, "/api/topics", {"topic": "bad topic!", "readQueueNums": 1,
                                                                           "writeQueueNums": 1, "perm": 6})
    assert status == 400 and "bad topic!" in answer["error"] or "topic" in answer["error"].lower()
    status, answer, _ = await asyncio.to_thread(http, base, "/api/topics", {"topic": "X", "readQueueNums": "many"})
    assert status == 400 and "readQueueNums" in answer["error"]
    status, answer, _ = await asyncio.to_thread(http, base, "/api/topics", {"topic": "X"}, content_type="text/plain")
    assert status == 415
    status, answer, _ = await asyncio.to_thread(http, base, "/api/messages/notanumber")
    assert status == 400 and "offset" in answer["error"]
    status, answer, _ = await asyncio.to_thread(http, base, "/api/topics/NoSuchTopic")
    assert status == 404 and "NoSuchTopic" in answer["error"]
    status, answer, _ = await asyncio.to_thread(http, base, "/api/topics/ConsoleNew", {}, method="DELETE")
    assert status == 200
    status, _, _ = await asyncio.to_thread(http, base, "/api/topics/ConsoleNew")
    assert status == 404

    # reset by time: to the start (everything again), then past the end (nothing left)
    status, answer, _ = await asyncio.to_thread(http, base, f"/api/groups/{GROUP}/reset", {"topic": TOPIC,
                                                                                          "timestamp": 0})
    assert status == 200 and answer["offsets"] == [{"queueId": 0, "offset": 0}], answer
    async with await WireClient.connect(console_broker.addr) as client:
        query = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"}
        assert (await client.request(RC.QUERY_CONSUMER_OFFSET, query)).ext_fields["offset"] == "0"
        status, answer, _ = await asyncio.to_thread(http, base, f"/api/groups/{GROUP}/reset",
                                                    {"topic": TOPIC, "timestamp": int(time.time() * 1000) + 60_000})
        assert answer["offsets"] == [{"queueId": 0, "offset": 5}], answer
        assert (await client.request(RC.QUERY_CONSUMER_OFFSET, query)).ext_fields["offset"] == "5"
    status, detail, _ = await asyncio.to_thread(http, base, f"/api/groups/{GROUP}")
    assert detail["lag"] == 0

    # a body that is not text: shown as hex and base64 only
    async with await WireClient.connect(console_broker.addr) as client:
        sent = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(TOPIC, 0), b"\xff\xfe\x00binary")
    _, _, phys = decode_offset_msg_id(sent.ext_fields["msgId"])
    status, message, _ = await asyncio.to_thread(http, base, f"/api/messages/{phys}")
    assert status == 200 and message["body"]["text"] is None and message["body"]["json"] is None
    assert message["body"]["hex"].startswith("ff fe 00 62") and message["body"]["size"] == 9
    status, missing, _ = await asyncio.to_thread(http, base, f"/api/messages/{phys + 1}")
    assert status == 404 and "no message" in missing["error"]


async def test_with_acl_everyone_signs_in_and_only_admins_change_things(broker_factory, tmp_path):
    write_acl(tmp_path / "plain_acl.yml", reports="PUB|SUB")
    port = free_port()
    broker = broker_factory(extra={"aclEnable": "true", "dashboardPort": port})
    base = f"http://127.0.0.1:{port}"
    status, answer, _ = await asyncio.to_thread(http, base, "/api/session")
    assert (status, answer["aclEnabled"], answer["signedIn"]) == (200, True, False)
    status, answer, _ = await asyncio.to_thread(http, base, "/api/topics")
    assert status == 401 and "sign in" in answer["error"]
    status, answer, cookie = await asyncio.to_thread(http, base, "/api/login", {"accessKey": "app_key01",
                                                                                "secretKey": "wrong"})
    assert (status, cookie) == (401, None)
    status, answer, app = await asyncio.to_thread(http, base, "/api/login", {"accessKey": "app_key01",
                                                                             "secretKey": "app_secret01"})
    assert status == 200 and answer == {"signedIn": True, "accessKey": "app_key01", "admin": False} and app
    status, answer, _ = await asyncio.to_thread(http, base, "/api/topics", cookie=app)
    assert status == 200 and not any(t["topic"] == "TBW102" for t in answer["topics"])  # DENY by default
    status, answer, _ = await asyncio.to_thread(http, base, "/api/topics", {"topic": "AclMade", "readQueueNums": 1,
                                                                           "writeQueueNums": 1, "perm": 6}, cookie=app)
    assert status == 403 and "app_key01 is not an admin" in answer["error"]
    status, answer, admin = await asyncio.to_thread(http, base, "/api/login", {"accessKey": "broker_admin",
                                                                               "secretKey": "admin-secret-1"})
    assert status == 200 and answer["admin"] is True
    status, answer, _ = await asyncio.to_thread(http, base, "/api/topics", cookie=admin)
    assert status == 200 and any(t["topic"] == "TBW102" for t in answer["topics"])
    status, answer, _ = await asyncio.to_thread(http, base, "/api/topics", {"topic": "AclMade", "readQueueNums": 1,
                                                                           "writeQueueNums": 1, "perm": 6},
                                                cookie=admin)
    assert status == 200, answer
    status, _, _ = await asyncio.to_thread(http, base, "/api/logout", {}, cookie=admin)
    assert status == 200
    status, _, _ = await asyncio.to_thread(http, base, "/api/topics", cookie=admin)
    assert status == 401
    assert "console: failed sign-in for 'app_key01'" in broker.log_text()


async def test_the_login_page_signs_in_in_a_browser(broker_factory, tmp_path, chrome):
    from selenium.webdriver.common.by import By

    write_acl(tmp_path / "plain_acl.yml")
    port = free_port()
    broker_factory(extra={"aclEnable": "true", "dashboardPort": port})
    base = f"http://127.0.0.1:{port}"
    chrome.get(base + "/#/topics")
    await asyncio.to_thread(wait_rendered, chrome, "/login")
    chrome.find_element(By.ID, "login-key").send_keys("app_key01")
    chrome.find_element(By.ID, "login-secret").send_keys("app_secret01")
    chrome.find_element(By.ID, "login-submit").click()
    await asyncio.to_thread(wait_rendered, chrome, "/")
    assert "app_key01" in chrome.find_element(By.ID, "who").text and "read only" in chrome.find_element(By.ID, "who").text
    await asyncio.to_thread(open_page, chrome, base, "/topics")
    assert not chrome.find_elements(By.ID, "topic-form")  # no create form for a read-only account


def test_a_busy_dashboard_port_stops_start_up_only_when_set(broker_factory):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        broker = broker_factory(extra={"dashboardPort": port}, start=False)
        with pytest.raises(RuntimeError):
            broker.start(timeout=15)
        assert f"dashboardPort {port} is already in use" in broker.log_text()


def test_the_default_dashboard_port_is_best_effort(broker_factory, tmp_path):
    holder = socket.socket()
    try:
        try:
            holder.bind(("127.0.0.1", 8082))
            holder.listen(1)
        except OSError:
            pass  # already taken by something else: busy either way
        broker = broker_factory(extra={"dashboardPort": None}, start=False)
        conf = broker.conf_path.read_text().replace("dashboardPort=None\n", "")
        broker.conf_path.write_text(conf)
        broker.start()
        assert "web console not started: dashboardPort 8082 is already in use" in broker.log_text()
    finally:
        holder.close()


async def test_resend_all_and_reset_with_an_online_consumer(console_broker):
    """An online push consumer (our client) follows a reset: RESET_CONSUMER_CLIENT_OFFSET makes it drop the queue
    and start again from the new offset."""
    base = console_broker.console
    await seed_broker(console_broker.addr)
    rec = Recorder()
    consumer = push_consumer(GROUP, console_broker.namesrv_addr, TOPIC, rec)
    await consumer.start()
    try:
        await wait_for(lambda: len(rec.deliveries) >= 4, "orders 2..5 (the group committed offset 1)", 20)
        status, answer, _ = await asyncio.to_thread(http, base, f"/api/groups/{GROUP}/reset",
                                                    {"topic": TOPIC, "timestamp": 0})
        assert status == 200 and answer["consumersTold"] == 1, answer
        await wait_for(lambda: len([d for d in rec.deliveries if d[1] == TOPIC]) >= 9, "all 5 orders again", 20)
        offsets = collections.Counter(d[4] for d in rec.deliveries if d[1] == TOPIC)
        assert offsets == {0: 1, 1: 2, 2: 2, 3: 2, 4: 2}, rec.deliveries  # 1..4, then 0..4 again
    finally:
        await consumer.shutdown()
    status, answer, _ = await asyncio.to_thread(http, base, f"/api/dlq/{GROUP}/resend", {"all": True})
    assert status == 200 and answer["resent"] == 1, answer
    async with await WireClient.connect(console_broker.addr) as client:
        resent = await pull_records(client, "%RETRY%" + GROUP, 0)
        assert [r.body for r in resent][-1:] == [b"poison message"]


async def test_mqadmin_reset_offset_by_time(console_broker):
    """The same broker request (INVOKE_BROKER_TO_RESET_OFFSET) from mqadmin."""
    from tests.support.admin import mqadmin, ok_json

    await seed_broker(console_broker.addr)
    ns = console_broker.namesrv_addr
    answer = await asyncio.to_thread(ok_json, ns, "resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "-1")
    assert answer["offsets"] == [{"brokerName": "broker-a", "queueId": 0, "offset": 5}], answer
    assert answer["consumersTold"] == 0
    back = await asyncio.to_thread(ok_json, ns, "resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "0", "-f",
                                   "false")  # not forced: only backwards moves, and 0 is behind 5
    assert back["offsets"][0]["offset"] == 0
    forward = await asyncio.to_thread(ok_json, ns, "resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "now",
                                      "-f", "false")  # forward is refused without force: stays at 0
    assert forward["offsets"][0]["offset"] == 0
    text = await asyncio.to_thread(mqadmin, ns, "resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "-1")
    assert text.returncode == 0 and "No consumer of the group is online" in text.stdout
    missing = await asyncio.to_thread(mqadmin, ns, "resetOffsetByTime", "-g", GROUP, "-t", "NoSuchTopic", "-s", "0")
    assert missing.returncode != 0 and "NoSuchTopic" in missing.stderr
