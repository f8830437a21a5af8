"""Orderly push consumption against the real broker process: per-queue order under failures, dead letters for a
poison message, and exclusive queue ownership between two members of a group (broker locks)."""

from __future__ import annotations

import asyncio
import collections

import pytest

from client import ConsumeOrderlyResult, Message, Producer, PullConsumer, PullStatus, PushConsumer
from client.consumer_ops import ConsumerOps
from client.message import MessageQueue
from client.queue_locks import QueueLocks
from tests.support.broker_process import BrokerProcess

from tests.support.client_helpers import wait_for

QUEUES = 4


@pytest.fixture(scope="module")
def orderly_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("client-orderly"), "broker-orderly").start()
    yield broker
    broker.stop()


def orderly_consumer(group: str, ns: str, topic: str, listener, **kwargs) -> PushConsumer:
    """An orderly PushConsumer tuned for tests: fast rebalance and offset persistence, short long-polls."""
    options = dict(rebalance_interval=1.0, persist_offset_interval=0.3, suspend_timeout=3.0, shutdown_grace=3.0,
                   consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    options.update(kwargs)
    consumer = PushConsumer(group, ns, **options)
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener, orderly=True)
    return consumer


def by_key(queues, msg, key):
    return queues[key % len(queues)]


async def send_ordered(ns: str, topic: str, per_key: int, keys: range = range(QUEUES), pause: float = 0.0) -> None:
    """Bodies b"<key>-<seq>", each key's messages to one queue (selector), interleaved across keys."""
    async with Producer("orderly-it-pg", ns, default_topic_queue_nums=QUEUES) as producer:
        for seq in range(per_key):
            for key in keys:
                await producer.send(Message(topic, f"{key}-{seq}".encode()), selector=by_key, arg=key)
            if pause:
                await asyncio.sleep(pause)


def parse(body: bytes) -> tuple[int, int]:
    key, seq = body.decode().split("-")
    return int(key), int(seq)


class OrderlyRecorder:
    """Records deliveries per queue and flags two calls running on one queue at the same time."""

    def __init__(self, fail_times: dict[bytes, int] | None = None, work: float = 0.0) -> None:
        self.fail_times = dict(fail_times or {})  # body -> failures left (-1: always)
        self.work = work
        self.per_queue: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)  # (seq, reconsume)
        self.success: dict[int, list[int]] = collections.defaultdict(list)
        self.by_consumer: dict[str, set[int]] = collections.defaultdict(set)
        self.active: dict[int, str] = {}
        self.overlaps: list[tuple[int, str, str]] = []

    def listener(self, name: str = "c"):
        async def consume(msgs):
            qid = msgs[0].queue_id
            other = self.active.get(qid)
            if other is not None:
                self.overlaps.append((qid, other, name))
            self.active[qid] = name
            try:
                if self.work:
                    await asyncio.sleep(self.work)
                m = msgs[0]
                key, seq = parse(m.body)
                self.per_queue[qid].append((seq, m.reconsume_times))
                self.by_consumer[name].add(qid)
                left = self.fail_times.get(m.body, 0)
                if left:
                    self.fail_times[m.body] = left - 1 if left > 0 else left
                    return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
                self.success[qid].append(seq)
                return ConsumeOrderlyResult.SUCCESS
            finally:
                self.active.pop(qid, None)
        return consume


async def committed(ns: str, group: str, topic: str) -> dict[int, int]:
    async with PullConsumer(group, ns) as pull:
        return {mq.queue_id: await pull.fetch_consume_offset(mq) for mq in await pull.fetch_message_queues(topic)}


