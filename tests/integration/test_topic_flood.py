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
from tests.support.wire import WireClient, create_topic, pull_records, send_v2_fields

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/<pid>/fd")

# The per-client auto-creation limit off: these tests measure what creating topics costs the store (the limit has
# its own tests in tests/faults/test_flood_autocreate.py).
FLOOD_CONF = {"autoCreateTopicEnable": "true", "mappedFileSizeConsumeQueue": 6_000_000,
              "autoCreateTopicRatePerClient": 0}


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
    assert "[Errno 24]" not in broker.log_text()  # "Too many open files"


class lowered_descriptor_limit:
    """Lower this process's soft RLIMIT_NOFILE while a broker subprocess starts (the child inherits it)."""

    def __init__(self, soft: int) -> None:
        self.soft = soft
        self.saved = resource.getrlimit(resource.RLIMIT_NOFILE)

    def __enter__(self) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.soft, self.saved[1]))

    def __exit__(self, *exc) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, self.saved)


async def admitted(addr: str) -> WireClient | None:
    """A connection the broker keeps (it answers a request), None when the broker closes it."""
    try:
        client = await WireClient.connect(addr)
    except OSError:
        return None
    try:
        await client.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}, timeout=5)
    except (ConnectionError, asyncio.TimeoutError, OSError):
        await client.close()
        return None
    return client


def test_descriptor_reserve_refuses_topics_and_connections_not_the_store(broker_factory):
    """Under a low open-file limit (256; fileDescriptorReserve 128 by default): a flood of auto-created topics
    costs no descriptors; connections are refused once they would eat into the reserve; when descriptors are
    short (the limit tightened under the running broker, as anything else holding descriptors would), new topics
    get a clear refusal while the existing topic's sends keep succeeding with SYNC_FLUSH, so the commit log keeps
    flushing; with room again, topics and connections are accepted again."""
    with lowered_descriptor_limit(256):
        broker = broker_factory(extra={**FLOOD_CONF, "flushDiskType": "SYNC_FLUSH"})
    pid = broker.proc.pid
    assert resource.prlimit(pid, resource.RLIMIT_NOFILE)[0] == 256
    hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]

    async def run() -> None:
        await create_topic(broker.addr, "Existing", 1)
        main = await WireClient.connect(broker.addr)
        assert (await send(main, "Existing")).code == ResponseCode.SUCCESS
        # A flood of new topics alone no longer uses descriptors up (it hit "Too many open files" at ~230).
        answers = await flood_topics(broker.addr, "Low", 600)
        assert [a.code for a in answers].count(ResponseCode.SUCCESS) == 600, {a.remark for a in answers}
        assert open_fds(pid) < 64, open_fds(pid)
        # Connections: admitted up to the reserve, then refused (closed at once, logged).
        held: list[WireClient] = []
        refused = 0
        for _ in range(200):
            client = await admitted(broker.addr)
            if client is None:
                refused += 1
                if refused >= 3:
                    break
            else:
                held.append(client)
        print(f"connections admitted under the 256 limit: {len(held) + 1} (broker fds {open_fds(pid)}), then refused")
        assert refused >= 3 and 64 <= len(held) < 200, (len(held), refused)
        assert (await send(main, "Existing")).code == ResponseCode.SUCCESS
        # Descriptors short: new topics refused with a clear remark, the existing topic still written and flushed.
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_fds(pid) + 64, hard))
        await asyncio.sleep(0.2)  # the budget counts again at most every 100 ms
        for i in range(50):
            resp = await send(main, f"Refused{i}")
            assert resp.code == ResponseCode.SYSTEM_BUSY, (resp.code, resp.remark)
            assert "short of file descriptors" in resp.remark and "fileDescriptorReserve" in resp.remark, resp.remark
            resp = await send(main, "Existing")
            assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        assert await admitted(broker.addr) is None
        # Control: with room again, new topics and connections are accepted again.
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (256, hard))
        for client in held:
            await client.close()
        await asyncio.sleep(0.3)
        resp = await send(main, "Refused0")
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        again = await admitted(broker.addr)
        assert again is not None
        await again.close()
        assert [r.body for r in await pull_records(main, "Refused0", 0)] == [b"x"]
        assert len(await pull_records(main, "Existing", 0)) == 52
        await main.close()

    asyncio.run(run())
    log = broker.wait_for_log("refusing topic Refused")
    assert "[Errno 24]" not in log and "EMFILE" not in log  # "Too many open files"
    assert "flush failed" not in log
    assert "refusing a connection" in log and "refusing topic Refused" in log


def test_bystander_latency_during_topic_flood(broker_factory):
    """A client auto-creating 1,500 topics as fast as it can (4 sends in flight) leaves another client's sends
    to an existing topic quick."""
    broker = broker_factory(extra=FLOOD_CONF)

    async def run() -> tuple[list[float], list[float], float]:
        await create_topic(broker.addr, "Bystander", 1)
        stop = asyncio.Event()
        quiet_task = asyncio.create_task(bystander(broker.addr, "Bystander", stop))
        await asyncio.sleep(3)
        stop.set()
        quiet = await quiet_task
        stop = asyncio.Event()
        task = asyncio.create_task(bystander(broker.addr, "Bystander", stop))
        t0 = time.perf_counter()
        answers = await flood_topics(broker.addr, "Storm", 1500)
        elapsed = time.perf_counter() - t0
        stop.set()
        busy = await task
        assert [a.code for a in answers].count(ResponseCode.SUCCESS) == 1500, {a.remark for a in answers}
        return quiet, busy, elapsed

    quiet, busy, elapsed = asyncio.run(run())
    print(f"bystander alone: {len(quiet) / 3:.0f} sends/s, p99 {p99(quiet) * 1e3:.1f} ms; during the flood of 1,500 "
          f"topics ({elapsed:.1f} s, {1500 / elapsed:.0f} topics/s): {len(busy)} sends ({len(busy) / elapsed:.0f}/s), "
          f"p99 {p99(busy) * 1e3:.1f} ms, max {max(busy) * 1e3:.1f} ms")
    assert len(busy) >= 50, len(busy)
    # measured on 2 shared CPUs: p99 29 ms, max 35 ms (before: p99 621 ms, max 834 ms, 9 sends/s)
    assert p99(busy) < 0.2 and max(busy) < 1.0, (p99(busy), max(busy))


@pytest.mark.parametrize("reserve, expected", [("-1", "must be >= 0"), ("300", "leave no room under the open-file")])
def test_bad_descriptor_reserve_stops_start_up_naming_the_key(broker_factory, reserve, expected):
    """A reserve that is negative, or leaves nothing under the open-file limit (256 here), stops start-up with
    one line naming the key."""
    broker = broker_factory(extra={"fileDescriptorReserve": reserve}, start=False)
    with lowered_descriptor_limit(256), pytest.raises(RuntimeError, match="did not boot"):
        broker.start(timeout=10)
    log = broker.log_text()
    assert "fileDescriptorReserve" in log and expected in log, log
    assert "Traceback" not in log, log
