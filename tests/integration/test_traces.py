"""Message traces end to end: this project's producer and push consumer with enable_trace=True write reference-format
records to the trace topic the broker created (traceTopicEnable); the web console (in headless Chromium) and
`mqadmin queryMsgTraceById` show who sent the message, where it was stored and which groups consumed it."""

from __future__ import annotations

import asyncio
import json

import pytest

from client import ConsumeResult, Message, Producer
from protocol.trace import decode_records
from tests.support.admin import mqadmin, ok_json
from tests.support.broker_process import free_port
from tests.support.client_helpers import push_consumer, wait_for
from tests.support.console import http, open_page, screenshot, start_browser
from tests.support.wire import WireClient, pull_records

TOPIC = "TraceOrders"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


@pytest.fixture
def trace_broker(broker_factory):
    port = free_port()
    broker = broker_factory(extra={"dashboardPort": port, "traceTopicEnable": "true",
                                   "messageDelayLevel": " ".join(["300ms"] * 18)})  # retries come back quickly
    broker.console = f"http://127.0.0.1:{port}"
    return broker


@pytest.fixture
def chrome(tmp_path_factory):
    browser = start_browser(tmp_path_factory.mktemp("chromium"))
    yield browser
    browser.quit()


async def _trace(base: str, msg_id: str, consumptions: int) -> dict | None:
    """The trace once it holds its send and `consumptions` finished consumptions."""
    status, answer, _ = await asyncio.to_thread(http, base, f"/api/traces/{msg_id}")
    if status != 200 or not answer["sends"]:
        return None
    if sum(len(g["consumptions"]) for g in answer["consumers"]) < consumptions:
        return None
    if any(c["status"] == "in progress" for g in answer["consumers"] for c in g["consumptions"]):
        return None
    return answer


async def test_traces_of_our_producer_and_consumers_in_the_console_and_mqadmin(trace_broker, chrome, tmp_path):
    from selenium.webdriver.common.by import By

    ns, base = trace_broker.namesrv_addr, trace_broker.console
    ok_json(ns, "updateTopic", "-t", TOPIC, "-r", "1", "-w", "1")
    failed_once: list[str] = []

    async def happy(msgs):
        return ConsumeResult.SUCCESS

    async def flaky(msgs):
        if not failed_once:
            failed_once.append(msgs[0].msg_id)
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    async with Producer("trace-pg", ns, enable_trace=True) as producer:
        assert producer.trace_dispatcher is not None
        sent = await producer.send(Message(TOPIC, b"traced order", tags="paid", keys=["order-7"]))
        consumers = [push_consumer("trace-cg", ns, TOPIC, happy, enable_trace=True),
                     push_consumer("trace-cg-flaky", ns, TOPIC, flaky, enable_trace=True)]
        for consumer in consumers:
            await consumer.start()
        try:
            trace = await wait_for(lambda: _trace(base, sent.msg_id, 3), "the trace of both groups", 40, 0.3)
        finally:
            for consumer in consumers:
                await consumer.shutdown()

    # the records on the trace topic are in the reference's format and keyed by the msgId
    async with await WireClient.connect(trace_broker.addr) as client:
        stored = await pull_records(client, TRACE_TOPIC, 0)
    records = [r for m in stored for r in decode_records(m.body)]
    assert {r.type for r in records} >= {"Pub", "SubBefore", "SubAfter"}
    assert any(sent.msg_id in m.properties.get("KEYS", "").split() for m in stored)

    (send,) = trace["sends"]
    assert (send["producerGroup"], send["topic"], send["status"], send["tags"], send["keys"]) == \
           ("trace-pg", TOPIC, "success", "paid", "order-7")
    assert send["storeHost"] == trace_broker.addr and send["costMs"] >= 0 and send["offsetMsgId"] == sent.offset_msg_id
    by_group = {g["consumerGroup"]: g["consumptions"] for g in trace["consumers"]}
    assert [c["status"] for c in by_group["trace-cg"]] == ["success"]
    flaky_calls = by_group["trace-cg-flaky"]
    assert [c["status"] for c in flaky_calls] == ["failed", "success"], flaky_calls
    assert flaky_calls[0]["result"] == "FAILED" and flaky_calls[1]["retryTimes"] == 1

    # mqadmin, the reference's command name and this project's alias
    answer = ok_json(ns, "queryMsgTraceById", "-i", sent.msg_id)
    assert [s["producerGroup"] for s in answer["sends"]] == ["trace-pg"]
    assert sorted(g["consumerGroup"] for g in answer["consumers"]) == ["trace-cg", "trace-cg-flaky"]
    text = mqadmin(ns, "queryTraceByMsgId", "-i", sent.msg_id, "-t", TRACE_TOPIC)
    assert text.returncode == 0, text.stderr
    assert "#ProducerGroup" in text.stdout and "trace-pg" in text.stdout and "trace-cg-flaky" in text.stdout
    assert "success" in text.stdout and "failed" in text.stdout
    missing = mqadmin(ns, "queryMsgTraceById", "-i", "NOSUCHMESSAGEID")
    assert missing.returncode == 4 and "no trace of message NOSUCHMESSAGEID" in missing.stderr

    # the console: from the message's page to its trace
    found = await asyncio.to_thread(open_page, chrome, base, f"/messages?id={sent.msg_id}&topic={TOPIC}")
    assert "1 message(s)" in found
    chrome.find_element(By.CSS_SELECTOR, "#results tbody a").click()
    await asyncio.to_thread(wait_until_loaded_prefix, chrome, "/message/")
    chrome.find_element(By.ID, "trace-link").click()
    await asyncio.to_thread(wait_until_loaded_prefix, chrome, "/trace/")
    sends = chrome.find_element(By.ID, "trace-sends").text
    assert "trace-pg" in sends and trace_broker.addr in sends and "success" in sends
    assert "trace-cg" in chrome.find_element(By.ID, "trace-group-trace-cg").text
    flaky_rows = chrome.find_elements(By.CSS_SELECTOR, "#trace-group-trace-cg-flaky tbody tr")
    assert [("failed" in r.text, "success" in r.text) for r in flaky_rows] == [(True, False), (False, True)]
    assert "AM" not in sends and "PM" not in sends
    screenshot(chrome, tmp_path, "console-trace.png")


