"""Interop: ali-ons (an independently written, pure-JavaScript RocketMQ remoting client) against the broker.

The Node script produces TagA/TagB messages, consumes TagA with a clustering push consumer, commits
offsets and unregisters. This test then checks, with an independent raw-protocol probe, that the broker
stored exactly what the Node producer sent and kept the consumer's committed offsets.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import defaultdict

import pytest

from tests.support import interop_probe as probe

pytestmark = pytest.mark.interop

MESSAGE_COUNT = 20
NODE_TIMEOUT_S = 120


def _log_tail(broker, chars: int = 4000) -> str:
    return broker.log_text()[-chars:] or "<empty broker output>"


def _run_node_scenario(node_runtime, broker, topic: str, group: str) -> dict:
    cmd = [node_runtime.node, str(node_runtime.script("produce_consume.js")), "--namesrv", broker.namesrv_addr,
           "--topic", topic, "--group", group, "--count", str(MESSAGE_COUNT), "--timeout-ms", str((NODE_TIMEOUT_S - 10) * 1000)]
    try:
        proc = subprocess.run(cmd, cwd=node_runtime.project_dir, capture_output=True, text=True,
                              timeout=NODE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"node scenario hung for {NODE_TIMEOUT_S} s\nstderr:\n{(exc.stderr or '')[-3000:]}\n"
                    f"broker log:\n{_log_tail(broker)}")
    context = f"node exit {proc.returncode}\nstderr:\n{proc.stderr[-4000:]}\nbroker log:\n{_log_tail(broker)}"
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"node printed no JSON summary\nstdout:\n{proc.stdout[-2000:]}\n{context}"
    summary = json.loads(lines[-1])
    assert proc.returncode == 0 and summary["ok"], f"node scenario failed: {summary.get('failure')}\n{context}"
    return summary


def test_ali_ons_produce_and_consume_with_tag_filter(node_runtime, broker):
    topic, group = "InteropNodeTopic", "interop_node_group"
    summary = _run_node_scenario(node_runtime, broker, topic, group)

    sent = summary["sent"]
    assert len(sent) == MESSAGE_COUNT
    assert all(s["status"] == "SEND_OK" for s in sent)
    tag_a = {s["msgId"]: s for s in sent if s["tag"] == "TagA"}
    assert len(tag_a) == MESSAGE_COUNT // 2, "send results must carry distinct msgIds"

    # The push consumer got every TagA message exactly once, with its body and key.
    received = summary["received"]
    assert sorted(r["msgId"] for r in received) == sorted(tag_a), (
        f"consumer received {[(r['msgId'], r['tags']) for r in received]}, expected TagA ids {sorted(tag_a)}")
    for r in received:
        s = tag_a[r["msgId"]]
        assert (r["topic"], r["tags"], r["keys"], r["body"]) == (topic, "TagA", s["key"], s["body"])
        assert (r["queueId"], r["queueOffset"]) == (s["queueId"], s["queueOffset"])
        assert r["storeHost"] == broker.addr

    # The broker filtered by tag itself: ali-ons re-checks tags, so look at what the pulls returned.
    pulled_from_topic = [p for p in summary["pulled"] if p["topic"] == topic]
    assert pulled_from_topic, "no pull returned messages"
    leaked = [p for p in pulled_from_topic if p["tags"] != "TagA"]
    assert not leaked, f"broker returned non-TagA messages to a TagA subscription: {leaked}"

    # Independent check of the store: every message the Node producer sent is there, byte for byte.
    route = probe.topic_route(broker.namesrv_addr, topic)
    assert route, "the name server has no route for the topic after the Node producer created it"
    queue_nums = max(q["readQueueNums"] for q in route["queueDatas"])
    stored = {}
    for queue_id in range(queue_nums):
        for m in probe.pull_all(broker.addr, topic, "interop_verifier", queue_id):
            stored[(m.queue_id, m.queue_offset)] = m
    assert len(stored) == MESSAGE_COUNT, f"store holds {len(stored)} messages, the Node producer sent {MESSAGE_COUNT}"
    for s in sent:
        m = stored[(s["queueId"], s["queueOffset"])]
        assert m.topic == topic
        assert m.body.decode() == s["body"]
        assert m.properties.get("TAGS") == s["tag"]
        assert m.properties.get("KEYS") == s["key"]
        assert m.offset_msg_id == s["msgId"], "send response msgId must be the offset message id (no UNIQ_KEY sent)"

    # The consumer's committed offsets reached the broker: past its last TagA message, within the queue.
    last_tag_a = defaultdict(lambda: -1)
    for s in tag_a.values():
        last_tag_a[s["queueId"]] = max(last_tag_a[s["queueId"]], s["queueOffset"])
    deadline = time.monotonic() + 5
    while True:
        committed = {q: probe.consumer_offset(broker.addr, topic, group, q) for q in last_tag_a}
        if all(c is not None and c > last_tag_a[q] for q, c in committed.items()) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for queue_id, offset in committed.items():
        max_off = probe.max_offset(broker.addr, topic, queue_id)
        assert offset is not None and last_tag_a[queue_id] < offset <= max_off, (
            f"queue {queue_id}: committed offset {offset}, last TagA offset {last_tag_a[queue_id]}, max {max_off}")
