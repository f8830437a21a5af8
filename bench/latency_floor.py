"""Where a single send's round trip goes on this machine (issue 16): the floor under one-in-flight latency.

    python bench/latency_floor.py [--messages N] [--rounds R] [--limit SECONDS] [--json]

Four measurements, each printed as round trips per second, microseconds per round trip and the CPU that each side
spent per round trip (from /proc), so wall time can be set beside the sum of both sides' CPU:

  ping-pong   two Python processes, blocking sockets on 127.0.0.1, a 300-byte request and a 250-byte answer
              (a send's sizes), N round trips: nothing but the kernel, the scheduler and the interpreter's socket
              calls.
  event loop  the same exchange between two uvloop processes: an asyncio Protocol that answers each request, and
              one that writes a request and awaits a future its data_received resolves (the shape of this
              project's client and broker with nothing else in them): what uvloop adds to the ping-pong.
  send        this project's client (`Producer.send`, one in flight, 128-byte body and a tag, on uvloop) against
              the fixed-answer broker (bench/fixed_answer_broker.py: the real broker process whose send handlers
              answer a prebuilt SUCCESS frame) and against the real broker (ASYNC_FLUSH), N sends each.
  redis       redis-py (asyncio, hiredis) XADD one at a time against redis-server, when it is installed: the
              issue's reference point, with the same CPU split.

Each case runs in three placements: unpinned (where the scheduler puts the two sides: on a 2-vCPU VM a pair that
talks one message at a time settles either on one vCPU or on both, and stays so for a while), both sides pinned to
one CPU, and one CPU each (the server's event-loop thread and this process's thread are pinned for the measurement).
Rounds run the cases one after the other so that a slow moment of the machine hits all of them; medians are
printed. Every loop is bounded by a count and --limit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from tests.support.broker_process import prepare_broker  # noqa: E402

from client import Producer  # noqa: E402

from peer_servers import RedisServer  # noqa: E402
from peer_workloads import redis_single  # noqa: E402
from phases import phase_single  # noqa: E402
from placement import ALL_CPUS, Pinned  # noqa: E402
from profiling import process_cpu_seconds  # noqa: E402

REQUEST = b"q" * 300
ANSWER = b"a" * 250
SOCKET_TIMEOUT_S = 10.0
FIXED_ANSWER_ENTRY = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixed_answer_broker.py")]


class Sample:
    """One case in one round: round trips, wall seconds, CPU seconds of the requesting and the answering side."""

    def __init__(self, count: int, seconds: float, client_cpu: float, server_cpu: float) -> None:
        self.count = count
        self.seconds = seconds
        self.client_cpu = client_cpu
        self.server_cpu = server_cpu

    def per_trip_us(self, value: float) -> float:
        return value / self.count * 1e6 if self.count else 0.0


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _recv_exactly(sock: socket.socket, size: int) -> None:
    got = 0
    while got < size:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("peer closed")
        got += len(chunk)


def ping_pong(count: int, limit_s: float, server_cpus: set[int] | None, client_cpus: set[int] | None) -> Sample:
    """Blocking request/answer between this process (answering) and a forked child (asking)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the asking side
        code = 0
        try:
            if client_cpus:
                os.sched_setaffinity(0, client_cpus)
            sock = socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            cpu0, start = _own_cpu(), time.perf_counter()
            deadline = start + limit_s
            done = 0
            while done < count:
                sock.sendall(REQUEST)
                _recv_exactly(sock, len(ANSWER))
                done += 1
                if not done & 255 and time.perf_counter() > deadline:
                    break
            seconds, cpu = time.perf_counter() - start, _own_cpu() - cpu0
            sock.close()
            os.write(report_w, json.dumps([done, seconds, cpu]).encode())
        except BaseException:  # noqa: BLE001 - the child must never return into the caller's code
            code = 1
        finally:
            os._exit(code)
    os.close(report_w)
    try:
        if server_cpus:
            os.sched_setaffinity(0, server_cpus)
        listener.settimeout(SOCKET_TIMEOUT_S)
        conn, _ = listener.accept()
        conn.settimeout(SOCKET_TIMEOUT_S)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cpu0 = _own_cpu()
        served = 0
        while served < count:
            try:
                _recv_exactly(conn, len(REQUEST))
            except ConnectionError:
                break  # the asking side stopped at its deadline
            conn.sendall(ANSWER)
            served += 1
        server_cpu = _own_cpu() - cpu0
        conn.close()
    finally:
        listener.close()
        _, status = os.waitpid(pid, 0)
        os.sched_setaffinity(0, ALL_CPUS)
    report = os.read(report_r, 4096)
    os.close(report_r)
    if status != 0 or not report:
        raise RuntimeError("the ping-pong child failed")
    done, seconds, client_cpu = json.loads(report)
    return Sample(done, seconds, client_cpu, server_cpu)


