"""End-to-end throughput benchmark: the real broker process + the project's client on 127.0.0.1.

    python bench/run.py [--messages N] [--json] [--phases single,pipelined,batch,pull,push,sqlpull]

Starts `python -m broker -c <generated broker.conf>` on free ports with a temporary store, waits (bounded) for the
boot line, then measures four phases, each bounded by a message count and a wall-clock limit:

  single     one send in flight (128-byte body, a tag)                       msgs/s
  pipelined  --window sends in flight (1,000 by default) over one producer    msgs/s
  batch      send_batch of --batch-size messages, --batches-in-flight at once msgs/s
  pull       pulls everything the batch phase wrote, several requests in flight per queue, count verified
  push       a PushConsumer (new group, CONSUME_FROM_FIRST_OFFSET) consumes everything the batch phase wrote;
             msgs/s from start() until the last message reached the listener, count and duplicates verified
  sqlpull    (opt-in) --messages messages with tag TagA/TagB alternating and property a = i % 8 are written
             (untimed), then pulled three times like `pull`: with "*", with tag "TagA" (half match) and with
             the issue's SQL92 selector (a between 0 and 3: half match); msgs/s delivered and examined

The broker is stopped with SIGTERM at the end (SIGKILL if it does not exit, or on failure).
Profiling helpers: --profile-client DIR writes one cProfile file per phase of the client side;
--broker-wrapper "py-spy record -o /tmp/b.svg --" prefixes the broker command (e.g. with a profiler).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import platform
import queue
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from client import (  # noqa: E402
    ConsumeResult,
    Message,
    MessageSelector,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
)

BOOT_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
BODY = b"x" * 128
TAG = "TagA"
SQL_SELECTOR = "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)"


# ---------------------------------------------------------------------------------------------- broker process
def free_port() -> int:
    """An ephemeral port the OS just handed out on 127.0.0.1 (bind port 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_broker_conf(path: str, store_dir: str, listen_port: int, namesrv_port: int, commit_log_size: int) -> None:
    lines = [
        "brokerClusterName=BenchCluster",
        "brokerName=bench-broker",
        "brokerId=0",
        "brokerRole=ASYNC_MASTER",
        "brokerIP1=127.0.0.1",
        "listenHost=127.0.0.1",
        f"listenPort={listen_port}",
        "enableEmbeddedNamesrv=true",
        f"namesrvListenPort={namesrv_port}",
        f"storePathRootDir={store_dir}",
        f"mappedFileSizeCommitLog={commit_log_size}",
        "flushDiskType=ASYNC_FLUSH",
        "autoCreateTopicEnable=true",
        "autoCreateSubscriptionGroup=true",
        "defaultTopicQueueNums=4",
        "enablePropertyFilter=true",
    ]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


class BrokerProcess:
    """The broker as a child process; output is drained by a thread so the pipe never blocks it."""

    def __init__(self, conf_path: str, log_path: str, wrapper: str | None = None) -> None:
        self.conf_path = conf_path
        self.log_path = log_path
        self.wrapper = shlex.split(wrapper) if wrapper else []
        self.proc: subprocess.Popen | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._log = None

    def start(self, timeout: float = BOOT_TIMEOUT_S) -> str:
        cmd = self.wrapper + [sys.executable, "-m", "broker", "-c", self.conf_path, "-l", "WARNING"]
        self._log = open(self.log_path, "w", encoding="utf-8")
        self.proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            env={**os.environ, "PYTHONPATH": REPO_ROOT},
        )
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"broker did not print its boot line within {timeout:.0f}s (log: {self.log_path})")
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"broker exited with {self.proc.wait()} before booting (log: {self.log_path})")
            if "boot success" in line:
                return line.strip()

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            self._log.flush()
            self._lines.put(line)
        self._lines.put(None)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait bounded, then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


