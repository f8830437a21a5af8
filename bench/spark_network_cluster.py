"""The two-broker cluster of bench/spark_network.py: brokers, the topic, the messages, and worker memory sampling.

Two real broker processes (broker-a with the embedded name server, broker-b registered with it) on free loopback
ports; one topic created on both with UPDATE_AND_CREATE_TOPIC (5 queues each: 10 queues in all); the messages sent
by the project's producer in batches to explicit queues (each queue gets the same share), then the brokers' max
offsets checked against what was sent.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from tests.support.broker_process import BrokerProcess, prepare_broker

from client import Message, Producer
from client.admin import AdminClient
from client.message import MessageQueue
from protocol.codes import RequestCode
from protocol.config_bodies import TopicConfig

TOPIC = "SparkNetBench"
BROKERS = ("broker-a", "broker-b")
BATCH = 256  # messages per SEND_BATCH_MESSAGE
IN_FLIGHT = 8  # batches outstanding in all
DISPATCH_WAIT_S = 60.0
COMMIT_LOG_SIZE = 1 << 30


@dataclass
class Cluster:
    """What the benchmark reads: the name server, the topic, the store directories and the queues' counts."""

    workdir: Path
    namesrv: str
    brokers: list[BrokerProcess]
    stores: list[str]
    addrs: dict[str, str] = field(default_factory=dict)  # brokerName -> address
    counts: dict[tuple[str, int], int] = field(default_factory=dict)  # (brokerName, queueId) -> messages

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def stop(self) -> None:
        """SIGTERM (bounded, then SIGKILL) every broker started, the name server's last."""
        for broker in reversed(self.brokers):
            broker.stop()


