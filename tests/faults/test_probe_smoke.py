"""The fault suite's probes measure what they claim on a healthy broker."""

from __future__ import annotations

import asyncio

from tests.support.probes import LatencyProbe, rss_bytes


async def test_latency_probe_sees_a_quiet_broker_answer_quickly(broker):
    async with LatencyProbe(broker.addr) as probe:
        await asyncio.sleep(0.3)
    assert len(probe.latencies) >= 5
    assert probe.failures == 0
    assert probe.max_latency < 1.0
    assert rss_bytes(broker.proc.pid) > 10 * 1024 * 1024