def wait_until_loaded_prefix(chrome, prefix: str, timeout: float = 15.0) -> None:
    import time

    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        loaded = chrome.find_element(By.ID, "main").get_attribute("data-loaded") or ""
        if loaded.startswith(prefix):
            return
        time.sleep(0.05)
    raise AssertionError(f"the console did not render {prefix}... within {timeout} s")


async def test_trace_topic_is_created_at_start_up_and_can_be_renamed(broker_factory):
    broker = broker_factory(extra={"traceTopicEnable": "true", "msgTraceTopicName": "OpsTraces"})
    assert "OpsTraces" in ok_json(broker.namesrv_addr, "topicList")["topicList"]
    bad = broker_factory("broker-b", extra={"msgTraceTopicName": "bad topic"}, start=False)
    with pytest.raises(RuntimeError):
        bad.start(timeout=15)
    assert "msgTraceTopicName" in bad.log_text()


async def test_the_brokers_region_and_trace_switch_reach_the_producer(broker_factory):
    """A send's answer carries the broker's regionId and traceOn (MSG_REGION, TRACE_ON): the producer's result has
    them, its Pub records are stamped with the region, and a broker with traceOn=false gets no Pub records."""
    from client.trace import TraceDispatcher

    broker = broker_factory(extra={"regionId": "eu-west-1", "traceOn": "false"})
    async with Producer("RegionGroup", broker.namesrv_addr) as producer:
        result = await producer.send(Message("RegionTopic", b"x", tags="t"))
    assert (result.region_id, result.trace_on) == ("eu-west-1", False)
    dispatcher = TraceDispatcher("RegionGroup", broker.namesrv_addr)
    dispatcher.record_pub("RegionGroup", Message("RegionTopic", b"x"), result, 0, broker.addr)
    assert not dispatcher._pending  # traceOn=false: nothing recorded
    result.trace_on = True
    dispatcher.record_pub("RegionGroup", Message("RegionTopic", b"x"), result, 0, broker.addr)
    assert [r.region_id for r in dispatcher._pending] == ["eu-west-1"]


async def test_each_message_of_a_traced_batch_has_its_own_trace(broker_factory):
    broker = broker_factory(extra={"traceTopicEnable": "true"})
    ns = broker.namesrv_addr
    async with Producer("batch-pg", ns, enable_trace=True) as producer:
        result = await producer.send_batch([Message("TraceBatch", f"b{i}".encode(), tags="tb", keys=[f"bk{i}"])
                                            for i in range(3)])
    ids = result.msg_id.split(",")
    assert len(ids) == 3
    for i, msg_id in enumerate(ids):  # the producer flushed its traces when it closed
        answer = None
        for _ in range(100):
            shown = mqadmin(ns, "queryMsgTraceById", "-i", msg_id, "--json")
            if shown.returncode == 0:
                answer = json.loads(shown.stdout)
                break
            await asyncio.sleep(0.1)
        assert answer is not None, f"no trace of {msg_id}"
        assert [(s["producerGroup"], s["topic"], s["keys"]) for s in answer["sends"]] == \
            [("batch-pg", "TraceBatch", f"bk{i}")]
