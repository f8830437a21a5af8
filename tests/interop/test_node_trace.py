"""Interop: message traces written by an independent client (ali-ons, pure JavaScript; tests/interop/node/
trace_writer.js) in the reference clients' byte format, next to traces written by this project's client, shown by the
web console (headless Chromium) and by `mqadmin queryMsgTraceById`.

ali-ons has no trace support of its own: the script builds the records from the reference format's description and
sends them to RMQ_SYS_TRACE_TOPIC with ali-ons, keyed by the traced msgId as the reference's trace dispatcher does.
"""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from client import ConsumeResult, Message, Producer
from protocol.trace import CONTENT_SEP, FIELD_SEP, decode_records
from tests.support.admin import mqadmin, ok_json
from tests.support.broker_process import free_port
from tests.support.client_helpers import push_consumer, wait_for
from tests.support.console import http, open_page, screenshot, start_browser

pytestmark = pytest.mark.interop

NODE_TIMEOUT_S = 90


@pytest.fixture
def chrome(tmp_path_factory):
    browser = start_browser(tmp_path_factory.mktemp("chromium"))
    yield browser
    browser.quit()


def _run_writer(node_runtime, broker, topic: str, group: str) -> dict:
    cmd = [node_runtime.node, str(node_runtime.script("trace_writer.js")), "--namesrv", broker.namesrv_addr,
           "--topic", topic, "--group", group]
    proc = subprocess.run(cmd, cwd=node_runtime.project_dir, capture_output=True, text=True, timeout=NODE_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    context = f"exit {proc.returncode}\nstderr:\n{proc.stderr[-3000:]}\nbroker:\n{broker.log_text()[-3000:]}"
    assert lines, f"trace_writer.js printed no summary\n{context}"
    summary = json.loads(lines[-1])
    assert proc.returncode == 0 and summary["ok"], f"trace_writer.js failed: {summary.get('failure')}\n{context}"
    return summary


async def test_traces_of_ali_ons_and_of_our_client_in_the_console_and_mqadmin(node_runtime, broker_factory, chrome,
                                                                              tmp_path):
    from selenium.webdriver.common.by import By

    port = free_port()
    broker = broker_factory(extra={"dashboardPort": port, "traceTopicEnable": "true"})
    base, ns, topic = f"http://127.0.0.1:{port}", broker.namesrv_addr, "InteropTraceTopic"
    ok_json(ns, "updateTopic", "-t", topic, "-r", "1", "-w", "1")

    node = await asyncio.to_thread(_run_writer, node_runtime, broker, topic, "node-trace-cg")
    # the body is the reference's byte format, written by the script itself: our decoder reads it
    records = decode_records(node["traceBody"].encode())
    assert [r.type for r in records] == ["Pub", "SubBefore", "SubAfter"]
    assert node["traceBody"].count(FIELD_SEP) == 3 and node["traceBody"].split(FIELD_SEP)[0].count(CONTENT_SEP) == 13

    async def ok(msgs):
        return ConsumeResult.SUCCESS

    async with Producer("py-trace-pg", ns, enable_trace=True) as producer:
        ours = await producer.send(Message(topic, b"traced by this project", keys=["py-trace-key"]))
        consumer = push_consumer("py-trace-cg", ns, topic, ok, enable_trace=True)
        await consumer.start()
        try:
            async def traced():
                status, answer, _ = await asyncio.to_thread(http, base, f"/api/traces/{ours.msg_id}")
                return status == 200 and answer["sends"] and answer["consumers"] and answer
            await wait_for(traced, "this project's trace", 30, 0.3)
        finally:
            await consumer.shutdown()

    # the console's API and mqadmin, for each client's message
    status, theirs, _ = await asyncio.to_thread(http, base, f"/api/traces/{node['msgId']}")
    assert status == 200, theirs
    (send,) = theirs["sends"]
    assert (send["producerGroup"], send["status"], send["storeHost"], send["keys"]) == \
           ("node-trace-cg_PRODUCER", "success", broker.addr, "node-trace-key")
    assert send["costMs"] == node["sendCost"]
    (group,) = theirs["consumers"]
    (consumption,) = group["consumptions"]
    assert (group["consumerGroup"], consumption["status"], consumption["costMs"]) == \
           ("node-trace-cg", "success", node["consumeCost"])
    for msg_id, producer_group, consumer_group in ((node["msgId"], "node-trace-cg_PRODUCER", "node-trace-cg"),
                                                   (ours.msg_id, "py-trace-pg", "py-trace-cg")):
        answer = ok_json(ns, "queryMsgTraceById", "-i", msg_id)
        assert [s["producerGroup"] for s in answer["sends"]] == [producer_group]
        assert [g["consumerGroup"] for g in answer["consumers"]] == [consumer_group]
        text = mqadmin(ns, "queryTraceByMsgId", "-i", msg_id)
        assert text.returncode == 0 and producer_group in text.stdout and consumer_group in text.stdout

    # and in the browser: each message's trace page
    for msg_id, producer_group, consumer_group in ((node["msgId"], "node-trace-cg_PRODUCER", "node-trace-cg"),
                                                   (ours.msg_id, "py-trace-pg", "py-trace-cg")):
        await asyncio.to_thread(open_page, chrome, base, f"/trace/{msg_id}")
        sends = chrome.find_element(By.ID, "trace-sends").text
        assert producer_group in sends and broker.addr in sends and "success" in sends
        rows = chrome.find_element(By.ID, f"trace-group-{consumer_group}").text
        assert consumer_group in rows and "success" in rows
    screenshot(chrome, tmp_path, "console-trace-ali-ons.png")
