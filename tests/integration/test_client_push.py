"""The push consumer (and producer) against the real broker process: delivery guarantees, rebalancing, filters,
start positions, retries, broadcasting, flow control and graceful shutdown."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from tests.support.broker_process import BrokerProcess

from client import (
    ConsumeResult,
    Message,
    MessageSelector,
    Producer,
    PullConsumer,
    PushConsumer,
    SendStatus,
)
from client.allocate import AllocateMessageQueueConsistentHash
from client.instance import local_ip_towards
from client.message import MessageQueue

from tests.support.client_helpers import Recorder, push_consumer, wait_for

DELAY_LEVELS = " ".join(f"{100 * (i + 1)}ms" for i in range(18))


@pytest.fixture(scope="module")
def mq_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("client-push"), "broker-client",
                           extra={"enablePropertyFilter": "true", "messageDelayLevel": DELAY_LEVELS}).start()
    yield broker
    broker.stop()


async def produce(ns: str, topic: str, count: int, prefix: str = "m", queue_nums: int = 4, **message_kwargs) -> list:
    """count messages (bodies prefix-0 ...), in batches of 50, via a fresh producer."""
    bodies = [f"{prefix}-{i}".encode() for i in range(count)]
    async with Producer("client-it-pg", ns, default_topic_queue_nums=queue_nums) as producer:
        for i in range(0, count, 50):
            r = await producer.send_batch([Message(topic, b, **message_kwargs) for b in bodies[i:i + 50]])
            assert r.status is SendStatus.SEND_OK
    return bodies


def owned(consumer, topic: str) -> set:
    """The consumer's assigned queues of topic (not its %RETRY% queues)."""
    return {q for q in consumer.assigned_queues() if q.topic == topic}


async def committed_offsets(ns: str, group: str, topic: str) -> dict[int, tuple[int, int]]:
    """queue id -> (group's committed offset, queue max offset)."""
    async with PullConsumer(group, ns) as pull:
        out = {}
        for mq in await pull.fetch_message_queues(topic):
            out[mq.queue_id] = (await pull.fetch_consume_offset(mq), await pull.max_offset(mq))
        return out


async def test_exactly_once_to_one_group_and_offsets_committed_at_shutdown(mq_broker):
    ns, topic = mq_broker.namesrv_addr, "CliExactlyOnce"
    sent = await produce(ns, topic, 400)
    rec = Recorder()
    consumer = push_consumer("cg-exactly-once", ns, topic, rec)
    await consumer.start()
    try:
        await wait_for(lambda: len(rec.deliveries) >= 400, "400 deliveries")
        await asyncio.sleep(0.5)  # nothing more arrives in steady state
    finally:
        await consumer.shutdown()
    assert rec.bodies == set(sent) and len(rec.deliveries) == 400 and not rec.duplicates()
    offsets = await committed_offsets(ns, "cg-exactly-once", topic)
    assert offsets and all(committed == high for committed, high in offsets.values()), offsets

    # a restarted member resumes from the committed offsets: only new messages
    rec2 = Recorder()
    again = push_consumer("cg-exactly-once", ns, topic, rec2)
    await again.start()
    try:
        more = await produce(ns, topic, 20, prefix="late")
        await wait_for(lambda: len(rec2.deliveries) >= 20, "20 late deliveries")
        await asyncio.sleep(0.3)
    finally:
        await again.shutdown()
    assert rec2.bodies == set(more) and not rec2.duplicates()


async def test_two_groups_each_get_everything(mq_broker):
    ns, topic = mq_broker.namesrv_addr, "CliTwoGroups"
    sent = await produce(ns, topic, 200)
    recs = [Recorder(), Recorder()]
    consumers = [push_consumer(f"cg-two-{i}", ns, topic, rec) for i, rec in enumerate(recs)]
    for c in consumers:
        await c.start()
    try:
        await wait_for(lambda: all(len(r.deliveries) >= 200 for r in recs), "both groups to get 200")
    finally:
        for c in consumers:
            await c.shutdown()
    for rec in recs:
        assert rec.bodies == set(sent) and not rec.duplicates()


