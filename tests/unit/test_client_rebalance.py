"""Queue allocation (must match Java's AllocateMessageQueueAveragely), offset bookkeeping and push-consumer
consumption outcomes, without a broker."""

import asyncio

import pytest

from client import ConsumeResult, PushConsumer
from client.consumer_ops import decode_messages
from client.message import MessageQueue
from client.rebalance import ProcessQueue, allocate_averagely, sort_queues
from protocol.ids import pack_host
from protocol.message import encode_record


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


STORE = pack_host("127.0.0.1", 10911)


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


def test_process_queue_commits_smallest_unconsumed_offset():
    pq = ProcessQueue(MessageQueue("T", "b", 0))
    assert pq.remove([]) == -1
    batch = msgs([10, 11, 12, 13])
    pq.add(batch)
    assert pq.remove([batch[1], batch[2]]) == 10  # 10 still in flight
    assert pq.remove([batch[0]]) == 13
    assert pq.remove([batch[3]]) == 14  # all done: next offset
    assert len(pq) == 0


def make_consumer(listener):
    c = PushConsumer("cg", "127.0.0.1:1")
    c.register_listener(listener)
    c._semaphore = asyncio.Semaphore(4)
    c._started = True
    return c


async def test_consume_success_advances_offset():
    c = make_consumer(lambda batch: ConsumeResult.SUCCESS)
    pq = ProcessQueue(MessageQueue("T", "b", 0))
    batch = msgs([0, 1])
    pq.add(batch)
    await c._consume(pq, batch)
    assert c._offsets[pq.mq] == 2


async def test_consume_failure_is_sent_back_then_offset_advances():
    sent = []

    async def listener(batch):
        raise RuntimeError("boom")

    c = make_consumer(listener)

    async def fake_send_back(mq, m):
        sent.append(m.queue_offset)
        return True

    c._send_back = fake_send_back
    pq = ProcessQueue(MessageQueue("T", "b", 0))
    batch = msgs([5])
    pq.add(batch)
    await c._consume(pq, batch)
    assert sent == [5] and c._offsets[pq.mq] == 6


async def test_failed_send_back_pins_offset_and_reconsumes_locally(monkeypatch):
    calls = []

    def listener(batch):
        calls.append(batch[0].queue_offset)
        return ConsumeResult.RECONSUME_LATER if len(calls) == 1 else ConsumeResult.SUCCESS

    c = make_consumer(listener)

    async def refuse(mq, m):
        return False

    c._send_back = refuse
    scheduled = []
    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "call_later", lambda delay, fn, *args: scheduled.append((delay, fn, args)))
    pq = ProcessQueue(MessageQueue("T", "b", 0))
    batch = msgs([7])
    pq.add(batch)
    await c._consume(pq, batch)
    assert pq.mq not in c._offsets  # not committed past the failed message
    [(delay, fn, args)] = scheduled
    assert delay == 5.0
    fn(*args)
    await asyncio.gather(*list(c._consume_tasks))
    assert calls == [7, 7] and c._offsets[pq.mq] == 8


def test_retry_topic_messages_get_their_original_topic_back():
    c = make_consumer(lambda batch: ConsumeResult.SUCCESS)
    seen = []
    c._consume = lambda pq, batch: seen.extend(batch) or asyncio.sleep(0)
    batch = msgs([0], topic=b"%RETRY%cg", props="RETRY_TOPIC\x01Orders\x02")

    async def run():
        c._dispatch(ProcessQueue(MessageQueue("%RETRY%cg", "b", 0)), batch)
        await asyncio.sleep(0)

    asyncio.run(run())
    assert seen[0].topic == "Orders"


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