async def test_orderly_keeps_queue_order_under_failures_and_dead_letters_the_poison(orderly_broker):
    ns, topic, group = orderly_broker.namesrv_addr, "CliOrderly", "cg-orderly"
    per_key = 8
    await send_ordered(ns, topic, per_key)
    fails = {f"{k}-3".encode(): 2 for k in range(QUEUES)}  # every queue: seq 3 fails twice, then succeeds
    fails[b"1-5"] = -1  # poison: never succeeds
    rec = OrderlyRecorder(fails)
    consumer = orderly_consumer(group, ns, topic, rec.listener(), max_reconsume_times=2,
                                suspend_current_queue_time_millis=100)
    await consumer.start()
    try:
        await wait_for(lambda: sum(len(v) for v in rec.success.values()) >= QUEUES * per_key - 1,
                       "everything but the poison", timeout=10)
        await asyncio.sleep(0.3)
    finally:
        await consumer.shutdown()
    assert not rec.overlaps
    for qid in range(QUEUES):
        key = qid  # the selector sent key k to queue k
        expected = [s for s in range(per_key) if (key, s) != (1, 5)]
        assert rec.success[qid] == expected, (qid, rec.success[qid])
        seqs = [seq for seq, _ in rec.per_queue[qid]]
        assert seqs == sorted(seqs), (qid, seqs)  # retried in place, never skipping ahead
        assert [rt for seq, rt in rec.per_queue[qid] if seq == 3] == [0, 1, 2]
    assert [rt for seq, rt in rec.per_queue[1] if seq == 5] == [0, 1, 2]  # then dead-lettered
    assert await committed(ns, group, topic) == {q: per_key for q in range(QUEUES)}

    async with PullConsumer(group + "-dlq", ns) as pull:
        [dlq] = await pull.fetch_message_queues("%DLQ%" + group)
        result = await pull.pull(dlq, "*", 0, 32)
    assert result.status is PullStatus.FOUND
    [dead] = result.messages
    assert dead.body == b"1-5" and dead.properties["RETRY_TOPIC"] == topic and dead.queue_id == 0


async def test_two_orderly_consumers_never_share_a_queue_and_locks_are_released(orderly_broker):
    ns, topic, group = orderly_broker.namesrv_addr, "CliOrderlyPair", "cg-orderly-pair"
    per_key = 40
    await send_ordered(ns, topic, 1)  # topic with its queues exists before the consumers start
    rec = OrderlyRecorder(work=0.005)
    first = orderly_consumer(group, ns, topic, rec.listener("a"), instance_name="orderly-a")
    second = orderly_consumer(group, ns, topic, rec.listener("b"), instance_name="orderly-b")
    await first.start()
    try:
        producing = asyncio.create_task(send_ordered(ns, topic, per_key, pause=0.02))
        await asyncio.sleep(0.4)
        await second.start()
        await producing
        await wait_for(lambda: sum(len(v) for v in rec.success.values()) >= QUEUES * (per_key + 1),
                       "every message", timeout=15)
        mine = {c: {q.queue_id for q in c.assigned_queues() if q.topic == topic} for c in (first, second)}
    finally:
        await second.shutdown()
        await first.shutdown()
    assert not rec.overlaps, rec.overlaps
    assert mine[first] and mine[second] and not mine[first] & mine[second]
    assert rec.by_consumer["a"] & rec.by_consumer["b"], "no queue was handed over from the first member"
    for qid in range(QUEUES):
        assert rec.success[qid] == [0] + list(range(per_key)), (qid, rec.success[qid])  # in order, once each
    # both members unlocked their queues at shutdown: anyone else gets them at once (no 60 s expiry wait)
    async with PullConsumer(group, ns) as pull:
        queues = [mq for mq in await pull.fetch_message_queues(topic)]
        granted = await QueueLocks(pull._ops, "probe-client").lock(queues)
    assert granted == set(queues) and len(granted) == QUEUES
    assert all(isinstance(q, MessageQueue) for q in granted)


async def test_a_queue_locked_by_another_client_is_not_consumed_until_released(orderly_broker):
    ns, topic, group = orderly_broker.namesrv_addr, "CliOrderlyHeld", "cg-orderly-held"
    await send_ordered(ns, topic, 3)
    rec = OrderlyRecorder()
    async with PullConsumer(group + "-probe", ns) as probe:  # not a member: the consumer gets all 4 queues
        held = next(mq for mq in await probe.fetch_message_queues(topic) if mq.queue_id == 0)
        other = QueueLocks(ConsumerOps(probe._instance, group), "someone-else")
        assert await other.lock([held]) == {held}
        consumer = orderly_consumer(group, ns, topic, rec.listener())
        await consumer.start()
        try:
            await wait_for(lambda: all(len(rec.success[q]) == 3 for q in (1, 2, 3)), "the unlocked queues")
            await asyncio.sleep(0.5)
            assert rec.success[0] == [] and held not in consumer.assigned_queues()
            await other.unlock([held])
            await wait_for(lambda: rec.success[0] == [0, 1, 2], "queue 0 once released", timeout=5)
        finally:
            await consumer.shutdown()
