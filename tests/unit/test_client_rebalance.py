"""Queue allocation (must match Java's AllocateMessageQueueAveragely), offset bookkeeping and push-consumer
consumption outcomes, without a broker."""

import asyncio

import pytest

from client import ConsumeResult, PushConsumer
from client.message import MessageQueue
from client.allocate import allocate_averagely, sort_queues
from client.consume_service import ConsumeService
from client.offset_store import OffsetStore
from client.process_queue import ProcessQueue

from tests.support.client_fakes import msgs


def queues(n, topic="T"):
    return [MessageQueue(topic, "b", i) for i in range(n)]


@pytest.mark.parametrize(
    "n_mq,n_cid,expected",
    [
        (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
        (4, 2, [[0, 1], [2, 3]]),
        (2, 3, [[0], [1], []]),
        (5, 5, [[0], [1], [2], [3], [4]]),
        (7, 2, [[0, 1, 2, 3], [4, 5, 6]]),
        (1, 1, [[0]]),
    ],
)
def test_allocate_averagely_matches_java(n_mq, n_cid, expected):
    mqs = queues(n_mq)
    cids = [f"c{i}" for i in range(n_cid)]
    got = [[q.queue_id for q in allocate_averagely("g", cid, mqs, cids)] for cid in cids]
    assert got == expected
    flat = [q for part in got for q in part]
    assert sorted(flat) == list(range(n_mq))  # every queue exactly once


def test_allocate_unknown_consumer_gets_nothing():
    assert allocate_averagely("g", "me", queues(4), ["a", "b"]) == []
    assert allocate_averagely("g", "a", [], ["a"]) == []


def test_sort_queues_java_order():
    qs = [MessageQueue("T", "b", 1), MessageQueue("S", "z", 0), MessageQueue("T", "a", 3), MessageQueue("T", "b", 0)]
    assert sort_queues(qs) == [qs[1], qs[2], qs[3], qs[0]]


def test_process_queue_commits_smallest_unconsumed_offset():
    pq = ProcessQueue(MessageQueue("T", "b", 0))
    assert pq.remove([]) == -1
    batch = msgs([10, 11, 12, 13])
    pq.add(batch, 14)
    assert pq.remove([batch[1], batch[2]]) == 10  # 10 still in flight
    assert pq.remove([batch[0]]) == 13
    assert pq.remove([batch[3]]) == 14  # all done: next offset
    assert len(pq) == 0


class RecordingStore(OffsetStore):
    async def fetch(self, mq, zero_if_not_found=True):
        return -1


def make_service(listener, send_back=None, clustering=True, batch=1):
    async def accept(pq, m, delay_level=0):
        return True

    return ConsumeService("cg", listener, RecordingStore(), send_back or accept, thread_max=4,
                          batch_max_size=batch, clustering=clustering)


async def test_consume_success_advances_offset():
    svc = make_service(lambda batch: ConsumeResult.SUCCESS)
    pq = ProcessQueue(MessageQueue("T", "b", 0))
    batch = msgs([0, 1])
    pq.add(batch, 2)
    await svc.consume(pq, batch)
    assert svc.offset_store.offsets[pq.mq] == 2


async def test_consume_failure_is_sent_back_then_offset_advances():
    sent = []

    async def listener(batch):
        raise RuntimeError("boom")

    async def fake_send_back(pq, m, delay_level=0):
        sent.append(m.queue_offset)
        return True

    svc = make_service(listener, fake_send_back)
    pq = ProcessQueue(MessageQueue("T", "b", 0))
    batch = msgs([5])
    pq.add(batch, 6)
    await svc.consume(pq, batch)
    assert sent == [5] and svc.offset_store.offsets[pq.mq] == 6


async def test_broadcasting_failure_is_not_retried(caplog):
    sent = []

    async def fake_send_back(pq, m, delay_level=0):
        sent.append(m)
        return True

    svc = make_service(lambda batch: ConsumeResult.RECONSUME_LATER, fake_send_back, clustering=False)
    pq = ProcessQueue(MessageQueue("T", "b", 0))
    batch = msgs([3])
    pq.add(batch, 4)
    with caplog.at_level("WARNING"):
        await svc.consume(pq, batch)
    assert sent == [] and svc.offset_store.offsets[pq.mq] == 4
    assert "not retried" in caplog.text


async def test_failed_send_back_pins_offset_and_reconsumes_locally(monkeypatch):
    calls = []

    def listener(batch):
        calls.append(batch[0].queue_offset)
        return ConsumeResult.RECONSUME_LATER if len(calls) == 1 else ConsumeResult.SUCCESS

    async def refuse(pq, m, delay_level=0):
        return False

    svc = make_service(listener, refuse)
    svc.running = True
    scheduled = []
    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "call_later", lambda delay, fn, *args: scheduled.append((delay, fn, args)))
    pq = ProcessQueue(MessageQueue("T", "b", 0))
    batch = msgs([7])
    pq.add(batch, 8)
    await svc.consume(pq, batch)
    assert pq.mq not in svc.offset_store.offsets  # not committed past the failed message
    [(delay, fn, args)] = scheduled
    assert delay == 5.0
    fn(*args)
    assert svc.queued == 1
    again_pq, again = svc._chunks.popleft()
    await svc.consume(again_pq, again)
    assert calls == [7, 7] and svc.offset_store.offsets[pq.mq] == 8