def splitting_instance_names(strategy: str, topic: str, namesrv: str) -> list:
    """Two instance names whose client ids share the 8 queues between them. A hash ring may legitimately give every
    queue to one of two random ids, so for CONSISTENT_HASH the names are chosen (bounded search) with the same
    strategy the consumers run; the other strategies always split and keep the default random names."""
    if strategy != "CONSISTENT_HASH":
        return [None, None]
    ring = AllocateMessageQueueConsistentHash()
    queues = [MessageQueue(topic, "broker-client", i) for i in range(8)]
    ip = local_ip_towards(namesrv.split(";")[0])
    for attempt in range(100):
        names = [f"split-{attempt}-a", f"split-{attempt}-b"]
        cids = [f"{ip}@{n}" for n in names]
        if all(ring.allocate("g", cid, queues, cids) for cid in cids):
            return names
    raise AssertionError("no pair of instance names splits the queues on the ring")


@pytest.mark.parametrize("strategy", ["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"])
async def test_two_consumers_in_one_group_split_the_queues(mq_broker, strategy):
    ns, topic, group = mq_broker.namesrv_addr, f"CliSplit{strategy.replace('_', '')}", f"cg-split-{strategy}"
    await produce(ns, topic, 8, prefix="warm", queue_nums=8)  # creates the topic with 8 queues
    rec = Recorder()
    consumers = [push_consumer(group, ns, topic, rec, allocate_strategy=strategy, rebalance_interval=30,
                               instance_name=name) for name in splitting_instance_names(strategy, topic, ns)]
    for c in consumers:
        await c.start()
    try:
        def split():
            a, b = (owned(c, topic) for c in consumers)
            return not (a & b) and len(a | b) == 8 and a and b

        await wait_for(split, "a disjoint split of the 8 queues")
        await wait_for(lambda: len(rec.deliveries) >= 8, "the warm-up messages")
        rec.deliveries.clear()
        rec.counts.clear()
        sent = await produce(ns, topic, 400, queue_nums=8)
        wanted = set(sent)
        await wait_for(lambda: sum(d[0] in wanted for d in rec.deliveries) >= 400, "400 deliveries")
        await asyncio.sleep(0.3)
        final = [owned(c, topic) for c in consumers]
    finally:
        for c in consumers:
            await c.shutdown()
    # A warm-up message may come once more when the second consumer takes over its queue before the first one's
    # offset reached the broker (at least once across the start-up rebalance); the 400 sent after the split come
    # exactly once.
    delivered = [d for d in rec.deliveries if d[0] in wanted]
    assert rec.bodies - wanted <= {f"warm-{i}".encode() for i in range(8)}
    assert {d[0] for d in delivered} == wanted and len(delivered) == 400
    per_queue = {q for q in (d[3] for d in delivered)}
    assert per_queue == set(range(8))
    if strategy == "AVG_BY_CIRCLE":
        ids = sorted(sorted(q.queue_id for q in o) for o in final)
        assert ids == [[0, 2, 4, 6], [1, 3, 5, 7]]


async def test_join_and_leave_rebalance_without_losing_messages(mq_broker):
    """rebalance_interval is 60 s: moving queues within seconds proves NOTIFY_CONSUMER_IDS_CHANGED drives it."""
    ns, topic, group = mq_broker.namesrv_addr, "CliJoinLeave", "cg-join-leave"
    await produce(ns, topic, 4, prefix="warm")
    rec = Recorder()
    first = push_consumer(group, ns, topic, rec, rebalance_interval=60)
    second = push_consumer(group, ns, topic, rec, rebalance_interval=60)
    stop = asyncio.Event()
    sent: list[bytes] = []

    async def keep_producing():
        async with Producer("client-it-pg", ns) as producer:
            i = 0
            while not stop.is_set() and i < 2000:
                body = f"live-{i}".encode()
                await producer.send(Message(topic, body))
                sent.append(body)
                i += 1
                await asyncio.sleep(0.004)

    await first.start()
    producing = asyncio.create_task(keep_producing())
    try:
        await wait_for(lambda: len(owned(first, topic)) == 4, "the first consumer to own all queues")
        await asyncio.sleep(0.5)
        t0 = time.monotonic()
        await second.start()
        await wait_for(lambda: len(owned(first, topic)) == 2 and len(owned(second, topic)) == 2,
                       "the join to split the queues", timeout=8)
        assert time.monotonic() - t0 < 8
        await asyncio.sleep(0.5)
        await first.shutdown()  # leaves: unregisters, the broker notifies the other member
        await wait_for(lambda: len(owned(second, topic)) == 4, "the survivor to take every queue", timeout=8)
        await asyncio.sleep(0.5)
        stop.set()
        await producing
        await wait_for(lambda: set(sent) <= rec.bodies, "every produced message to be consumed", timeout=10)
    finally:
        stop.set()
        await asyncio.gather(producing, return_exceptions=True)
        await first.shutdown()
        await second.shutdown()
    assert len(sent) > 100
    assert set(sent) <= rec.bodies  # nothing lost (a few duplicates around a rebalance are allowed)


