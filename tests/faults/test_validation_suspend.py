"""A pull cannot park itself for days: suspendTimeoutMillis is capped by maxPullSuspendTimeMillis."""

from __future__ import annotations

import time

import pytest

from broker.config import BrokerConfig, ConfigError
from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R

from tests.support.wire import WireClient, pull_fields

SUB, SUSPEND = 0x4, 0x2
CAP_MS = 1000


@pytest.mark.parametrize("asked_ms", [10**12, 2**63 - 1])
async def test_huge_suspend_timeout_is_answered_at_the_cap(broker_factory, asked_ms):
    broker = broker_factory(extra={"maxPullSuspendTimeMillis": CAP_MS})
    async with await WireClient.connect(broker.addr) as client:
        created = await client.request(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "SuspendCapTopic", "readQueueNums": "1",
                                                                   "writeQueueNums": "1", "perm": "6"})
        assert created.code == 0
        started = time.monotonic()
        pulled = await client.request(RC.PULL_MESSAGE, pull_fields("SuspendCapTopic", "suspendGroup", 0, 0,
                                                                   sys_flag=SUB | SUSPEND, suspend_ms=asked_ms),
                                      timeout=15)  # without the cap the broker would hold it for 31+ years
        held = time.monotonic() - started
        assert pulled.code == R.PULL_NOT_FOUND
        assert 0.8 <= held < 10, held  # it was held (long polling still works) and released at the cap
        runtime = await client.request(RC.GET_BROKER_RUNTIME_INFO)
        assert b'"suspendedPullCount":"0"' in runtime.body or b'"suspendedPullCount":0' in runtime.body
    assert "Traceback" not in broker.log_text()


async def test_a_suspend_below_the_cap_is_kept_as_asked(broker_factory):
    broker = broker_factory(extra={"maxPullSuspendTimeMillis": 60_000})
    async with await WireClient.connect(broker.addr) as client:
        created = await client.request(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "SuspendKeptTopic", "readQueueNums": "1",
                                                                   "writeQueueNums": "1", "perm": "6"})
        assert created.code == 0
        started = time.monotonic()
        pulled = await client.request(RC.PULL_MESSAGE, pull_fields("SuspendKeptTopic", "suspendGroup", 0, 0,
                                                                   sys_flag=SUB | SUSPEND, suspend_ms=700))
        held = time.monotonic() - started
        assert pulled.code == R.PULL_NOT_FOUND
        assert 0.6 <= held < 5, held


def test_the_cap_defaults_to_a_minute_and_must_be_positive():
    assert BrokerConfig().max_pull_suspend_time_millis == 60_000
    with pytest.raises(ConfigError) as refused:
        BrokerConfig(max_pull_suspend_time_millis=0)
    assert refused.value.key == "maxPullSuspendTimeMillis"
