"""Interop: consumption retries and the dead-letter queue, driven by ali-ons (a pure-JavaScript client).

The ali-ons push consumer's handler throws for chosen messages. ali-ons then sends CONSUMER_SEND_MSG_BACK
(code 36: header offset = the failed delivery's commit-log offset, originMsgId = its offset msgId,
originTopic = the real topic even for a retry delivery, delayLevel 0, maxReconsumeTimes = its own option)
and treats the message as consumed; it only resends through its inner producer when that request fails.
The broker must then redeliver through %RETRY%<group> after delay level 3 + reconsumeTimes, with the
original body/keys/tags/UNIQ_KEY, RETRY_TOPIC and ORIGIN_MESSAGE_ID, and an incremented reconsume count,
and move a message whose reconsumeTimes reached maxReconsumeTimes to %DLQ%<group> instead.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.support import interop_probe as probe

pytestmark = pytest.mark.interop

# Per message: how many times the handler throws before it succeeds ("always": it never does).
PLAN = [0, 1, 2, "always", 0, 1, 0, "always"]
MAX_RECONSUME = 2
FAST_DELAY_LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms 900ms 1s 1s 1s 1s 1s 1s 1s 1s 1s"
NODE_TIMEOUT_S = 30


@pytest.fixture
def retry_broker(broker_factory):
    return broker_factory(extra={"messageDelayLevel": FAST_DELAY_LEVELS})


def _expected_deliveries(plan) -> int:
    return MAX_RECONSUME + 1 if plan == "always" else plan + 1


def _run(node_runtime, broker, topic: str, group: str) -> dict:
    cmd = [node_runtime.node, str(node_runtime.script("consume_retry.js")), "--namesrv", broker.namesrv_addr,
           "--topic", topic, "--group", group, "--plan", ",".join(str(p) for p in PLAN),
           "--max-reconsume", str(MAX_RECONSUME), "--timeout-ms", str((NODE_TIMEOUT_S - 5) * 1000),
           "--step-timeout-ms", "12000", "--grace-ms", "1500"]
    try:
        proc = subprocess.run(cmd, cwd=node_runtime.project_dir, capture_output=True, text=True,
                              timeout=NODE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"node retry scenario hung for {NODE_TIMEOUT_S} s\nstderr:\n{(exc.stderr or '')[-3000:]}\n"
                    f"broker log:\n{broker.log_text()[-4000:]}")
    context = f"node exit {proc.returncode}\nstderr:\n{proc.stderr[-4000:]}\nbroker log:\n{broker.log_text()[-4000:]}"
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"node printed no JSON summary\nstdout:\n{proc.stdout[-2000:]}\n{context}"
    summary = json.loads(lines[-1])
    brief = [(d["index"], d["attempt"], d["outcome"], d["reconsumeTimes"], d["receivedMs"]) for d in summary["deliveries"]]
    assert proc.returncode == 0 and summary["ok"], (
        f"node retry scenario failed: {summary.get('failure')}\ndeliveries (index, attempt, outcome, "
        f"reconsumeTimes, ms): {brief}\nsend-backs: {summary['sendBacks']}\n{context}")
    return summary


def test_ali_ons_failed_consumption_is_retried_then_dead_lettered(node_runtime, retry_broker):
    broker = retry_broker
    topic, group = "InteropRetryTopic", "interop_retry_group"
    retry_topic, dlq_topic = f"%RETRY%{group}", f"%DLQ%{group}"
    summary = _run(node_runtime, broker, topic, group)

    sent = {s["index"]: s for s in summary["sent"]}
    assert len(sent) == len(PLAN) and all(s["status"] == "SEND_OK" for s in sent.values())
    deliveries = summary["deliveries"]
    by_index = {i: [d for d in deliveries if d["index"] == i] for i in range(len(PLAN))}

    # Every message came back exactly as often as its plan says; successful ones were never redelivered.
    for i, plan in enumerate(PLAN):
        got = by_index[i]
        assert [d["attempt"] for d in got] == list(range(1, _expected_deliveries(plan) + 1)), (i, plan, got)
        if plan != "always":
            assert got[-1]["outcome"] == "consumed" and all(d["outcome"] == "thrown" for d in got[:-1])
        else:
            assert all(d["outcome"] == "thrown" for d in got)

    # Each redelivery is the same message through the retry topic, with its reconsume count.
    first_uniq = {}
    for i, got in by_index.items():
        s = sent[i]
        first = got[0]
        assert first["msgId"] == s["msgId"] and first["reconsumeTimes"] == 0
        assert (first["queueId"], first["queueOffset"]) == (s["queueId"], s["queueOffset"])
        assert first["retryTopicProperty"] is None and first["originMessageId"] is None
        first_uniq[i] = first["properties"].get("UNIQ_KEY")
        for n, d in enumerate(got):
            assert (d["topic"], d["tags"], d["keys"], d["body"]) == (topic, "TagA", s["key"], s["body"]), d
            assert d["reconsumeTimes"] == n, f"message {i} delivery {n + 1}: reconsumeTimes {d['reconsumeTimes']}"
            assert d["properties"].get("UNIQ_KEY") == first_uniq[i]
        for d in got[1:]:
            # ali-ons shows the topic as RETRY_TOPIC; the record itself came from %RETRY%<group>.
            assert d["retryTopicProperty"] == topic, d
            assert d["originMessageId"] == s["msgId"], "ORIGIN_MESSAGE_ID must stay the first delivery's msgId"
            assert d["properties"].get("REAL_TOPIC") == retry_topic, d["properties"]
            assert d["msgId"] != s["msgId"]
    all_ids = [d["msgId"] for d in deliveries]
    assert len(all_ids) == len(set(all_ids)), "every (re)delivery is a distinct stored record"

    # What ali-ons actually did on a thrown handler: one CONSUMER_SEND_MSG_BACK per failure, all accepted;
    # no fallback resend through its producer.
    assert summary["fallbackResends"] == []
    thrown = [d for d in deliveries if d["outcome"] == "thrown"]
    backs = summary["sendBacks"]
    assert len(backs) == len(thrown), f"{len(backs)} send-backs for {len(thrown)} failures"
    assert all(b["responseCode"] == 0 and b["error"] is None for b in backs), backs
    by_offset = {b["header"]["offset"]: b for b in backs}
    assert len(by_offset) == len(backs)
    for d in thrown:
        b = by_offset.get(d["commitLogOffset"])
        assert b is not None, f"no send-back for failed delivery {d}"
        h = b["header"]
        assert b["addr"] == broker.addr
        assert (h["group"], h["delayLevel"], h["maxReconsumeTimes"], h["originTopic"], h["originMsgId"]) == (
            group, 0, MAX_RECONSUME, topic, d["msgId"]), h

    # Messages that always failed are in the DLQ (queue 0), unchanged; nothing else is.
    always = [i for i, p in enumerate(PLAN) if p == "always"]
    dlq = probe.pull_all(broker.addr, dlq_topic, "interop_verifier", 0)
    assert sorted(m.body.decode() for m in dlq) == sorted(sent[i]["body"] for i in always), \
        [(m.body, m.properties) for m in dlq]
    delivered_ids = set(all_ids)
    for m in dlq:
        i = int(m.body.decode().rsplit("-", 1)[1])
        assert m.topic == dlq_topic
        assert m.properties.get("KEYS") == sent[i]["key"] and m.properties.get("TAGS") == "TagA"
        assert m.properties.get("UNIQ_KEY") == first_uniq[i]
        assert m.properties.get("ORIGIN_MESSAGE_ID") == sent[i]["msgId"]
        assert m.properties.get("RETRY_TOPIC") == topic
        assert m.offset_msg_id not in delivered_ids, "the consumer must not see the dead-lettered copy"

    # The retry topic holds exactly the redelivered records, and the group's offset there reached its end.
    retry_queues = max(q["readQueueNums"] for q in probe.topic_route(broker.namesrv_addr, retry_topic)["queueDatas"])
    stored_retry = {}
    for q in range(retry_queues):
        for m in probe.pull_all(broker.addr, retry_topic, "interop_verifier", q):
            stored_retry[m.offset_msg_id] = m
    redelivered = {d["msgId"]: d for d in deliveries if d["attempt"] > 1}
    assert set(stored_retry) == set(redelivered), (sorted(stored_retry), sorted(redelivered))
    for msg_id, m in stored_retry.items():
        assert m.body.decode() == redelivered[msg_id]["body"]

    deadline = time.monotonic() + 5
    while True:
        done = {q: (probe.consumer_offset(broker.addr, retry_topic, group, q), probe.max_offset(broker.addr, retry_topic, q))
                for q in range(retry_queues)}
        if all(c == m for c, m in done.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert all(c == m for c, m in done.values()), f"retry topic committed vs max offsets: {done}"