async def test_queues_that_move_away_are_dropped_with_their_offsets_committed(mq_broker):
    """Periodic persistence is off (60 s) and pulls only carry the offset known when they were sent, so the broker
    holds the consumed end of each queue only if dropping the queue committed it (and waited for the answer)."""
    ns, topic, group = mq_broker.namesrv_addr, "CliDropCommit", "cg-drop-commit"
    sent = await produce(ns, topic, 200)
    rec = Recorder()
    consumer = push_consumer(group, ns, topic, rec, rebalance_interval=60, persist_offset_interval=60,
                             suspend_timeout=15)
    await consumer.start()
    try:
        await wait_for(lambda: len(rec.deliveries) >= 200, "everything to be consumed")
        await asyncio.sleep(0.2)
        before = await committed_offsets(ns, group, topic)
        consumer.unsubscribe(topic)  # every queue of the topic moves away from this member
        await wait_for(lambda: not owned(consumer, topic), "the queues to be dropped")
        after = await committed_offsets(ns, group, topic)
    finally:
        await consumer.shutdown()
    assert rec.bodies == set(sent)
    assert any(committed < high for committed, high in before.values()), before  # not yet committed before
    assert all(committed == high for committed, high in after.values()), after


async def test_tag_subscription_refilters_hash_collisions(mq_broker):
    ns, topic = mq_broker.namesrv_addr, "CliTags"
    from protocol.hashing import java_string_hash

    assert java_string_hash("Aa") == java_string_hash("BB")  # the broker's hash filter cannot tell them apart
    async with Producer("client-it-pg", ns) as producer:
        for i in range(30):
            tag = ("Aa", "BB", "Cc")[i % 3]
            await producer.send(Message(topic, f"{tag}-{i}".encode(), tags=tag))
    only_aa, aa_or_cc = Recorder(), Recorder()
    c1 = push_consumer("cg-tag-aa", ns, topic, only_aa, expression="Aa")
    c2 = push_consumer("cg-tag-aacc", ns, topic, aa_or_cc, expression="Aa || Cc")
    await c1.start()
    await c2.start()
    try:
        await wait_for(lambda: len(only_aa.deliveries) >= 10 and len(aa_or_cc.deliveries) >= 20, "tagged messages")
        await asyncio.sleep(0.5)
    finally:
        await c1.shutdown()
        await c2.shutdown()
    assert {b.split(b"-")[0] for b in only_aa.bodies} == {b"Aa"} and len(only_aa.deliveries) == 10
    assert {b.split(b"-")[0] for b in aa_or_cc.bodies} == {b"Aa", b"Cc"} and len(aa_or_cc.deliveries) == 20
    offsets = await committed_offsets(ns, "cg-tag-aa", topic)  # filtered-out messages still move the offset
    assert all(committed == high for committed, high in offsets.values()), offsets


async def test_sql92_subscription(mq_broker):
    ns, topic = mq_broker.namesrv_addr, "CliSql"
    async with Producer("client-it-pg", ns) as producer:
        for i in range(20):
            await producer.send(Message(topic, f"sql-{i}".encode(), properties={"a": str(i), "color": "red" if i % 2
                                                                                else "blue"}))
    rec = Recorder()
    consumer = push_consumer("cg-sql", ns, topic, rec, expression=MessageSelector.sql("a >= 10 AND color = 'red'"))
    await consumer.start()
    try:
        await wait_for(lambda: len(rec.deliveries) >= 5, "5 matching messages")
        await asyncio.sleep(0.5)
    finally:
        await consumer.shutdown()
    assert rec.bodies == {f"sql-{i}".encode() for i in (11, 13, 15, 17, 19)} and len(rec.deliveries) == 5


