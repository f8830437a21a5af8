"""Orderly consumption (client.consume_orderly) and queue-lock bookkeeping without a broker, plus the local
reconsume count of the concurrent send-back fallback."""

from __future__ import annotations

import asyncio
import time

import pytest

from client import ConsumeOrderlyResult, ConsumeResult
from client.consume_orderly import ConsumeOrderlyService
from client.consume_service import ConsumeService
from client.consumer_ops import decode_messages
from client.message import MessageQueue
from client.offset_store import OffsetStore
from client.process_queue import ProcessQueue
from client.queue_locks import QueueLocks
from protocol.command import RemotingCommand
from protocol.ids import pack_host
from protocol.jsonlenient import dumps_compact, loads_lenient
from protocol.message import encode_record

STORE = pack_host("127.0.0.1", 10911)
MQ = MessageQueue("T", "b", 0)


def msgs(offsets, topic=b"T", props=""):
    body = b"".join(
        encode_record(
            queue_id=0, flag=0, queue_offset=o, physical_offset=o * 100, sys_flag=0, born_timestamp=1,
            born_host=STORE, store_timestamp=2, store_host=STORE, reconsume_times=0, prepared_transaction_offset=0,
            body=f"m{o}".encode(), topic=topic, properties=props.encode(),
        )
        for o in offsets
    )
    return decode_messages(body, "b", None)


class MemoryStore(OffsetStore):
    async def fetch(self, mq, zero_if_not_found=True):
        return -1


async def settle(condition, timeout=3.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def make(listener, *, send_back=None, clustering=True, max_times=16, batch=1, relock=None, suspend=0.01):
    async def accept(pq, m, level):
        return True

    svc = ConsumeOrderlyService("cg", listener, MemoryStore(), send_back or accept, thread_max=4,
                                batch_max_size=batch, clustering=clustering, max_reconsume_times=max_times,
                                suspend_time=suspend, relock=relock)
    svc.start()
    return svc


def locked_queue(mq=MQ):
    pq = ProcessQueue(mq)
    pq.lock_granted()
    return pq


async def test_failures_are_retried_in_place_without_skipping_ahead():
    seen = []
    fails = {2: 2}  # offset 2 fails twice

    async def listener(batch):
        m = batch[0]
        seen.append((m.queue_offset, m.reconsume_times))
        if fails.get(m.queue_offset, 0) > 0:
            fails[m.queue_offset] -= 1
            return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyResult.SUCCESS

    svc = make(listener)
    pq = locked_queue()
    batch = msgs(range(5))
    pq.add(batch, 5)
    svc.submit(pq, batch)
    await settle(lambda: svc.offset_store.offsets.get(MQ) == 5)
    assert seen == [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2), (3, 0), (4, 0)]
    await svc.shutdown(1)


async def test_committed_offset_never_passes_a_suspended_message():
    release = asyncio.Event()

    async def listener(batch):
        if batch[0].queue_offset == 1 and not release.is_set():
            return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyResult.SUCCESS

    svc = make(listener, suspend=0.02)
    pq = locked_queue()
    batch = msgs(range(3))
    pq.add(batch, 3)
    svc.submit(pq, batch)
    await asyncio.sleep(0.1)
    assert svc.offset_store.offsets.get(MQ) == 1  # 0 consumed, 1 keeps retrying, 2 waits behind it
    release.set()
    await settle(lambda: svc.offset_store.offsets.get(MQ) == 3)
    await svc.shutdown(1)


async def test_poison_message_goes_to_the_dlq_and_the_queue_moves_on():
    calls, dead = [], []

    def listener(batch):  # a plain function runs in the thread pool
        calls.append((batch[0].queue_offset, batch[0].reconsume_times))
        if batch[0].queue_offset == 1:
            raise RuntimeError("poison")
        return ConsumeResult.SUCCESS  # alias accepted

    async def send_back(pq, m, level):
        dead.append((m.queue_offset, level))
        return True

    svc = make(listener, send_back=send_back, max_times=2)
    pq = locked_queue()
    batch = msgs(range(3))
    pq.add(batch, 3)
    svc.submit(pq, batch)
    await settle(lambda: svc.offset_store.offsets.get(MQ) == 3)
    assert calls == [(0, 0), (1, 0), (1, 1), (1, 2), (2, 0)]
    assert dead == [(1, -1)]  # delay level -1: straight to %DLQ%<group>
    await svc.shutdown(1)


