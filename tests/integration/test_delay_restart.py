"""A broker restart (SIGTERM, and kill -9) while delayed messages are pending loses and duplicates nothing."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from protocol.codes import RequestCode as RC, ResponseCode as R

from tests.support.wire import WireClient, props, pull_fields, records, send_v2_fields, wait_until

DELAY_LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms"
TOPIC = "DelayRestart"
QUEUES = 2
COUNT = 160


async def _send_delayed(client, count: int) -> set[str]:
    """``count`` delayed messages spread over levels 1..8 and two queues; returns their UNIQ_KEYs."""
    futures = []
    for i in range(count):
        level = 1 + i % 8
        fields = send_v2_fields(TOPIC, i % QUEUES, props(UNIQ_KEY=f"{i:032X}", DELAY=str(level)))
        futures.append(client.send_nowait(client.make(RC.SEND_MESSAGE_V2, fields, b"m%d" % i)))
    await client.writer.drain()
    responses = await asyncio.wait_for(asyncio.gather(*futures), 10)
    assert all(r.code == 0 for r in responses), [r.remark for r in responses if r.code]
    return {f"{i:032X}" for i in range(count)}


async def _delivered(client) -> Counter:
    keys: Counter = Counter()
    for queue_id in range(QUEUES):
        offset = 0
        for _ in range(1000):
            resp = await client.request(RC.PULL_MESSAGE, pull_fields(TOPIC, "restartGroup", queue_id, offset,
                                                                      sys_flag=0x4, suspend_ms=0))
            if resp.code != R.SUCCESS:
                break
            keys.update(r.uniq_key for r in records(resp.body))
            offset = int(resp.ext_fields["nextBeginOffset"])
    return keys


async def _assert_exactly_once(broker, expected: set[str]) -> None:
    async with await WireClient.connect(broker.addr) as client:
        async def all_there():
            got = await _delivered(client)
            return got if set(got) >= expected else None
        await wait_until(all_there, "every delayed message after the restart", timeout=15, interval=0.1)
        await asyncio.sleep(0.5)  # anything still to come would be a duplicate
        got = await _delivered(client)
        assert set(got) == expected
        duplicated = {k: n for k, n in got.items() if n != 1}
        assert not duplicated, f"delivered more than once: {duplicated}"
        table = json.loads((await client.request(RC.GET_ALL_DELAY_OFFSET, {})).body)["offsetTable"]
        assert sum(int(v) for v in table.values()) == len(expected)


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
async def test_restart_with_pending_delays_is_exactly_once(broker_factory, how):
    broker = broker_factory(f"broker-{how}", extra={"messageDelayLevel": DELAY_LEVELS})
    async with await WireClient.connect(broker.addr) as client:
        expected = await _send_delayed(client, COUNT)
        # stop while some levels have delivered and others have not
        await asyncio.sleep(0.35)
        partial = await _delivered(client)
    assert 0 < len(partial) < COUNT, len(partial)
    if how == "sigterm":
        assert broker.stop() == 0
    else:
        broker.kill()
    broker.start()
    await _assert_exactly_once(broker, expected)


async def test_kill9_during_delivery_bursts_is_exactly_once(broker_factory):
    """Many messages due at the same moment: the kill lands in the middle of delivery rounds."""
    broker = broker_factory("broker-burst", extra={"messageDelayLevel": DELAY_LEVELS})
    expected: set[str] = set()
    async with await WireClient.connect(broker.addr) as client:
        futures = []
        for i in range(1500):
            fields = send_v2_fields(TOPIC, i % QUEUES, props(UNIQ_KEY=f"B{i:031X}", DELAY="2"))
            futures.append(client.send_nowait(client.make(RC.SEND_MESSAGE_V2, fields, b"b%d" % i)))
            expected.add(f"B{i:031X}")
        await client.writer.drain()
        responses = await asyncio.wait_for(asyncio.gather(*futures), 15)
        assert all(r.code == 0 for r in responses)

        async def some_delivered():
            return len(await _delivered(client)) > 0
        await wait_until(some_delivered, "first deliveries", timeout=5, interval=0.01)
    broker.kill()
    broker.start()
    await _assert_exactly_once(broker, expected)