async def test_consume_from_where_for_a_new_group(mq_broker):
    ns, topic = mq_broker.namesrv_addr, "CliFromWhere"
    old = await produce(ns, topic, 40, prefix="old")
    await asyncio.sleep(0.3)
    boundary = int(time.time() * 1000)
    await asyncio.sleep(0.3)
    mid = await produce(ns, topic, 40, prefix="mid")
    recs = {"FIRST": Recorder(), "TIMESTAMP": Recorder(), "LAST": Recorder()}
    consumers = [
        push_consumer("cg-from-first", ns, topic, recs["FIRST"], consume_from_where="CONSUME_FROM_FIRST_OFFSET"),
        push_consumer("cg-from-ts", ns, topic, recs["TIMESTAMP"], consume_from_where="CONSUME_FROM_TIMESTAMP",
                      consume_timestamp=boundary),
        push_consumer("cg-from-last", ns, topic, recs["LAST"], consume_from_where="CONSUME_FROM_LAST_OFFSET"),
    ]
    for c in consumers:
        await c.start()
    try:
        new = await produce(ns, topic, 40, prefix="new")
        await wait_for(lambda: len(recs["FIRST"].deliveries) >= 120 and len(recs["TIMESTAMP"].deliveries) >= 80
                       and new[-1] in recs["LAST"].bodies, "all three groups")
        await asyncio.sleep(0.3)
    finally:
        for c in consumers:
            await c.shutdown()
    assert recs["FIRST"].bodies == set(old + mid + new)
    assert recs["TIMESTAMP"].bodies == set(mid + new)
    # LAST_OFFSET: the broker answers offset 0 for a queue whose first message is still stored (RocketMQ's
    # "young queue" rule), so on this fresh topic the new group also gets the old messages, exactly once.
    assert set(new) <= recs["LAST"].bodies and not recs["LAST"].duplicates()


async def test_reconsume_later_comes_back_through_the_retry_topic(mq_broker):
    ns, topic = mq_broker.namesrv_addr, "CliRetry"
    sent = await produce(ns, topic, 5, prefix="retry")
    rec = Recorder(fail_first=1)
    consumer = push_consumer("cg-retry", ns, topic, rec)
    await consumer.start()
    try:
        await wait_for(lambda: all(rec.counts[b] >= 2 for b in sent), "every message to be redelivered once",
                       timeout=15)
        await asyncio.sleep(0.5)
    finally:
        await consumer.shutdown()
    firsts = [d for d in rec.deliveries if d[2] == 0]
    retries = [d for d in rec.deliveries if d[2] >= 1]
    assert {d[0] for d in firsts} == set(sent) and {d[0] for d in retries} == set(sent)
    assert all(d[1] == topic for d in rec.deliveries)  # the original topic, not %RETRY%cg-retry
    assert all(d[2] == 1 for d in retries) and all(rec.counts[b] == 2 for b in sent)


async def test_broadcasting_gets_everything_per_instance_and_keeps_offsets_locally(mq_broker, tmp_path):
    ns, topic, group = mq_broker.namesrv_addr, "CliBroadcast", "cg-broadcast"
    await produce(ns, topic, 4, prefix="before")  # not consumed: a new broadcasting instance starts at the end
    recs = [Recorder(), Recorder()]

    def make(i, rec):
        return push_consumer(group, ns, topic, rec, message_model="BROADCASTING", instance_name=f"bc{i}",
                             offset_store_dir=tmp_path, consume_from_where="CONSUME_FROM_LAST_OFFSET")

    consumers = [make(i, r) for i, r in enumerate(recs)]
    for c in consumers:
        await c.start()
    try:
        await wait_for(lambda: all(len(owned(c, topic)) == 4 for c in consumers), "every queue on each")
        sent = await produce(ns, topic, 100, prefix="bc")
        await wait_for(lambda: all(len(r.deliveries) >= 100 for r in recs), "100 on each instance")
    finally:
        for c in consumers:
            await c.shutdown()
    for rec in recs:
        assert rec.bodies == set(sent) and not rec.duplicates()
    path = tmp_path / consumers[0].client_id / group / "offsets.json"
    table = json.loads(path.read_text())["offsetTable"]
    assert sum(e["offset"] for e in table) == 104  # 4 + 100 messages over the 4 queues
    broker_offsets = await committed_offsets(ns, group, topic)
    assert all(committed <= 0 for committed, _ in broker_offsets.values())  # nothing stored on the broker

    # restart instance 0 with the same name: it resumes from its file, so it sees only what came later
    rec_again = Recorder()
    again = make(0, rec_again)
    await again.start()
    try:
        later = await produce(ns, topic, 20, prefix="later")
        await wait_for(lambda: len(rec_again.deliveries) >= 20, "20 later messages")
        await asyncio.sleep(0.3)
    finally:
        await again.shutdown()
    assert rec_again.bodies == set(later)


