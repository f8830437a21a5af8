"""Allocation strategies, per-queue flow control and the local offset store, without a broker."""

import asyncio
import json

import pytest

from client.allocate import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueConsistentHash,
    java_queue_key,
    resolve_strategy,
    ring_hash,
)
from client.message import MessageQueue
from client.offset_store import LocalFileOffsetStore
from client.process_queue import ProcessQueue
from tests.support.client_fakes import msgs


def queues(n, topic="T", broker="b"):
    return [MessageQueue(topic, broker, i) for i in range(n)]


def assignment(strategy, mqs, cids):
    return {cid: [q.queue_id for q in strategy.allocate("g", cid, mqs, cids)] for cid in cids}


@pytest.mark.parametrize("n_mq,n_cid,expected", [
    (8, 3, [[0, 3, 6], [1, 4, 7], [2, 5]]),
    (2, 3, [[0], [1], []]),
    (4, 1, [[0, 1, 2, 3]]),
])
def test_by_circle_matches_java(n_mq, n_cid, expected):
    cids = [f"c{i}" for i in range(n_cid)]
    got = assignment(AllocateMessageQueueAveragelyByCircle(), queues(n_mq), cids)
    assert [got[c] for c in cids] == expected


def test_consistent_hash_is_a_partition_and_stable():
    mqs = queues(16) + queues(16, broker="b2")
    cids = sorted(f"127.0.0.1@{i}" for i in range(4))
    strategy = AllocateMessageQueueConsistentHash()
    got = {cid: strategy.allocate("g", cid, mqs, cids) for cid in cids}
    flat = [q for part in got.values() for q in part]
    assert sorted(flat, key=java_queue_key) == sorted(mqs, key=java_queue_key)  # every queue exactly once
    again = AllocateMessageQueueConsistentHash()  # a fresh instance (another process) agrees
    assert {cid: again.allocate("g", cid, mqs, cids) for cid in cids} == got
    assert strategy.allocate("g", "stranger", mqs, cids) == []


def test_consistent_hash_moves_few_queues_when_a_member_joins():
    mqs = queues(64)
    before_cids = sorted(f"c{i}" for i in range(4))
    after_cids = sorted(before_cids + ["c9"])
    s = AllocateMessageQueueConsistentHash(virtual_nodes=50)
    owner_before = {q: c for c in before_cids for q in s.allocate("g", c, mqs, before_cids)}
    owner_after = {q: c for c in after_cids for q in s.allocate("g", c, mqs, after_cids)}
    moved = [q for q in mqs if owner_before[q] != owner_after[q]]
    assert all(owner_after[q] == "c9" for q in moved)  # only queues taken by the newcomer move
    assert len(moved) < len(mqs) // 2


def test_ring_hash_is_md5_prefix_and_queue_key_is_javas_text():
    assert ring_hash("") == 0xD41D8CD9  # md5("") = d41d8cd98f00b204e9800998ecf8427e
    assert java_queue_key(MessageQueue("T", "b", 3)) == "MessageQueue [topic=T, brokerName=b, queueId=3]"


def test_resolve_strategy_by_name_object_or_callable():
    assert isinstance(resolve_strategy(None), AllocateMessageQueueAveragely)
    assert isinstance(resolve_strategy("avg_by_circle"), AllocateMessageQueueAveragelyByCircle)
    assert isinstance(resolve_strategy("AllocateMessageQueueConsistentHash"), AllocateMessageQueueConsistentHash)
    fn = lambda g, c, m, cids: list(m)  # noqa: E731
    assert resolve_strategy(fn) is fn
    with pytest.raises(ValueError, match="unknown allocate strategy"):
        resolve_strategy("RANDOM")


async def test_process_queue_flow_control_pauses_and_resumes():
    pq = ProcessQueue(MessageQueue("T", "b", 0), max_count=3, max_bytes=1 << 20)
    batch = msgs(range(5))
    pq.add(batch, 5)
    assert pq.over_threshold()
    waiter = asyncio.ensure_future(pq.wait_until_drained(5))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    pq.remove(batch[:1])
    await asyncio.sleep(0.01)
    assert not waiter.done()  # 4 cached > 3
    assert pq.remove(batch[1:3]) == 3
    assert await asyncio.wait_for(waiter, 1) is True


def test_process_queue_byte_threshold_and_span():
    pq = ProcessQueue(MessageQueue("T", "b", 0), max_count=1000, max_bytes=4)
    batch = msgs([0, 1, 2])  # bodies "m0".."m2": 6 bytes
    pq.add(batch, 3)
    assert pq.cached_bytes == 6 and pq.over_threshold()
    pq.remove(batch[:2])
    assert pq.cached_bytes == 2 and not pq.over_threshold()
    wide = ProcessQueue(MessageQueue("T", "b", 0), max_span=10)
    wide.add(msgs([0, 50]), 51)
    assert wide.over_threshold()


async def test_local_offset_store_round_trip_and_backup(tmp_path):
    path = tmp_path / "cid" / "g" / "offsets.json"
    store = LocalFileOffsetStore(path)
    await store.load()
    mq = MessageQueue("T", "b", 1)
    assert await store.fetch(mq) == -1
    store.update(mq, 5)
    await store.persist_all()
    store.update(mq, 9)
    await store.persist_all(final=True)
    data = json.loads(path.read_text())
    assert data["offsetTable"] == [{"topic": "T", "brokerName": "b", "queueId": 1, "offset": 9}]
    assert json.loads(path.with_name("offsets.json.bak").read_text())["offsetTable"][0]["offset"] == 5
    reloaded = LocalFileOffsetStore(path)
    await reloaded.load()
    assert await reloaded.fetch(mq) == 9
    path.write_text("{torn")  # damaged main file: the backup is used
    damaged = LocalFileOffsetStore(path)
    await damaged.load()
    assert await damaged.fetch(mq) == 5