def test_retry_topic_messages_get_their_original_topic_back():
    svc = make_service(lambda batch: ConsumeResult.SUCCESS)
    batch = msgs([0], topic=b"%RETRY%cg", props="RETRY_TOPIC\x01Orders\x02")
    svc.submit(ProcessQueue(MessageQueue("%RETRY%cg", "b", 0)), batch)
    _pq, chunk = svc._chunks.popleft()
    assert chunk[0].topic == "Orders"


def test_submit_cuts_batches_of_batch_max_size():
    svc = make_service(lambda batch: ConsumeResult.SUCCESS, batch=3)
    pq = ProcessQueue(MessageQueue("T", "b", 0))
    batch = msgs(range(7))
    pq.add(batch, 7)
    svc.submit(pq, batch)
    sizes = []
    while svc.queued:
        sizes.append(len(svc._chunks.popleft()[1]))
    assert sizes == [3, 3, 1]


async def test_sync_listener_runs_in_the_thread_pool_and_async_on_the_loop():
    import threading

    seen = []

    def blocking(batch):
        seen.append(threading.current_thread().name)
        return ConsumeResult.SUCCESS

    async def coroutine(batch):
        seen.append(threading.current_thread().name)

    for listener in (blocking, coroutine):
        svc = make_service(listener)
        svc.start()
        try:
            pq = ProcessQueue(MessageQueue("T", "b", 0))
            batch = msgs([0, 1, 2])
            pq.add(batch, 3)
            svc.submit(pq, batch)
            for _ in range(200):
                if svc.offset_store.offsets.get(pq.mq) == 3:
                    break
                await asyncio.sleep(0.01)
            assert svc.offset_store.offsets[pq.mq] == 3
        finally:
            await svc.shutdown(1.0)
    assert all(name.startswith("consume-cg") for name in seen[:3])
    assert seen[3:] == [threading.current_thread().name] * 3


async def test_shutdown_waits_for_running_listener_and_hands_back_queued():
    started = asyncio.Event()
    release = asyncio.Event()
    done = []

    async def slow(batch):
        started.set()
        await release.wait()
        done.append(batch[0].queue_offset)
        return ConsumeResult.SUCCESS

    svc = ConsumeService("cg", slow, RecordingStore(), None, thread_max=1)
    svc.start()
    pq = ProcessQueue(MessageQueue("T", "b", 0))
    batch = msgs([0, 1, 2])
    pq.add(batch, 3)
    svc.submit(pq, batch)
    await asyncio.wait_for(started.wait(), 2)
    asyncio.get_running_loop().call_later(0.05, release.set)
    await svc.shutdown(2.0)
    assert done == [0]  # the running call finished; the two queued ones were handed back
    assert svc.offset_store.offsets[pq.mq] == 1  # committed offset stops at the first unconsumed message


def test_push_consumer_validates_configuration():
    with pytest.raises(ValueError):
        PushConsumer("cg", message_model="BOTH")
    with pytest.raises(ValueError):
        PushConsumer("cg", consume_from_where="NOW")
    c = PushConsumer("cg")
    c.subscribe("T", "TagA || TagB")
    hb = c._heartbeat_data()["consumerDataSet"][0]
    assert hb["consumeType"] == "CONSUME_PASSIVELY" and hb["messageModel"] == "CLUSTERING"
    topics = {s["topic"]: s for s in hb["subscriptionDataSet"]}
    assert set(topics) == {"T", "%RETRY%cg"}
    assert sorted(topics["T"]["tagsSet"]) == ["TagA", "TagB"] and len(topics["T"]["codeSet"]) == 2
    b = PushConsumer("cg", message_model="BROADCASTING")
    b.subscribe("T")
    assert [s["topic"] for s in b._heartbeat_data()["consumerDataSet"][0]["subscriptionDataSet"]] == ["T"]


async def test_start_requires_listener_and_subscription():
    c = PushConsumer("cg", "127.0.0.1:1")
    with pytest.raises(Exception, match="listener"):
        await c.start()
    c.register_listener(lambda batch: ConsumeResult.SUCCESS)
    with pytest.raises(Exception, match="subscribe"):
        await c.start()
