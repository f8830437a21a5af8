"""LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) against the real broker (lock lifetime shortened to 1 s)."""

from __future__ import annotations

import asyncio
import time

from protocol.bodies import LockBatchRequestBody, LockBatchResponseBody, MessageQueue, UnlockBatchRequestBody
from protocol.codes import RequestCode as RC

from tests.support.wire import WireClient, wait_until

QUEUES = [MessageQueue("LockTopic", "broker-lock", 0), MessageQueue("LockTopic", "broker-lock", 1)]


async def lock(client, client_id, queues, group="lockGroup") -> list[MessageQueue]:
    body = LockBatchRequestBody(consumer_group=group, client_id=client_id, mq_set=list(queues)).encode()
    resp = await client.request(RC.LOCK_BATCH_MQ, {}, body)
    assert resp.code == 0, resp.remark
    return sorted(LockBatchResponseBody.decode(resp.body).lock_ok_mq_set)


async def test_one_holder_until_unlock_or_expiry(broker_factory):
    broker = broker_factory("broker-lock", extra={"rebalanceLockMaxLiveTime": 1000})
    async with await WireClient.connect(broker.addr) as a, await WireClient.connect(broker.addr) as b:
        assert await lock(a, "A", QUEUES) == QUEUES
        assert await lock(b, "B", QUEUES) == []
        assert await lock(b, "B", QUEUES, group="otherGroup") == QUEUES

        # B cannot release A's lock; A's one-way unlock of queue 0 hands it over
        unlock_b = UnlockBatchRequestBody(consumer_group="lockGroup", client_id="B", mq_set=QUEUES).encode()
        assert (await b.request(RC.UNLOCK_BATCH_MQ, {}, unlock_b)).code == 0
        assert await lock(b, "B", QUEUES) == []
        unlock_a = UnlockBatchRequestBody(consumer_group="lockGroup", client_id="A", mq_set=QUEUES[:1]).encode()
        await a.oneway(RC.UNLOCK_BATCH_MQ, {}, unlock_a)

        async def b_gets_queue0():
            return await lock(b, "B", QUEUES) == QUEUES[:1]
        await wait_until(b_gets_queue0, "queue 0 handed to B", timeout=5)

        # A keeps queue 1 by renewing; once A stops renewing, it expires to B
        started = time.monotonic()
        while time.monotonic() - started < 1.5:
            assert await lock(a, "A", QUEUES[1:]) == QUEUES[1:]
            assert await lock(b, "B", QUEUES[1:]) == []
            await asyncio.sleep(0.3)

        async def b_gets_both():
            return await lock(b, "B", QUEUES) == QUEUES
        await wait_until(b_gets_both, "A's lock expiring", timeout=5, interval=0.2)
        assert await lock(a, "A", QUEUES) == []
