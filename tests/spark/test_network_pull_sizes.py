"""Network reads against a real broker whose answer cap (256 KiB) holds fewer records than pullBatchSize.

The range puller sizes its chunks to what one answer holds once the broker cut an answer short, so a chunk is one
pull instead of a full answer plus a small tail pull; whatever the chunking, a range reads exactly its records,
in order, filtered or not.
"""

from __future__ import annotations

import asyncio
import time

import pyarrow as pa

from client import Message, Producer
from client.admin import AdminClient
from client.message import MessageQueue
from protocol.config_bodies import TopicConfig
from spark_export.cluster.options import ClusterOptions
from spark_export.cluster.pull_reader import RangePuller, read_range
from spark_export.cluster.remote import ClusterClient, QueueRef
from spark_export.schema import arrow_for

TOPIC = "PullSizes"
BODY = 3500  # a record of ~3.6 KB: 256 KiB hold ~72 of them
MESSAGES = 3000
BATCH_SIZE = 108  # pullBatchSize: 1.5 answers' worth of records


async def _fill(namesrv: str, addr: str) -> None:
    async with AdminClient(namesrv, timeout=10.0) as admin:
        await admin.create_topic(addr, TopicConfig(TOPIC, 1, 1, 6))
        deadline = time.monotonic() + 30
        while True:
            try:
                await admin.topic_route(TOPIC)
                break
            except Exception:  # noqa: BLE001 - not registered yet
                assert time.monotonic() < deadline, "the topic never reached the name server"
                await asyncio.sleep(0.2)
    producer = Producer("PullSizesProducer", namesrv, send_timeout=30.0)
    await producer.start()
    try:
        queue = MessageQueue(TOPIC, "broker-a", 0)
        for first in range(0, MESSAGES, 200):
            await producer.send_batch([Message(TOPIC, bytes([i % 251]) * BODY, tags="a" if i % 3 else "b")
                                       for i in range(first, first + 200)], queue=queue)
    finally:
        await producer.shutdown()


def test_chunks_follow_the_answer_cap_and_ranges_stay_exact(broker_factory, monkeypatch):
    broker = broker_factory("broker-a")
    asyncio.run(_fill(broker.namesrv_addr, broker.addr))
    queue = QueueRef(TOPIC, "broker-a", 0)
    options = ClusterOptions.parse({"nameServer": broker.namesrv_addr, "topic": TOPIC,
                                    "pullBatchSize": str(BATCH_SIZE), "pullsInFlight": "1"})
    pulls: list[int] = []  # maxMsgNums of every pull
    original = ClusterClient.pull

    async def counting(self, queue_ref, addr, offset, max_nums):
        pulls.append(max_nums)
        return await original(self, queue_ref, addr, offset, max_nums)

    monkeypatch.setattr(ClusterClient, "pull", counting)
    with ClusterClient(options) as client:
        puller = RangePuller(client, queue, (broker.addr,))
        runs = puller.runs(0, MESSAGES)
        rows = 0
        for _ in range(MESSAGES):
            try:
                rows += client.run(runs.__anext__())[1]
            except StopAsyncIteration:
                break
    assert rows == MESSAGES
    per_answer = int(puller.answer_cap / puller.bytes_per_offset)
    assert 60 < per_answer < BATCH_SIZE, (puller.answer_cap, puller.bytes_per_offset)
    assert puller.stride() < per_answer
    # Chunks of BATCH_SIZE would take two pulls each (2 * 3000 / 108 = 56); sized to an answer, one each.
    assert len(pulls) <= MESSAGES / puller.stride() + 3, pulls

    schema = pa.schema([arrow_for("messages").field(c) for c in ("queue_offset", "tags")])
    got = pa.Table.from_batches(list(read_range(options, queue, (broker.addr,), 517, 2583, schema)), schema)
    assert got.column("queue_offset").to_pylist() == list(range(517, 2583))
    filtered = ClusterOptions.parse({"nameServer": broker.namesrv_addr, "topic": TOPIC, "subExpression": "b",
                                     "pullBatchSize": str(BATCH_SIZE)})
    got = pa.Table.from_batches(list(read_range(filtered, queue, (broker.addr,), 517, 2583, schema)), schema)
    assert got.column("queue_offset").to_pylist() == [i for i in range(517, 2583) if i % 3 == 0]
    assert set(got.column("tags").to_pylist()) == {"b"}