async def test_flow_control_pauses_pulling_until_the_listener_catches_up(mq_broker):
    ns, topic = mq_broker.namesrv_addr, "CliFlow"
    await produce(ns, topic, 1, prefix="warm", queue_nums=1)
    release = asyncio.Event()
    seen: list[bytes] = []

    async def slow(msgs):
        await release.wait()
        seen.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    consumer = push_consumer("cg-flow", ns, topic, slow, pull_threshold_for_queue=20, pull_batch_size=8,
                             consume_thread_max=2)
    await consumer.start()
    try:
        await produce(ns, topic, 300, queue_nums=1)
        await wait_for(lambda: consumer.cached_message_count() > 20, "the cache to fill")
        await asyncio.sleep(0.5)
        cached = consumer.cached_message_count()
        assert 20 < cached <= 20 + 8  # paused: at most one pull batch past the threshold
        release.set()
        await wait_for(lambda: len(seen) >= 301, "everything once the listener is released")
    finally:
        release.set()
        await consumer.shutdown()
    assert len(set(seen)) == 301


async def test_sync_listener_runs_in_threads_and_shutdown_is_graceful(mq_broker):
    import threading

    ns, topic, group = mq_broker.namesrv_addr, "CliSyncListener", "cg-sync-listener"
    sent = await produce(ns, topic, 60)
    threads: set[str] = set()
    got: list[bytes] = []
    lock = threading.Lock()

    def blocking(msgs):
        time.sleep(0.005)  # blocking work must not stall the event loop
        with lock:
            threads.add(threading.current_thread().name)
            got.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    consumer = push_consumer(group, ns, topic, blocking, consume_thread_max=4, consume_message_batch_max_size=3)
    await consumer.start()
    try:
        await wait_for(lambda: len(got) >= 60, "60 messages through the thread pool")
    finally:
        await consumer.shutdown()
    assert sorted(got) == sorted(sent)
    assert threads and all(name.startswith(f"consume-{group}") for name in threads)
    offsets = await committed_offsets(ns, group, topic)
    assert all(committed == high for committed, high in offsets.values())


async def test_send_async_and_callback(mq_broker):
    ns = mq_broker.namesrv_addr
    done: list = []
    async with Producer("client-it-pg", ns) as producer:
        tasks = [producer.send_async(Message("CliSendAsync", f"a-{i}".encode()),
                                     callback=lambda r, e: done.append((r, e))) for i in range(20)]
        results = await asyncio.gather(*tasks)
    assert all(r.status is SendStatus.SEND_OK for r in results)
    await wait_for(lambda: len(done) == 20, "20 callbacks")
    assert all(e is None and r.status is SendStatus.SEND_OK for r, e in done)


async def test_shutdown_with_default_intervals_is_prompt(mq_broker):
    """Default rebalance interval (20 s) and long-poll hold (15 s): shutdown must not wait for either. A cancellation
    swallowed by the rebalance loop used to keep shutdown() waiting forever."""
    ns = mq_broker.namesrv_addr
    await produce(ns, "ShutdownDefaults", 8, prefix="sd")
    recorder = Recorder()
    consumer = PushConsumer("cg-shutdown-defaults", ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    consumer.subscribe("ShutdownDefaults", "*")
    consumer.register_listener(recorder)
    await consumer.start()
    await wait_for(lambda: len(recorder.bodies) == 8, "all 8 messages")
    await asyncio.sleep(0.5)  # every pull is now held by the broker (long polling)
    started = time.monotonic()
    await asyncio.wait_for(consumer.shutdown(), 10)
    assert time.monotonic() - started < 5