# ---------------------------------------------------------------------------------------------- phases
def process_cpu_seconds(pid: int | None) -> float:
    """user+system CPU seconds of a process (all threads) from /proc; 0.0 when unavailable."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


class PhaseResult:
    def __init__(self, name: str, messages: int, seconds: float, note: str = "") -> None:
        self.name = name
        self.messages = messages
        self.seconds = seconds
        self.note = note
        self.client_cpu = 0.0  # CPU seconds the bench process used during the phase
        self.broker_cpu = 0.0  # CPU seconds the broker process used during the phase
        self.examined: int | None = None  # filtered pulls: queue entries the broker looked at

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict:
        return {"phase": self.name, "messages": self.messages, "seconds": round(self.seconds, 3),
                "msgs_per_s": round(self.rate), "client_cpu_s": round(self.client_cpu, 2),
                "broker_cpu_s": round(self.broker_cpu, 2), "note": self.note,
                **({} if self.examined is None else {"examined": self.examined,
                                                    "examined_per_s": round(self.examined / self.seconds)})}


class Profiling:
    """Optional per-phase profiles: cProfile of this (client) process, py-spy attached to the broker process."""

    def __init__(self, client_dir: str | None, broker_dir: str | None, broker_pid: int | None) -> None:
        self.client_dir = client_dir
        self.broker_dir = broker_dir
        self.broker_pid = broker_pid

    @contextlib.contextmanager
    def phase(self, name: str | None, results: list[PhaseResult] | None = None):
        """Profile one phase; when results is given, charge the CPU used meanwhile to the phase appended to it."""
        spy = None
        if name and self.broker_dir and self.broker_pid:
            os.makedirs(self.broker_dir, exist_ok=True)
            spy = subprocess.Popen(
                ["py-spy", "record", "--pid", str(self.broker_pid), "--rate", "250", "--format", "raw",
                 "-o", os.path.join(self.broker_dir, f"broker_{name}.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # let py-spy attach before the phase starts
        prof = None
        if name and self.client_dir:
            os.makedirs(self.client_dir, exist_ok=True)
            prof = cProfile.Profile()
            prof.enable()
        appended = len(results) if results is not None else 0
        client_cpu0, broker_cpu0 = time.process_time(), process_cpu_seconds(self.broker_pid)
        try:
            yield
        finally:
            client_cpu, broker_cpu = time.process_time() - client_cpu0, process_cpu_seconds(self.broker_pid) - broker_cpu0
            if results is not None and len(results) > appended:
                results[-1].client_cpu, results[-1].broker_cpu = client_cpu, broker_cpu
            if prof is not None:
                prof.disable()
                prof.dump_stats(os.path.join(self.client_dir, f"client_{name}.prof"))
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                try:
                    spy.wait(30)
                except subprocess.TimeoutExpired:
                    spy.kill()
                    spy.wait(5)


async def phase_single(producer: Producer, topic: str, count: int, limit_s: float) -> PhaseResult:
    """One request at a time: latency-bound round trips."""
    await producer.send(Message(topic, BODY, tags=TAG))  # route + connection warm-up, not timed
    sent = 0
    start = time.perf_counter()
    deadline = start + limit_s
    send = producer.send
    while sent < count:
        await send(Message(topic, BODY, tags=TAG))
        sent += 1
        if not sent & 255 and time.perf_counter() > deadline:
            break
    return PhaseResult("single", sent, time.perf_counter() - start, "1 in flight")


async def phase_pipelined(producer: Producer, topic: str, count: int, limit_s: float, window: int) -> PhaseResult:
    """`window` coroutines each looping over send: exactly `window` requests in flight until the count is reached."""
    await producer.send(Message(topic, BODY, tags=TAG))
    remaining = count
    sent = 0
    start = time.perf_counter()
    deadline = start + limit_s
    send = producer.send

    async def worker() -> None:
        nonlocal remaining, sent
        while remaining > 0:
            remaining -= 1
            await send(Message(topic, BODY, tags=TAG))
            sent += 1
            if not sent & 1023 and time.perf_counter() > deadline:
                remaining = 0

    await asyncio.gather(*(worker() for _ in range(window)))
    return PhaseResult("pipelined", sent, time.perf_counter() - start, f"{window} in flight")


async def phase_batch(producer: Producer, topic: str, count: int, limit_s: float, batch_size: int,
                      in_flight: int) -> tuple[PhaseResult, int]:
    """send_batch of batch_size fresh messages, in_flight batches outstanding. Returns (result, messages stored)."""
    remaining = count
    sent = 0
    start = time.perf_counter()
    deadline = start + limit_s
    send_batch = producer.send_batch

    async def worker() -> None:
        nonlocal remaining, sent
        while remaining > 0:
            n = min(batch_size, remaining)
            remaining -= n
            await send_batch([Message(topic, BODY, tags=TAG) for _ in range(n)])
            sent += n
            if time.perf_counter() > deadline:
                remaining = 0

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    result = PhaseResult("batch", sent, time.perf_counter() - start, f"{batch_size}/batch, {in_flight} in flight")
    return result, sent


async def phase_pull(consumer: PullConsumer, topic: str, expected: int, limit_s: float, max_nums: int,
                     per_queue: int) -> PhaseResult:
    """Read every queue of topic from its min to its max offset; per_queue contiguous ranges pulled concurrently."""
    queues = await consumer.fetch_message_queues(topic)
    bounds = []
    for mq in queues:
        lo, hi = await consumer.min_offset(mq), await consumer.max_offset(mq)
        bounds.append((mq, lo, hi))
    total_available = sum(hi - lo for _, lo, hi in bounds)
    received = 0
    pulls = 0
    start = time.perf_counter()
    deadline = start + limit_s

    async def read_range(mq, lo: int, hi: int) -> None:
        nonlocal received, pulls
        offset = lo
        while offset < hi and time.perf_counter() < deadline:
            result = await consumer.pull(mq, "*", offset, min(max_nums, hi - offset))
            pulls += 1
            if result.status is not PullStatus.FOUND:
                raise RuntimeError(f"pull {mq} @ {offset}: {result.status}")
            got = len(result.messages)
            if got == 0 or result.next_begin_offset <= offset:
                raise RuntimeError(f"pull {mq} @ {offset}: no progress")
            if result.messages[0].queue_offset != offset:
                raise RuntimeError(f"pull {mq} @ {offset}: first message has offset {result.messages[0].queue_offset}")
            # The broker does not know our range end; never count past it.
            got = min(got, hi - offset)
            received += got
            offset += got

    tasks = []
    for mq, lo, hi in bounds:
        step = max(1, -(-(hi - lo) // per_queue))
        for r_lo in range(lo, hi, step):
            tasks.append(read_range(mq, r_lo, min(hi, r_lo + step)))
    await asyncio.gather(*tasks)
    seconds = time.perf_counter() - start
    note = f"{len(queues)} queues x {per_queue} ranges, max_nums {max_nums}, {pulls} pulls"
    if received != total_available or received < expected:
        note += f" COUNT MISMATCH: got {received}, queues held {total_available}, batch phase sent {expected}"
    else:
        note += ", count verified"
    return PhaseResult("pull", received, seconds, note)


async def phase_push(namesrv: str, topic: str, expected: int, limit_s: float, pull_batch_size: int,
                     consume_batch: int, threads: int) -> PhaseResult:
    """A new push-consumer group reads the whole topic: rebalance, long-poll pull loops, listener, offsets."""
    received = 0
    offsets: dict[int, set[int]] = {}
    done = asyncio.Event()

    async def listener(msgs) -> ConsumeResult:
        nonlocal received
        received += len(msgs)
        for m in msgs:
            offsets.setdefault(m.queue_id, set()).add(m.queue_offset)
        if received >= expected:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        f"BenchPushGroup{int(time.time() * 1000)}", namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        pull_batch_size=pull_batch_size, consume_message_batch_max_size=consume_batch, consume_thread_max=threads,
    )
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    start = time.perf_counter()
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), limit_s)
    except asyncio.TimeoutError:
        pass
    seconds = time.perf_counter() - start
    await consumer.shutdown()
    distinct = sum(len(s) for s in offsets.values())
    note = f"pull batch {pull_batch_size}, consume batch {consume_batch}, {threads} workers"
    if received < expected or distinct != received:
        note += f" COUNT MISMATCH: received {received} ({distinct} distinct), expected {expected}"
    else:
        note += ", count verified, no duplicates"
    return PhaseResult("push", received, seconds, note)


async def produce_filter_topic(producer: Producer, topic: str, count: int, batch_size: int,
                               in_flight: int) -> tuple[int, int, int]:
    """Message i: tag TagA (even i) / TagB (odd i), property a = i % 8, so tag "TagA" and SQL_SELECTOR (a between 0
    and 3) each match half. Untimed. Returns (messages stored, SQL matches, TagA matches)."""
    stored = sql = tag = 0
    next_i = 0

    def make(i: int) -> Message:
        return Message(topic, BODY, tags="TagA" if i % 2 == 0 else "TagB", properties={"a": str(i % 8)})

    await producer.send(make(0))  # route warm-up / topic creation
    stored, sql, tag = 1, 1, 1

    async def worker() -> None:
        nonlocal next_i, stored, sql, tag
        while next_i < count - 1:
            first = next_i + 1
            n = min(batch_size, count - 1 - next_i)
            next_i += n
            await producer.send_batch([make(i) for i in range(first, first + n)])
            stored += n
            sql += sum(1 for i in range(first, first + n) if i % 8 < 4)
            tag += sum(1 for i in range(first, first + n) if i % 2 == 0)

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return stored, sql, tag


async def phase_filtered_pull(consumer: PullConsumer, topic: str, name: str, selector: MessageSelector | str,
                              expected: int, limit_s: float, max_nums: int, per_queue: int,
                              check=None) -> PhaseResult:
    """Like phase_pull, with a selector: every queue is read from min to max offset in per_queue concurrent ranges;
    the broker examines up to 800 entries per pull and answers the offset to continue from. Delivered messages are
    counted against `expected`; check(message) is applied to the first message of every response."""
    queues = await consumer.fetch_message_queues(topic)
    bounds = [(mq, await consumer.min_offset(mq), await consumer.max_offset(mq)) for mq in queues]
    examined = sum(hi - lo for _, lo, hi in bounds)
    delivered = pulls = 0
    bad: list[str] = []
    start = time.perf_counter()
    deadline = start + limit_s

    async def read_range(mq, lo: int, hi: int) -> None:
        nonlocal delivered, pulls
        offset = lo
        while offset < hi and time.perf_counter() < deadline:
            result = await consumer.pull(mq, selector, offset, max_nums)
            pulls += 1
            if result.status not in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
                raise RuntimeError(f"{name} {mq} @ {offset}: {result.status}")
            if result.next_begin_offset <= offset:
                raise RuntimeError(f"{name} {mq} @ {offset}: no progress")
            messages = result.messages
            if messages and check is not None and not check(messages[0]):
                bad.append(f"{mq.queue_id}@{messages[0].queue_offset}")
            # The broker does not know our range end; never count past it.
            delivered += sum(1 for m in messages if m.queue_offset < hi)
            offset = result.next_begin_offset

    tasks = []
    for mq, lo, hi in bounds:
        step = max(1, -(-(hi - lo) // per_queue))
        tasks.extend(read_range(mq, r_lo, min(hi, r_lo + step)) for r_lo in range(lo, hi, step))
    await asyncio.gather(*tasks)
    seconds = time.perf_counter() - start
    result = PhaseResult(name, delivered, seconds)
    result.examined = examined
    result.note = (f"examined {examined:,} ({examined / seconds:,.0f}/s), {pulls} pulls, "
                   f"{delivered / max(1, examined):.0%} delivered")
    if delivered != expected or bad:
        result.note += f" COUNT MISMATCH: delivered {delivered}, expected {expected}; wrong: {bad[:5]}"
    else:
        result.note += ", count verified"
    return result


async def phase_sqlpull(namesrv: str, stamp: int, args, profiling: Profiling) -> list[PhaseResult]:
    """The filtered-pull comparison on one topic: unfiltered, tag (50%) and SQL92 (50%) pulls of the same data."""
    topic = f"BenchFilter{stamp}"
    producer = Producer("BenchFilterProducerGroup", namesrv, send_timeout=30.0)
    await producer.start()
    try:
        stored, sql_matches, tag_matches = await produce_filter_topic(
            producer, topic, args.messages, args.batch_size, args.batches_in_flight)
    finally:
        await producer.shutdown()
    results = []
    consumer = PullConsumer("BenchFilterConsumerGroup", namesrv, pull_timeout=30.0)
    await consumer.start()
    try:
        runs = [
            ("pull-all", "*", stored, None),
            ("pull-tag", "TagA", tag_matches, lambda m: m.tags == "TagA"),
            ("pull-sql", MessageSelector.sql(SQL_SELECTOR), sql_matches, lambda m: int(m.properties["a"]) <= 3),
        ]
        for name, selector, expected, check in runs:
            mq = (await consumer.fetch_message_queues(topic))[0]
            await consumer.pull(mq, selector, 0, 1)  # connection and selector-compile warm-up, not timed
            with profiling.phase(f"sqlpull_{name}", results):
                results.append(await phase_filtered_pull(consumer, topic, name, selector, expected, args.limit,
                                                         args.max_nums, args.pulls_per_queue, check))
            print(_row(results[-1]), file=sys.stderr, flush=True)
    finally:
        await consumer.shutdown()
    base = results[0].rate
    for r in results[1:]:
        r.note += f"; {r.rate / base:.0%} of the unfiltered delivery rate" if base else ""
    return results


async def run_phases(args, namesrv: str, profiling: Profiling) -> list[PhaseResult]:
    results: list[PhaseResult] = []
    phases = set(args.phases.split(","))
    n = args.messages
    stamp = int(time.time())
    producer = Producer("BenchProducerGroup", namesrv, send_timeout=30.0)
    await producer.start()
    try:
        if "single" in phases:
            with profiling.phase("single", results):
                results.append(await phase_single(producer, f"BenchSingle{stamp}", max(1, n // 10), args.limit))
            print(_row(results[-1]), file=sys.stderr, flush=True)
        if "pipelined" in phases:
            with profiling.phase("pipelined", results):
                results.append(await phase_pipelined(producer, f"BenchPipe{stamp}", n, args.limit, args.window))
            print(_row(results[-1]), file=sys.stderr, flush=True)
        batch_topic = f"BenchBatch{stamp}"
        stored = 0
        if phases & {"batch", "pull", "push"}:
            # Route warm-up (auto-creates the topic) outside the timed region.
            await producer.send(Message(batch_topic, BODY, tags=TAG))
            stored = 1
            holder: list[PhaseResult] = []
            with profiling.phase("batch" if "batch" in phases else None, holder):
                batch_result, sent = await phase_batch(producer, batch_topic, n * 2, args.limit, args.batch_size,
                                                       args.batches_in_flight)
                holder.append(batch_result)
            stored += sent
            if "batch" in phases:
                results.append(batch_result)
                print(_row(results[-1]), file=sys.stderr, flush=True)
    finally:
        await producer.shutdown()
    if "pull" in phases:
        consumer = PullConsumer("BenchConsumerGroup", namesrv, pull_timeout=30.0)
        await consumer.start()
        try:
            with profiling.phase("pull", results):
                results.append(await phase_pull(consumer, batch_topic, stored, args.limit, args.max_nums,
                                                args.pulls_per_queue))
            print(_row(results[-1]), file=sys.stderr, flush=True)
        finally:
            await consumer.shutdown()
    if "push" in phases:
        with profiling.phase("push", results):
            results.append(await phase_push(namesrv, batch_topic, stored, args.limit, args.push_pull_batch,
                                            args.push_consume_batch, args.push_threads))
        print(_row(results[-1]), file=sys.stderr, flush=True)
    if "sqlpull" in phases:
        results.extend(await phase_sqlpull(namesrv, stamp, args, profiling))
    return results


# ---------------------------------------------------------------------------------------------- output
TARGETS = {"pipelined": 40_000, "batch": 150_000, "pull": 200_000, "push": 100_000}
# pull-tag / pull-sql: target >= 50% of pull-all's delivery rate (checked in the note, not here)


def _row(r: PhaseResult) -> str:
    target = TARGETS.get(r.name)
    verdict = "" if target is None else ("ok" if r.rate >= target else f"below {target:,}")
    cpu = f"{r.client_cpu:7.2f} {r.broker_cpu:7.2f}"
    return f"{r.name:<10} {r.messages:>10,} {r.seconds:>8.2f} {r.rate:>12,.0f}  {verdict:<14} {cpu}  {r.note}"


def print_table(results: list[PhaseResult]) -> None:
    print(f"{'phase':<10} {'messages':>10} {'seconds':>8} {'msgs/s':>12}  {'target':<14} "
          f"{'cli-cpu':>7} {'brk-cpu':>7}  notes")
    for r in results:
        print(_row(r))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000,
                        help="messages for the pipelined phase; batch sends 2x this, single 1/10 (default 200000)")
    parser.add_argument("--limit", type=float, default=20.0, help="wall-clock limit per phase in seconds")
    parser.add_argument("--window", type=int, default=1000, help="sends in flight in the pipelined phase")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--batches-in-flight", type=int, default=4)
    parser.add_argument("--max-nums", type=int, default=2048,
                        help="maxMsgNums per pull (the broker also caps a pull at 256 KiB of records)")
    parser.add_argument("--pulls-per-queue", type=int, default=4, help="concurrent pull ranges per queue")
    parser.add_argument("--phases", default="single,pipelined,batch,pull,push",
                        help="comma-separated subset of single,pipelined,batch,pull,push,sqlpull (pull and push "
                             "read what batch wrote; batch runs untimed when only they are selected; sqlpull is "
                             "opt-in and writes its own --messages messages)")
    parser.add_argument("--push-pull-batch", type=int, default=512,
                        help="push phase: PushConsumer pull_batch_size (maxMsgNums per pull)")
    parser.add_argument("--push-consume-batch", type=int, default=1,
                        help="push phase: consume_message_batch_max_size (messages per listener call)")
    parser.add_argument("--push-threads", type=int, default=20, help="push phase: consume_thread_max")
    parser.add_argument("--commit-log-size", type=int, default=256 * 1024 * 1024)
    parser.add_argument("--json", action="store_true", help="also print the results as one JSON object")
    parser.add_argument("--no-uvloop", action="store_true", help="client on the default asyncio loop")
    parser.add_argument("--profile-client", metavar="DIR", help="write client_<phase>.prof cProfile files to DIR")
    parser.add_argument("--profile-broker", metavar="DIR",
                        help="attach py-spy to the broker per phase; writes broker_<phase>.txt (collapsed stacks)")
    parser.add_argument("--broker-wrapper", metavar="CMD", help="prefix for the broker command, e.g. a profiler")
    parser.add_argument("--keep-store", action="store_true", help="do not delete the temporary store directory")
    args = parser.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix="rmq-bench-")
    conf_path = os.path.join(workdir, "broker.conf")
    listen_port, namesrv_port = free_port(), free_port()
    while namesrv_port == listen_port:
        namesrv_port = free_port()
    write_broker_conf(conf_path, os.path.join(workdir, "store"), listen_port, namesrv_port, args.commit_log_size)
    broker = BrokerProcess(conf_path, os.path.join(workdir, "broker.log"), args.broker_wrapper)
    failed = True
    try:
        boot = broker.start()
        print(f"{boot} (pid {broker.pid}, store {workdir})", file=sys.stderr, flush=True)
        loop_factory = None
        if not args.no_uvloop:
            try:
                import uvloop

                loop_factory = uvloop.new_event_loop
            except ImportError:
                pass
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            results = runner.run(run_phases(args, f"127.0.0.1:{namesrv_port}",
                                             Profiling(args.profile_client, args.profile_broker, broker.pid)))
        failed = any("MISMATCH" in r.note for r in results)
    finally:
        if failed:
            broker.kill()
            code = None
        else:
            code = broker.stop()
        if not args.keep_store and not failed:
            shutil.rmtree(workdir, ignore_errors=True)
        elif failed:
            print(f"kept {workdir} for inspection", file=sys.stderr)
    print_table(results)
    if args.json:
        print(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "client_loop": "asyncio" if args.no_uvloop else "uvloop",
            "broker_exit_code": code,
            "results": [r.as_dict() for r in results],
        }, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
