"""Client side of consumption retry against the real broker process (short delay levels: level n = n * 100 ms,
level 18 = 2 s): redelivery through %RETRY%<group>, dead letters after max_reconsume_times, producer delays,
broadcasting without retries."""

from __future__ import annotations

import asyncio
import time


from client import ConsumeResult, Message, Producer, SendStatus

from tests.support.client_helpers import push_consumer, read_queue, wait_for


async def send_one(ns: str, topic: str, body: bytes, **kwargs):
    async with Producer("retry-it-pg", ns, default_topic_queue_nums=2) as producer:
        result = await producer.send(Message(topic, body, keys=["k-" + body.decode()]), **kwargs)
    assert result.status is SendStatus.SEND_OK
    return result


class Deliveries:
    """Listener failing the first `fail` deliveries of every message (fail < 0: always)."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.seen: list[tuple] = []  # (msg_id, topic, reconsume_times, body, properties)

    async def __call__(self, msgs):
        for m in msgs:
            self.seen.append((m.msg_id, m.topic, m.reconsume_times, m.body, dict(m.properties), time.monotonic()))
        attempts = sum(1 for s in self.seen if s[3] == msgs[0].body)
        if self.fail < 0 or attempts <= self.fail:
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS


async def test_message_failed_three_times_arrives_a_fourth_time_with_same_id(retry_broker):
    ns, topic, group = retry_broker.namesrv_addr, "CliRetry3", "cg-retry3"
    listener = Deliveries(fail=3)
    consumer = push_consumer(group, ns, topic, listener)
    await consumer.start()
    try:
        sent = await send_one(ns, topic, b"thrice")
        await wait_for(lambda: len(listener.seen) >= 4, "4 deliveries", timeout=12)
        await asyncio.sleep(0.8)  # succeeded on the 4th: nothing more comes
    finally:
        await consumer.shutdown()
    assert [s[2] for s in listener.seen] == [0, 1, 2, 3]
    assert {s[0] for s in listener.seen} == {sent.msg_id}  # UNIQ_KEY survives every retry
    assert all(s[1] == topic for s in listener.seen)  # original topic restored, not %RETRY%cg-retry3
    fourth = listener.seen[3][4]
    assert fourth["RETRY_TOPIC"] == topic and fourth.get("KEYS") == "k-thrice"
    # retries are delayed by level 3 + reconsume_times (300, 400, 500 ms here)
    gaps = [b[5] - a[5] for a, b in zip(listener.seen, listener.seen[1:])]
    assert all(g >= 0.25 for g in gaps), gaps


async def test_always_failing_message_ends_in_the_dlq_after_max_reconsume_times(retry_broker):
    ns, topic, group = retry_broker.namesrv_addr, "CliRetryDlq", "cg-retry-dlq"
    listener = Deliveries(fail=-1)
    consumer = push_consumer(group, ns, topic, listener, max_reconsume_times=2)
    await consumer.start()
    try:
        sent = await send_one(ns, topic, b"poison")
        dead = await wait_for(lambda: read_queue(ns, group, "%DLQ%" + group), "the DLQ copy", timeout=12)
        await asyncio.sleep(0.8)  # dead: no further delivery
    finally:
        await consumer.shutdown()
    assert [s[2] for s in listener.seen] == [0, 1, 2]  # max_reconsume_times=2 (group default would be 16)
    [m] = dead
    assert m.topic == "%DLQ%" + group and m.queue_id == 0 and m.body == b"poison"
    assert m.msg_id == sent.msg_id and m.properties["RETRY_TOPIC"] == topic
    assert m.reconsume_times == 3 and m.properties.get("ORIGIN_MESSAGE_ID")
    assert "DELAY" not in m.properties


async def test_delayed_message_is_not_delivered_before_its_delay(retry_broker):
    ns, topic, group = retry_broker.namesrv_addr, "CliDelayed", "cg-delayed"
    got: list[tuple[float, object]] = []

    async def listener(msgs):
        got.extend((time.monotonic(), m) for m in msgs)
        return ConsumeResult.SUCCESS

    consumer = push_consumer(group, ns, topic, listener)
    await consumer.start()
    try:
        await send_one(ns, topic, b"warm")  # the topic exists and is being pulled
        await wait_for(lambda: len(got) == 1, "the undelayed message")
        sent_at = time.monotonic()
        sent = await send_one(ns, topic, b"later", delay_level=18)  # 2 s
        await asyncio.sleep(1.2)
        assert len(got) == 1, "the delayed message arrived early"
        assert not [m for m in await read_queue(ns, group, topic) if m.body == b"later"]
        await wait_for(lambda: len(got) == 2, "the delayed message", timeout=6)
    finally:
        await consumer.shutdown()
    arrived, m = got[1]
    assert arrived - sent_at >= 1.8
    assert m.body == b"later" and m.topic == topic and m.msg_id == sent.msg_id and m.reconsume_times == 0


async def test_broadcasting_consumer_does_not_retry(retry_broker, tmp_path):
    ns, topic, group = retry_broker.namesrv_addr, "CliBroadcastNoRetry", "cg-bc-noretry"
    listener = Deliveries(fail=-1)
    consumer = push_consumer(group, ns, topic, listener, message_model="BROADCASTING", offset_store_dir=tmp_path)
    await consumer.start()
    try:
        bodies = [f"b{i}".encode() for i in range(4)]
        for body in bodies:
            await send_one(ns, topic, body)
        await wait_for(lambda: len(listener.seen) >= 4, "4 deliveries")
        await asyncio.sleep(1.0)  # a retry would come back after 300 ms
    finally:
        await consumer.shutdown()
    assert sorted(s[3] for s in listener.seen) == bodies  # each exactly once
    assert await read_queue(ns, group, "%RETRY%" + group) == []
    assert await read_queue(ns, group, "%DLQ%" + group) == []