def _listen_port(conf_path: str) -> int:
    with open(conf_path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("listenPort="):
                return int(line.split("=", 1)[1])
    raise RuntimeError(f"no listenPort in {conf_path}")


def start_brokers(workdir: Path, queues_per_broker: int, extra: dict[str, object] | None = None) -> Cluster:
    """broker-a (embedded name server) and broker-b (registered with it), both booted; extra: broker.conf keys."""
    brokers: list[BrokerProcess] = []
    stores, addrs = [], {}
    namesrv = None
    try:
        for name in BROKERS:
            home = workdir / name
            home.mkdir(parents=True)
            broker, ns_port = prepare_broker(str(home), COMMIT_LOG_SIZE, None, broker_name=name, namesrv_addr=namesrv,
                                             extra=extra)
            brokers.append(broker)
            print(f"{name}: {broker.start().boot_line} (pid {broker.pid})", file=sys.stderr, flush=True)
            namesrv = namesrv or f"127.0.0.1:{ns_port}"
            stores.append(str(home / "store"))
            addrs[name] = f"127.0.0.1:{_listen_port(broker.conf_path)}"
    except BaseException:
        for broker in brokers:
            broker.kill()
        raise
    return Cluster(workdir, namesrv, brokers, stores, addrs,
                   {(b, q): 0 for b in BROKERS for q in range(queues_per_broker)})


async def _create_topic(cluster: Cluster, queues_per_broker: int) -> None:
    """The topic on both brokers, then wait (bounded) until the name server routes all its queues."""
    async with AdminClient(cluster.namesrv, timeout=10.0) as admin:
        for addr in cluster.addrs.values():
            await admin.create_topic(addr, TopicConfig(TOPIC, queues_per_broker, queues_per_broker, 6))
        deadline = time.monotonic() + 30.0
        while True:
            try:
                route = await admin.topic_route(TOPIC)
                routed = {q.broker_name: q.read_queue_nums for q in route.queue_datas}
            except Exception:  # noqa: BLE001 - not routed yet
                routed = {}
            if routed == {b: queues_per_broker for b in BROKERS}:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the name server routes {routed} for {TOPIC} after 30 s")
            await asyncio.sleep(0.2)


async def _send(cluster: Cluster, messages: int, body_size: int) -> None:
    """Every queue gets messages // queues messages (the remainder to the first ones): batches of BATCH, tags
    tag0..tag15 and a unique key per message, IN_FLIGHT batches outstanding."""
    body = (bytes(range(256)) * (body_size // 256 + 1))[:body_size]
    queues = [MessageQueue(TOPIC, b, q) for b, q in cluster.counts]
    share = {mq: messages // len(queues) + (1 if k < messages % len(queues) else 0) for k, mq in enumerate(queues)}
    jobs = [(mq, lo, min(lo + BATCH, share[mq])) for mq in queues for lo in range(0, share[mq], BATCH)]
    jobs.sort(key=lambda job: job[1])  # round-robin over the queues: both brokers busy all along
    producer = Producer("SparkNetBenchProducer", cluster.namesrv, send_timeout=60.0)
    await producer.start()
    next_job = 0

    async def worker() -> None:
        nonlocal next_job
        while next_job < len(jobs):
            mq, lo, hi = jobs[next_job]
            next_job += 1
            base = queues.index(mq) * 1_000_000_000
            batch = [Message(TOPIC, body, tags=f"tag{i % 16}", keys=f"k{base + i}") for i in range(lo, hi)]
            await producer.send_batch(batch, queue=mq)
            cluster.counts[(mq.broker_name, mq.queue_id)] += hi - lo

    try:
        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    finally:
        await producer.shutdown()


async def _check_offsets(cluster: Cluster) -> None:
    """Wait (bounded) until every queue's max offset is what was sent to it: all dispatched, nothing extra."""
    async with AdminClient(cluster.namesrv, timeout=10.0) as admin:
        deadline = time.monotonic() + DISPATCH_WAIT_S
        while True:
            found = {}
            for (broker, queue_id) in cluster.counts:
                reply = await admin.invoke(cluster.addrs[broker], RequestCode.GET_MAX_OFFSET,
                                           {"topic": TOPIC, "queueId": queue_id, "committed": "true"})
                found[(broker, queue_id)] = int((reply.ext_fields or {}).get("offset", -1))
            if found == cluster.counts:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"max offsets {found} != sent {cluster.counts} after {DISPATCH_WAIT_S:.0f} s")
            await asyncio.sleep(0.2)


def prepare(workdir: Path, messages: int, body_size: int, queues_per_broker: int,
            extra: dict[str, object] | None = None) -> Cluster:
    """Two booted brokers (extra: broker.conf keys) holding `messages` messages of TOPIC in 2 x queues_per_broker
    queues."""
    cluster = start_brokers(workdir, queues_per_broker, extra)
    try:
        started = time.perf_counter()
        asyncio.run(_create_topic(cluster, queues_per_broker))
        routed = time.perf_counter()
        asyncio.run(_send(cluster, messages, body_size))
        asyncio.run(_check_offsets(cluster))
        elapsed = time.perf_counter() - routed
        print(f"topic {TOPIC} routed on both brokers in {routed - started:.1f} s; sent {cluster.total:,} messages "
              f"({body_size}-byte bodies) to {len(cluster.counts)} queues in {elapsed:.1f} s "
              f"({cluster.total / elapsed:,.0f} msgs/s)", flush=True)
    except BaseException:
        for broker in cluster.brokers:
            broker.kill()
        raise
    return cluster


def run_available_now(query, timeout_s: float = 600) -> None:
    """Wait for a started trigger(availableNow=True) query to end (stopped in any case); RuntimeError when it did not
    end in time or failed. (spark_network_ab.py's session keeps its own copy: it runs with another checkout's
    packages on its path, where this module's imports are not found.)"""
    try:
        if not query.awaitTermination(timeout_s):
            raise RuntimeError(f"the availableNow query did not end within {timeout_s:.0f} s")
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")


def cpu_seconds(pid: int | None, reaped: bool = False) -> float:
    """User + system CPU seconds a process has used so far (0 when it is gone); reaped: with its children that
    ended and were waited for (a Python daemon's forked workers)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rpartition(")")[2].split()
        ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(root: int) -> list[int]:
    """Every live process under `root`."""
    children = _children()
    found, todo = [], list(children.get(root, []))
    for _ in range(100_000):  # bounded walk
        if not todo:
            break
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def spark_cpu(exclude: set[int]) -> tuple[float, float]:
    """CPU seconds used so far by this driver's process tree, leaving out `exclude` (the brokers): (the JVM and
    other non-Python processes, the Python workers with the children they reaped and the driver itself)."""
    jvm, python = 0.0, cpu_seconds(os.getpid())
    for pid in descendants(os.getpid()):
        if pid in exclude:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                program = f.read().split(b"\0", 1)[0].rsplit(b"/", 1)[-1]
        except OSError:
            continue
        if b"python" in program:
            python += cpu_seconds(pid, True)
        else:
            jvm += cpu_seconds(pid, True)
    return jvm, python


def rss_anon(pid: int | str = "self") -> int:
    """Anonymous resident bytes of a process (0 when it is gone)."""
    return _status(pid).get("RssAnon", 0)


def _status(pid: int | str) -> dict[str, int]:
    """VmRSS / RssAnon / VmHWM of a process in bytes ({} when it is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "VmHWM"):
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        return {}
    return out


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def python_workers(root: int) -> list[int]:
    """Spark's Python workers under `root` (this driver): processes running pyspark that a pyspark daemon forked
    (they keep the daemon's command line), not the daemons themselves."""
    pyspark = set()
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"pyspark" in cmd and b"python" in cmd.split(b"\0", 1)[0].rsplit(b"/", 1)[-1]:
            pyspark.add(pid)
    return sorted(pid for pid in pyspark if _ppid(pid) in pyspark)


class WorkerMemory:
    """Samples the Python workers' memory every `interval` seconds on a thread while the `with` block runs.

    Per worker, its anonymous resident memory (RssAnon: the worker's own heap, Arrow buffers and pulled bytes;
    file-backed pages such as a store's mapped commit log are not in it). With one task per worker
    (spark.python.worker.reuse=false) a worker's peak is one range's read plus the worker's own imports."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.samples: dict[int, list[int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(10)

    def _run(self) -> None:
        for _ in range(10_000_000):  # bounded; ends when the block ends
            if self._stop.wait(self.interval):
                return
            self._sample()

    def _sample(self) -> None:
        for pid in python_workers(os.getpid()):
            anon = _status(pid).get("RssAnon")
            if anon is not None:
                self.samples.setdefault(pid, []).append(anon)

    def summary(self, min_samples: int = 20) -> str:
        """The highest peak of any worker and the median peak of the task workers (those seen >= min_samples
        times: planning workers live shorter)."""
        if not self.samples:
            return "no Python worker seen"
        top = max(max(s) for s in self.samples.values())
        tasks = [max(s) for s in self.samples.values() if len(s) >= min_samples]
        median = f", median of {len(tasks)} task workers {statistics.median(tasks) / 2**20:.0f} MiB" if tasks else ""
        return f"peak RssAnon {top / 2**20:.0f} MiB{median}"
