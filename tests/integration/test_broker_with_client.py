"""The project's own client (Producer / PullConsumer) against the real broker subprocess."""

from __future__ import annotations

import asyncio
import time

import pytest

from client import Message, Producer, PullConsumer, PullStatus, SendStatus


@pytest.mark.parametrize("msgpack", [False, True])
async def test_produce_and_pull_through_the_embedded_namesrv(shared_broker, msgpack):
    topic = f"ClientTopic{int(msgpack)}"
    ns = shared_broker.namesrv_addr
    async with Producer("cpg", ns, allow_msgpack=msgpack) as producer, \
            PullConsumer("ccg", ns, allow_msgpack=msgpack) as consumer:
        results = [await producer.send(Message(topic, f"single-{i}", tags="TagA", keys=f"k{i}")) for i in range(8)]
        assert all(r.status is SendStatus.SEND_OK for r in results)
        batch = await producer.send_batch([Message(topic, f"batch-{i}", tags="TagB") for i in range(10)])
        assert batch.status is SendStatus.SEND_OK
        queues = await consumer.fetch_message_queues(topic)
        assert len(queues) == 4
        bodies = []
        only_a = []
        for mq in queues:
            offset = 0
            while True:
                result = await consumer.pull(mq, "*", offset)
                if result.status is not PullStatus.FOUND:
                    break
                bodies.extend(m.body for m in result.messages)
                offset = result.next_begin_offset
            tagged = await consumer.pull(mq, "TagA", 0)
            if tagged.status is PullStatus.FOUND:
                only_a.extend(m.body for m in tagged.messages)
        assert sorted(bodies) == sorted([f"single-{i}".encode() for i in range(8)]
                                        + [f"batch-{i}".encode() for i in range(10)])
        assert all(b.startswith(b"single-") for b in only_a) and only_a
        # offsets through the client
        mq = queues[0]
        await consumer.update_offset(mq, 1)
        assert await consumer.fetch_consume_offset(mq) == 1
        assert await consumer.max_offset(mq) >= 1


async def test_blocking_pull_wakes_when_a_message_arrives(shared_broker):
    ns = shared_broker.namesrv_addr
    async with Producer("cpg2", ns) as producer, PullConsumer("ccg2", ns) as consumer:
        first = await producer.send(Message("ClientLongPoll", b"first"))
        mq = next(q for q in await consumer.fetch_message_queues("ClientLongPoll") if q.queue_id == first.queue_id)
        waiting = asyncio.ensure_future(consumer.pull(mq, "*", first.queue_offset + 1, block=True,
                                                      suspend_timeout=10))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        start = time.monotonic()
        await producer.send(Message("ClientLongPoll", b"second"), queue=mq)
        result = await asyncio.wait_for(waiting, 5)
        assert time.monotonic() - start < 1.5
        assert result.status is PullStatus.FOUND and [m.body for m in result.messages] == [b"second"]