class _Answering(asyncio.Protocol):
    """The event-loop ping-pong's server side: one ANSWER per REQUEST-sized chunk received."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.pending = 0

    def data_received(self, data: bytes) -> None:
        self.pending += len(data)
        while self.pending >= len(REQUEST):
            self.pending -= len(REQUEST)
            self.transport.write(ANSWER)


class _Asking(asyncio.Protocol):
    """The event-loop ping-pong's client side: resolves `waiter` once a whole ANSWER has arrived."""

    def __init__(self) -> None:
        self.waiter: asyncio.Future | None = None
        self.received = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self.received >= len(ANSWER) and self.waiter is not None and not self.waiter.done():
            self.received -= len(ANSWER)
            self.waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("the answering side closed"))


def serve_answers(limit_s: float) -> None:
    """The answering side of the event-loop ping-pong (run as `latency_floor.py --serve-answers`): uvloop, one
    connection on a free loopback port written to stdout; returns when that connection closes or after limit_s."""
    import uvloop

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        closed = loop.create_future()

        class Answering(_Answering):
            def connection_lost(self, exc: Exception | None) -> None:
                if not closed.done():
                    closed.set_result(None)

        server = await loop.create_server(Answering, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        try:
            await asyncio.wait_for(closed, limit_s)
        except asyncio.TimeoutError:
            pass
        finally:
            server.close()

    uvloop.run(serve())


async def event_loop_ping_pong(count: int, limit_s: float, server_cpus: set[int] | None,
                               client_cpus: set[int] | None) -> Sample:
    """REQUEST/ANSWER between this process's event loop and a uvloop server process: one in flight."""
    server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve-answers", "--limit",
                               str(limit_s + 2 * SOCKET_TIMEOUT_S)], stdout=subprocess.PIPE, text=True)
    loop = asyncio.get_running_loop()
    try:
        line = await asyncio.wait_for(loop.run_in_executor(None, server.stdout.readline), SOCKET_TIMEOUT_S)
        if not line.strip().isdigit():
            raise RuntimeError(f"the event-loop ping-pong's answering side did not start (it wrote {line!r})")
        port = int(line)
        transport, protocol = await asyncio.wait_for(
            loop.create_connection(_Asking, "127.0.0.1", port), SOCKET_TIMEOUT_S)
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        async def exchange(n: int, deadline: float) -> int:
            done = 0
            while done < n:
                protocol.waiter = loop.create_future()
                transport.write(REQUEST)
                await asyncio.wait_for(protocol.waiter, SOCKET_TIMEOUT_S)
                done += 1
                if not done & 255 and time.perf_counter() > deadline:
                    break
            return done

        await exchange(min(1000, count), time.perf_counter() + limit_s)  # warm-up
        with Pinned(server.pid, server_cpus, client_cpus):
            cpu0, server0, start = _own_cpu(), process_cpu_seconds(server.pid), time.perf_counter()
            done = await exchange(count, start + limit_s)
            seconds, cpu = time.perf_counter() - start, _own_cpu() - cpu0
            server_cpu = process_cpu_seconds(server.pid) - server0
        transport.close()
        await loop.run_in_executor(None, server.wait, SOCKET_TIMEOUT_S)  # it stops when the connection closes
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stdout.close()
    return Sample(done, seconds, cpu, server_cpu)


def placements() -> dict[str, tuple[set[int] | None, set[int] | None]]:
    """(server CPUs, client CPUs) per placement: as the scheduler likes, both on one CPU, one CPU each."""
    cpus = sorted(ALL_CPUS)
    cases: dict[str, tuple[set[int] | None, set[int] | None]] = {"unpinned": (None, None),
                                                                 "one CPU": ({cpus[0]}, {cpus[0]})}
    if len(cpus) >= 2:
        cases["two CPUs"] = ({cpus[0]}, {cpus[1]})
    return cases


