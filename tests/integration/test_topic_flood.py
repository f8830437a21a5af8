"""Issue 27, "no flood starves others": what a flood of auto-created topics costs the broker and its other clients.

A topic must hold no file descriptor while its queues are idle (consume-queue files are mapped without keeping
one), creating one must not block the event loop for long, and as descriptors run short the broker refuses new
topics and connections with a clear error while existing topics keep working and the commit log keeps flushing.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import time

import pytest

from protocol.codes import RequestCode, ResponseCode
from tests.integration.wire import WireClient, create_topic, pull_records, send_v2_fields

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/<pid>/fd")

FLOOD_CONF = {"autoCreateTopicEnable": "true", "mappedFileSizeConsumeQueue": 6_000_000}


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def send(client: WireClient, topic: str, body: bytes = b"x", queue_id: int = 0,
               timeout: float = 30.0):
    return await client.request(RequestCode.SEND_MESSAGE_V2, send_v2_fields(topic, queue_id), body,
                                timeout=timeout)


async def flood_topics(addr: str, prefix: str, count: int, workers: int = 4) -> list:
    """Auto-create ``count`` topics by sending one message to each (``workers`` sends in flight)."""
    client = await WireClient.connect(addr)
    names = iter(range(count))
    answers: list = []

    async def worker() -> None:
        for i in names:
            answers.append(await send(client, f"{prefix}{i}"))

    try:
        await asyncio.gather(*(worker() for _ in range(workers)))
    finally:
        await client.close()
    return answers


async def bystander(addr: str, topic: str, stop: asyncio.Event) -> list[float]:
    """Send one message at a time to ``topic`` until ``stop``; the latency of each, in seconds."""
    latencies: list[float] = []
    async with await WireClient.connect(addr) as client:
        while not stop.is_set():
            t0 = time.perf_counter()
            resp = await send(client, topic)
            latencies.append(time.perf_counter() - t0)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
    return latencies


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 2 else (values[0] if values else 0.0)


def test_auto_created_topics_hold_no_descriptors(broker_factory):
    """1,500 auto-created topics with a message each leave the broker's descriptor count flat, and every
    message stays readable (mappings without descriptors still read and write)."""
    broker = broker_factory(extra=FLOOD_CONF)
    pid = broker.proc.pid

    async def run() -> tuple[int, int]:
        await create_topic(broker.addr, "Warm", 1)
        async with await WireClient.connect(broker.addr) as client:
            assert (await send(client, "Warm")).code == ResponseCode.SUCCESS
        await asyncio.sleep(1.5)
        before = open_fds(pid)
        answers = await flood_topics(broker.addr, "Flood", 1500)
        assert [a.code for a in answers].count(ResponseCode.SUCCESS) == 1500, {a.remark for a in answers}
        await asyncio.sleep(1.5)  # a flush of every new queue (short-lived descriptors) has run
        after = open_fds(pid)
        async with await WireClient.connect(broker.addr) as client:
            for topic in ("Flood0", "Flood749", "Flood1499"):
                assert [r.body for r in await pull_records(client, topic, 0)] == [b"x"], topic
                assert (await send(client, topic, b"y")).code == ResponseCode.SUCCESS
                assert [r.body for r in await pull_records(client, topic, 0)] == [b"x", b"y"], topic
        return before, after

    before, after = asyncio.run(run())
    print(f"broker descriptors: {before} before 1,500 auto-created topics, {after} after")
    assert after - before < 100, (before, after)
    assert "Too many open files" not in broker.log_text()
