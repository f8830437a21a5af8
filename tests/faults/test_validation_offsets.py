"""Consumer offsets a queue cannot have are refused (UPDATE_CONSUMER_OFFSET) or not stored (a pull's
commitOffset), with a remark or a rate-limited log line; -1 from a pull still means "nothing to commit"."""

from __future__ import annotations

from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R

from tests.support.wire import WireClient, pull_fields, send_v2_fields

from tests.support.validation_cases import wait_for_log

SUB, COMMIT = 0x4, 0x1


async def _topic_with_messages(client: WireClient, topic: str, count: int) -> None:
    created = await client.request(RC.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": "2",
                                                               "writeQueueNums": "2", "perm": "6"})
    assert created.code == 0, created.remark
    for i in range(count):
        sent = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0), b"m%d" % i)
        assert sent.code == 0, sent.remark


async def _stored_offset(client: WireClient, group: str, topic: str, queue_id: int = 0) -> int | None:
    got = await client.request(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                          "queueId": str(queue_id), "setZeroIfNotFound": "false"})
    return int(got.ext_fields["offset"]) if got.code == 0 else None


async def test_update_consumer_offset_refuses_offsets_outside_the_queue(shared_broker):
    topic, group = "OffsetRangeTopic", "offsetRangeGroup"
    async with await WireClient.connect(shared_broker.addr) as client:
        await _topic_with_messages(client, topic, 3)  # queue 0: maxOffset 3; queue 1: empty
        q = {"consumerGroup": group, "topic": topic, "queueId": "0"}
        for offset in ("0", "2", "3"):  # 3 == maxOffset: "everything consumed"
            ok = await client.request(RC.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": offset})
            assert ok.code == 0, ok.remark
            assert await _stored_offset(client, group, topic) == int(offset)
        cases = {
            "-1": "never negative", "-5": "never negative",
            "4": "beyond the queue's maxOffset 3", "9000000000000000000": "beyond the queue's maxOffset 3",
        }
        for offset, why in cases.items():
            refused = await client.request(RC.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": offset})
            assert refused.code == R.INVALID_PARAMETER, (offset, refused.code, refused.remark)
            assert f"commitOffset[{offset}]" in refused.remark and why in refused.remark
        assert await _stored_offset(client, group, topic) == 3  # nothing refused was stored
        for queue_id in ("-1", "2", "1000"):
            refused = await client.request(RC.UPDATE_CONSUMER_OFFSET, {**q, "queueId": queue_id, "commitOffset": "0"})
            assert refused.code == R.INVALID_PARAMETER and f"queueId[{queue_id}] is illegal" in refused.remark
        empty = await client.request(RC.UPDATE_CONSUMER_OFFSET, {**q, "queueId": "1", "commitOffset": "1"})
        assert empty.code == R.INVALID_PARAMETER and "maxOffset 0" in empty.remark
        # the usual one-way form: refused silently on the wire, stored nothing, logged (rate-limited)
        await client.oneway(RC.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": "77"})
        assert await _stored_offset(client, group, topic) == 3
    assert await wait_for_log(shared_broker, "consumer offset update from")


async def test_pull_commit_offset_beyond_the_queue_is_not_stored(shared_broker):
    topic, group = "PullCommitTopic", "pullCommitGroup"
    async with await WireClient.connect(shared_broker.addr) as client:
        await _topic_with_messages(client, topic, 2)

        async def pull(commit_offset: int) -> None:
            pulled = await client.request(RC.PULL_MESSAGE, pull_fields(topic, group, 0, 0, sys_flag=SUB | COMMIT,
                                                                       commit_offset=commit_offset))
            assert pulled.code == 0 and pulled.remark == "FOUND"  # the pull itself is answered normally

        await pull(1)
        assert await _stored_offset(client, group, topic) == 1
        await pull(-1)  # clients send -1 when they have nothing to commit
        assert await _stored_offset(client, group, topic) == 1
        for beyond in (3, 10**15, -7):
            await pull(beyond)
            assert await _stored_offset(client, group, topic) == 1, beyond
        await pull(2)  # == maxOffset: legal
        assert await _stored_offset(client, group, topic) == 2
    assert await wait_for_log(shared_broker, "is outside 0..maxOffset")


async def test_pull_queue_ids_outside_the_topic_get_a_clear_error(shared_broker):
    topic, group = "PullQueueIdTopic", "pullQueueIdGroup"
    async with await WireClient.connect(shared_broker.addr) as client:
        await _topic_with_messages(client, topic, 1)
        for queue_id in (-1, 2, 2**31 - 1):
            pulled = await client.request(RC.PULL_MESSAGE, pull_fields(topic, group, queue_id, 0, sys_flag=SUB))
            assert pulled.code == R.INVALID_PARAMETER and f"queueId[{queue_id}] is illegal" in pulled.remark
    assert "Traceback" not in shared_broker.log_text()