async def test_refused_dlq_send_back_keeps_the_queue_suspended():
    answers = [False, True]
    dead = []

    async def send_back(pq, m, level):
        dead.append(m.queue_offset)
        return answers.pop(0)

    svc = make(lambda batch: ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT, send_back=send_back, max_times=0)
    pq = locked_queue()
    batch = msgs([7])
    pq.add(batch, 8)
    svc.submit(pq, batch)
    await settle(lambda: svc.offset_store.offsets.get(MQ) == 8)
    assert dead == [7, 7]
    await svc.shutdown(1)


async def test_batch_failure_keeps_order_and_dead_letters_only_exhausted_messages():
    seen = []

    async def listener(batch):
        seen.append([m.queue_offset for m in batch])
        return ConsumeOrderlyResult.SUCCESS if len(seen) >= 3 else ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT

    dead = []

    async def send_back(pq, m, level):
        dead.append(m.queue_offset)
        return True

    svc = make(listener, send_back=send_back, max_times=5, batch=3)
    pq = locked_queue()
    batch = msgs(range(4))
    batch[1].reconsume_times = 5  # already exhausted: dead-lettered at its next failure
    pq.add(batch, 4)
    svc.submit(pq, batch)
    await settle(lambda: svc.offset_store.offsets.get(MQ) == 4)
    assert seen[0] == [0, 1, 2] and seen[1] == [0, 2, 3] and dead == [1]
    assert batch[0].reconsume_times == 2
    await svc.shutdown(1)


async def test_unlocked_queue_is_not_consumed_until_relocked():
    seen = []
    grant = asyncio.Event()

    async def relock(pq):
        if grant.is_set():
            pq.lock_granted()
            return True
        return False

    async def listener(batch):
        seen.append(batch[0].queue_offset)
        return ConsumeOrderlyResult.SUCCESS

    svc = make(listener, relock=relock)
    import client.consume_orderly as orderly

    orderly.RELOCK_RETRY_INTERVAL, saved = 0.01, orderly.RELOCK_RETRY_INTERVAL
    try:
        pq = ProcessQueue(MQ)
        pq.lock_granted(time.monotonic() - ProcessQueue.LOCK_EXPIRY - 1)  # renewed too long ago: expired
        assert pq.locked and not pq.holds_lock()
        batch = msgs([0, 1])
        pq.add(batch, 2)
        svc.submit(pq, batch)
        await asyncio.sleep(0.1)
        assert seen == []
        grant.set()
        await settle(lambda: seen == [0, 1])
    finally:
        orderly.RELOCK_RETRY_INTERVAL = saved
        await svc.shutdown(1)


async def test_broadcasting_orderly_needs_no_lock_and_skips_exhausted_messages(caplog):
    sent = []

    async def send_back(pq, m, level):
        sent.append(m)
        return True

    seen = []

    async def listener(batch):
        seen.append(batch[0].queue_offset)
        return (ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT if batch[0].queue_offset == 0
                else ConsumeOrderlyResult.SUCCESS)

    svc = make(listener, send_back=send_back, clustering=False, max_times=1)
    pq = ProcessQueue(MQ)  # never locked
    batch = msgs([0, 1])
    pq.add(batch, 2)
    with caplog.at_level("WARNING"):
        svc.submit(pq, batch)
        await settle(lambda: svc.offset_store.offsets.get(MQ) == 2)
    assert seen == [0, 0, 1] and sent == [] and "skipped" in caplog.text
    await svc.shutdown(1)


async def test_quiesce_waits_for_the_running_call_and_its_commit():
    started, release = asyncio.Event(), asyncio.Event()

    async def listener(batch):
        started.set()
        await release.wait()
        return ConsumeOrderlyResult.SUCCESS

    svc = make(listener)
    pq = locked_queue()
    batch = msgs([0, 1])
    pq.add(batch, 2)
    svc.submit(pq, batch)
    await started.wait()
    pq.dropped = True  # rebalance moved it away while the listener runs
    assert svc.is_busy(pq)
    assert await svc.quiesce(pq, 0.05) is False
    asyncio.get_running_loop().call_later(0.05, release.set)
    assert await svc.quiesce(pq, 2.0) is True
    assert svc.offset_store.offsets.get(MQ) == 1  # message 0 committed, 1 never started
    await svc.shutdown(1)


async def test_retry_topic_messages_keep_their_original_topic():
    seen = []

    async def listener(batch):
        seen.append(batch[0].topic)
        return ConsumeOrderlyResult.SUCCESS

    svc = make(listener)
    pq = locked_queue(MessageQueue("%RETRY%cg", "b", 0))
    batch = msgs([0], topic=b"%RETRY%cg", props="RETRY_TOPIC\x01Orders\x02")
    pq.add(batch, 1)
    svc.submit(pq, batch)
    await settle(lambda: seen == ["Orders"])
    await svc.shutdown(1)