async def broker_send(namesrv: str, broker_pid: int, topic: str, count: int, limit_s: float) -> Sample:
    async with Producer("LatencyFloorProducer", namesrv, send_timeout=30.0) as producer:
        cpu0, broker0 = _own_cpu(), process_cpu_seconds(broker_pid)
        result = await phase_single(producer, topic, count, limit_s)
        client_cpu, broker_cpu = _own_cpu() - cpu0, process_cpu_seconds(broker_pid) - broker0
    # The warm-up send inside phase_single is counted in the CPU but not in the trips: one in thousands.
    return Sample(result.messages, result.seconds, client_cpu, broker_cpu)


async def redis_send(port: int, server_pid: int, stream: str, count: int, limit_s: float) -> Sample:
    cpu0, server0 = _own_cpu(), process_cpu_seconds(server_pid)
    result = await redis_single(port, count, limit_s, stream)
    if "MISMATCH" in result.note:
        raise RuntimeError(f"redis: {result.note}")
    return Sample(result.messages, result.seconds, _own_cpu() - cpu0, process_cpu_seconds(server_pid) - server0)


def summarize(name: str, samples: list[Sample]) -> dict:
    rate = statistics.median(s.count / s.seconds for s in samples if s.seconds > 0)
    client = statistics.median(s.per_trip_us(s.client_cpu) for s in samples)
    server = statistics.median(s.per_trip_us(s.server_cpu) for s in samples)
    return {"case": name, "round_trips_per_s": round(rate), "us_per_round_trip": round(1e6 / rate, 1),
            "client_cpu_us": round(client, 1), "server_cpu_us": round(server, 1),
            "cpu_sum_us": round(client + server, 1), "rounds": len(samples)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20000, help="round trips per case and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=float, default=20.0, help="wall-clock limit per case and round (seconds)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve-answers", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_answers:
        serve_answers(args.limit)
        return 0

    samples: dict[str, list[Sample]] = {}
    workdir = tempfile.mkdtemp(prefix="rmq-latency-floor-")
    brokers = {}
    redis = None
    try:
        for name, entry in (("send, fixed-answer broker", FIXED_ANSWER_ENTRY), ("send, broker", None)):
            broker_dir = os.path.join(workdir, f"broker{len(brokers)}")
            os.makedirs(broker_dir)
            broker, namesrv_port = prepare_broker(broker_dir, 256 * 1024 * 1024, None, entry)
            broker.start()
            brokers[name] = (broker, f"127.0.0.1:{namesrv_port}")
        if RedisServer.installed():
            redis = RedisServer(workdir).start()
        else:
            print("redis-server not installed: the redis case is skipped", file=sys.stderr)
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:  # pragma: no cover - uvloop is a dependency of the broker
            loop_factory = None
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            for round_no in range(args.rounds):
                for placement, (server_cpus, client_cpus) in placements().items():
                    samples.setdefault(f"ping-pong, {placement}", []).append(
                        ping_pong(args.messages, args.limit, server_cpus, client_cpus))
                    samples.setdefault(f"event loop, {placement}", []).append(runner.run(
                        event_loop_ping_pong(args.messages, args.limit, server_cpus, client_cpus)))
                    for name, (broker, namesrv) in brokers.items():
                        with Pinned(broker.pid, server_cpus, client_cpus):
                            samples.setdefault(f"{name}, {placement}", []).append(runner.run(broker_send(
                                namesrv, broker.pid, f"LatencyFloor{round_no}", args.messages, args.limit)))
                    if redis is not None:
                        with Pinned(redis.proc.pid, server_cpus, client_cpus):
                            samples.setdefault(f"redis XADD, {placement}", []).append(
                                runner.run(redis_send(redis.port, redis.proc.pid,
                                                      f"latency-floor-{round_no}-{placement}",
                                                      args.messages, args.limit)))
                print(f"round {round_no + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    finally:
        for broker, _ in brokers.values():
            broker.stop()
        if redis is not None:
            redis.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    rows = [summarize(name, found) for name, found in samples.items()]
    print(f"\n{'case':<38} {'trips/s':>9} {'us/trip':>8} {'client CPU':>11} {'server CPU':>11} {'CPU sum':>8}  (us)")
    for r in rows:
        print(f"{r['case']:<38} {r['round_trips_per_s']:>9,} {r['us_per_round_trip']:>8} {r['client_cpu_us']:>11} "
              f"{r['server_cpu_us']:>11} {r['cpu_sum_us']:>8}")
    if args.json:
        print(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "cpus": sorted(ALL_CPUS),
                          "messages": args.messages, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
