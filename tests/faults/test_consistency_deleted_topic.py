"""A deleted topic stays deleted across restarts (kill -9 or graceful): the commit log still holds the old
incarnation's records, and recovery must not hand them back (issue 11)."""

from __future__ import annotations

import asyncio
import json
import os

from protocol.codes import RequestCode as RC, ResponseCode as R

from tests.support.wire import WireClient, pull_fields, send_v2_fields, pull_records

TOPIC = "Phoenix"


async def _send(client: WireClient, topic: str, queue_id: int, body: bytes) -> int:
    resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, queue_id), body)
    assert resp.code == 0, (resp.code, resp.remark)
    return int(resp.ext_fields["queueOffset"])


async def _delete(client: WireClient, topic: str) -> None:
    resp = await client.request(RC.DELETE_TOPIC_IN_BROKER, {"topic": topic})
    assert resp.code == 0, (resp.code, resp.remark)


async def _topics(client: WireClient) -> dict:
    resp = await client.request(RC.GET_ALL_TOPIC_CONFIG, {})
    assert resp.code == 0
    return json.loads(resp.body)["topicConfigTable"]


async def _old_then_new(broker) -> None:
    """10 old messages on queues 0/1 with a committed offset, delete, 3 new messages on queue 0."""
    async with await WireClient.connect(broker.addr) as client:
        for i in range(10):
            await _send(client, TOPIC, i % 2, f"old-{i}".encode())
        commit = {"consumerGroup": "cg", "topic": TOPIC, "queueId": "0", "commitOffset": "5"}
        assert (await client.request(RC.UPDATE_CONSUMER_OFFSET, commit)).code == 0
        await _delete(client, TOPIC)
        offsets = [await _send(client, TOPIC, 0, f"new-{i}".encode()) for i in range(3)]
        assert offsets == [0, 1, 2], "a re-created topic starts its queue offsets at 0"


async def _assert_only_new(broker) -> None:
    async with await WireClient.connect(broker.addr) as client:
        got = await pull_records(client, TOPIC, 0, "reader")
        assert [m.body for m in got] == [b"new-0", b"new-1", b"new-2"]
        assert [m.queue_offset for m in got] == [0, 1, 2]
        assert await pull_records(client, TOPIC, 1, "reader") == [], "queue 1 of the deleted incarnation came back"
        query = {"consumerGroup": "cg", "topic": TOPIC, "queueId": "0"}
        resp = await client.request(RC.QUERY_CONSUMER_OFFSET, query)
        assert resp.code != 0 or int(resp.ext_fields["offset"]) <= 0, "the deleted topic's consumer offset survived"
    assert "recovered topic" not in broker.log_text()


async def test_deleted_then_recreated_topic_serves_only_new_messages_after_kill_9(broker):
    await _old_then_new(broker)
    await asyncio.sleep(0.6)  # the re-created topic's config reaches topics.json (written 0.2 s after a change)
    broker.kill()
    assert os.path.exists(broker.store_dir / "abort")
    broker.start()
    await _assert_only_new(broker)


async def test_deleted_then_recreated_topic_serves_only_new_messages_after_graceful_restart(broker):
    await _old_then_new(broker)
    assert broker.stop() == 0
    broker.start()
    await _assert_only_new(broker)


async def test_deleted_topic_is_not_recovered_from_the_store_after_kill_9(broker):
    async with await WireClient.connect(broker.addr) as client:
        for i in range(6):
            await _send(client, TOPIC, i % 3, f"old-{i}".encode())
        commit = {"consumerGroup": "cg", "topic": TOPIC, "queueId": "1", "commitOffset": "2"}
        assert (await client.request(RC.UPDATE_CONSUMER_OFFSET, commit)).code == 0
        await asyncio.sleep(1.5)  # the committed offset reaches consumerOffset.json (flushed every second)
        await _delete(client, TOPIC)
        assert TOPIC not in await _topics(client)
    broker.kill()  # right after the acknowledgement: config, offsets and tombstone must already be on disk
    broker.start()
    async with await WireClient.connect(broker.addr) as client:
        assert TOPIC not in await _topics(client)
        query = {"consumerGroup": "cg", "topic": TOPIC, "queueId": "1"}
        resp = await client.request(RC.QUERY_CONSUMER_OFFSET, query)
        assert resp.code != 0 or int(resp.ext_fields["offset"]) <= 0, "the deleted topic's consumer offset survived"
        resp = await client.request(RC.PULL_MESSAGE, pull_fields(TOPIC, "reader", 0, 0))
        assert resp.code == R.TOPIC_NOT_EXIST, (resp.code, resp.remark)
    assert not os.path.exists(broker.store_dir / "consumequeue" / TOPIC)
    assert "recovered topic" not in broker.log_text()


async def test_deleted_twice_and_restarted_twice_stays_consistent(broker):
    """Two incarnations deleted, a third one alive: two kill -9 restarts serve exactly the third."""
    async with await WireClient.connect(broker.addr) as client:
        for round_ in range(2):
            for i in range(5):
                await _send(client, TOPIC, 0, f"gen{round_}-{i}".encode())
            await _delete(client, TOPIC)
        for i in range(3):
            await _send(client, TOPIC, 0, f"new-{i}".encode())
    for _ in range(2):
        broker.kill()
        broker.start()
        async with await WireClient.connect(broker.addr) as client:
            got = await pull_records(client, TOPIC, 0, "reader")
            assert [m.body for m in got] == [b"new-0", b"new-1", b"new-2"]