async def test_shutdown_reports_calls_that_outlive_the_grace():
    async def listener(batch):
        await asyncio.sleep(5)

    svc = make(listener)
    pq = locked_queue()
    batch = msgs([0])
    pq.add(batch, 1)
    svc.submit(pq, batch)
    await settle(lambda: svc.is_busy(pq))
    assert await svc.shutdown(0.05) == [pq]


def test_lock_expiry_is_thirty_seconds_client_side():
    pq = ProcessQueue(MQ)
    assert not pq.holds_lock()
    pq.lock_granted(100.0)
    assert pq.holds_lock(129.0) and not pq.holds_lock(131.0)
    pq.locked = False
    assert not pq.holds_lock(100.0)


class FakeInstance:
    def __init__(self, granted):
        self.granted = granted
        self.requests = []

    async def invoke_broker(self, addr, cmd, timeout=None):
        self.requests.append((addr, cmd))
        body = loads_lenient(cmd.body)
        ok = [q for q in body["mqSet"] if q["queueId"] in self.granted]
        return RemotingCommand(code=0, flag=1, body=dumps_compact({"lockOKMQSet": ok}))


class FakeOps:
    group = "cg"

    def __init__(self, instance):
        self.instance = instance

    async def broker_addr(self, mq, for_pull=False):
        return f"addr-{mq.broker_name}"


async def test_queue_locks_batch_per_broker_and_return_only_granted_queues():
    instance = FakeInstance(granted={0, 2})
    locks = QueueLocks(FakeOps(instance), "client-1")
    asked = [MessageQueue("T", "a", 0), MessageQueue("T", "a", 1), MessageQueue("T", "b", 2)]
    assert await locks.lock(asked) == {asked[0], asked[2]}
    assert sorted(addr for addr, _ in instance.requests) == ["addr-a", "addr-b"]
    body = loads_lenient(instance.requests[0][1].body)
    assert body["consumerGroup"] == "cg" and body["clientId"] == "client-1" and body["onlyThisBroker"] is False
    assert {cmd.code for _, cmd in instance.requests} == {41}
    await locks.unlock(asked[:1])
    assert instance.requests[-1][1].code == 42


async def test_concurrent_refused_send_back_counts_the_retry_locally(monkeypatch):
    seen = []

    def listener(batch):
        seen.append(batch[0].reconsume_times)
        return ConsumeResult.RECONSUME_LATER if len(seen) == 1 else ConsumeResult.SUCCESS

    async def refuse(pq, m, delay_level=0):
        return False

    svc = ConsumeService("cg", listener, MemoryStore(), refuse, thread_max=1)
    svc.running = True
    scheduled = []
    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "call_later", lambda delay, fn, *args: scheduled.append((delay, fn)))
    pq = ProcessQueue(MQ)
    batch = msgs([3])
    pq.add(batch, 4)
    await svc.consume(pq, batch)
    [(delay, fn)] = scheduled
    assert delay == 5.0
    fn()
    again_pq, again = svc._chunks.popleft()
    await svc.consume(again_pq, again)
    assert seen == [0, 1] and svc.offset_store.offsets[MQ] == 4


@pytest.mark.parametrize("value", [ConsumeOrderlyResult.SUCCESS, ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT])
def test_orderly_result_is_exported(value):
    import client

    assert client.ConsumeOrderlyResult is ConsumeOrderlyResult and value in ConsumeOrderlyResult


async def test_lock_renewal_refreshes_granted_queues_and_pauses_lost_ones():
    from client.queue_locks import LockKeeper

    class Locks:
        def __init__(self):
            self.unlocked = []

        async def lock(self, mqs):
            return {mq for mq in mqs if mq.queue_id != 1}

        async def unlock(self, mqs):
            self.unlocked.extend(mqs)

    kept, lost = locked_queue(MessageQueue("T", "b", 0)), locked_queue(MessageQueue("T", "b", 1))
    kept.last_lock_time = lost.last_lock_time = time.monotonic() - 25
    keeper = LockKeeper(Locks(), {kept.mq: kept, lost.mq: lost}, asyncio.Lock(), "cg")
    await keeper.renew()
    assert kept.holds_lock(time.monotonic() + 20) and not lost.holds_lock()
    # relocking a queue that was dropped meanwhile gives the lock straight back
    lost.dropped = True
    assert await keeper.relock(lost) is False
    dropped_later = ProcessQueue(MessageQueue("T", "b", 2))

    async def lock_then_drop(mqs):
        dropped_later.dropped = True
        return set(mqs)

    keeper.locks.lock = lock_then_drop
    assert await keeper.relock(dropped_later) is False and keeper.locks.unlocked == [dropped_later.mq]
