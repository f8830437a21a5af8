"""The broker beside its peers in one run: the same workloads against this broker, Redis Streams, NATS JetStream
and RabbitMQ, each figure printed beside ours with the ratio and the issue's target.

    python bench/peers.py [--messages N] [--peers redis,nats,rabbitmq] [--limit SECONDS] [--json]

Peers come from Debian (`apt-get install redis-server nats-server rabbitmq-server`) with their usual Python clients
(`pip install 'redis[hiredis]' nats-py aio-pika`); each is started by this script on free 127.0.0.1 ports with a
temporary data directory and stopped at the end. A peer that is not installed is skipped and said so.

Workloads (128-byte body, tag TagA; counts as bench/run.py):
  single     one send in flight, N/10 messages             ours vs Redis XADD (target >= 1.0x), NATS, RabbitMQ
  single1    the same with both sides pinned to one CPU (the server's event-loop thread and the bench): unpinned, a
             one-at-a-time pair lands on one vCPU or on two as the scheduler likes, and the figure follows
             (bench/placement.py); ours vs Redis XADD
  pipelined  1,000 sends in flight, N messages             ours vs RabbitMQ confirms (>= 8x), NATS JetStream (>= 2x)
  batch      256 per batch / pipeline, 4 in flight, 2N     ours vs Redis pipelined XADD (>= 1.5x)
  consume    everything `batch` stored, one listener call per message (RocketMQ's defaults: pull batch 32, 20
             consume threads) vs Redis XREADGROUP COUNT 32 + XACK per batch (>= 1.0x)
  consume32  the same with consume_message_batch_max_size=32 (>= 1.5x of Redis's consume)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from tests.support.broker_process import prepare_broker  # noqa: E402

from peer_servers import PEERS
from peer_workloads import (
    bounded,
    nats_send,
    rabbitmq_send,
    redis_batch,
    redis_consume,
    redis_single,
)
from phases import BODY, TAG, phase_batch, phase_pipelined, phase_single
from placement import Pinned, one_cpu
from profiling import process_cpu_seconds
from pull_phases import phase_push
from results import PhaseResult

from client import Message, Producer

# (our workload, peer, peer workload, minimum ratio ours/peer)
TARGETS = [
    ("single", "redis", "single", 1.0),
    ("single1", "redis", "single1", 1.0),
    ("consume", "redis", "consume", 1.0),
    ("consume32", "redis", "consume", 1.5),
    ("pipelined", "rabbitmq", "pipelined", 8.0),
    ("pipelined", "nats", "pipelined", 2.0),
    ("batch", "redis", "batch", 1.5),
]
PEER_BOUND_S = 300.0  # one peer's whole set of workloads


async def run_ours(namesrv: str, args, broker_pid: int) -> dict[str, PhaseResult]:
    n, stamp = args.messages, int(time.time())
    results: dict[str, PhaseResult] = {}

    async def measured(name: str, coro) -> PhaseResult:
        cpu0, broker0 = process_cpu_seconds(os.getpid()), process_cpu_seconds(broker_pid)
        result = await coro
        result.name = name
        result.client_cpu = process_cpu_seconds(os.getpid()) - cpu0
        result.broker_cpu = process_cpu_seconds(broker_pid) - broker0
        results[name] = result
        print(f"  ours {name:<10} {result.rate:>10,.0f} msgs/s  {result.note}", file=sys.stderr, flush=True)
        return result

    async with Producer("BenchPeersProducer", namesrv, send_timeout=30.0) as producer:
        await measured("single", phase_single(producer, f"PeerSingle{stamp}", max(1, n // 10), args.limit))
        with Pinned(broker_pid, one_cpu(), one_cpu()):
            await measured("single1", phase_single(producer, f"PeerSingle{stamp}", max(1, n // 10), args.limit))
        await measured("pipelined", phase_pipelined(producer, f"PeerPipe{stamp}", n, args.limit, 1000))
        topic = f"PeerBatch{stamp}"
        await producer.send(Message(topic, BODY, tags=TAG))

        async def batch_phase() -> PhaseResult:
            result, _stored = await phase_batch(producer, topic, 2 * n, args.limit, 256, 4)
            return result

        stored = 1 + (await measured("batch", batch_phase())).messages
    await measured("consume", phase_push(namesrv, topic, stored, args.limit, 32, 1, 20))
    await measured("consume32", phase_push(namesrv, topic, stored, args.limit, 32, 32, 20))
    return results


async def run_peer(name: str, port: int, pid: int, args) -> dict[str, PhaseResult]:
    n = args.messages
    single_n = max(1, n // 10)
    if name == "redis":
        batch = await redis_batch(port, "bench-batch", 2 * n, args.limit, 256, 4)
        single = await redis_single(port, single_n, args.limit, "bench-single")
        with Pinned(pid, one_cpu(), one_cpu()):
            single1 = await redis_single(port, single_n, args.limit, "bench-single1")
        return {
            "single": single,
            "single1": single1,
            "batch": batch,
            "consume": await redis_consume(port, "bench-batch", batch.messages, args.limit, 32),
        }
    if name == "nats":
        return {"single": await nats_send(port, "single", single_n, args.limit, 1),
                "pipelined": await nats_send(port, "pipelined", n, args.limit, 1000)}
    return {"single": await rabbitmq_send(port, "single", single_n, args.limit, 1),
            "pipelined": await rabbitmq_send(port, "pipelined", n, args.limit, 1000)}


def print_comparison(ours: dict[str, PhaseResult], peers: dict[str, dict[str, PhaseResult]]) -> list[dict]:
    names = list(peers)
    print(f"\n{'workload':<10} {'ours':>10}" + "".join(f" {p:>10}" for p in names) + "   (msgs/s)")
    for workload in ("single", "single1", "pipelined", "batch", "consume", "consume32"):
        row = f"{workload:<10} {ours[workload].rate:>10,.0f}" if workload in ours else f"{workload:<10} {'-':>10}"
        key = "consume" if workload == "consume32" else workload
        for p in names:
            r = peers[p].get(key)
            row += f" {r.rate:>10,.0f}" if r else f" {'-':>10}"
        print(row)
    print(f"\n{'ours':<10} {'peer':<20} {'ratio':>7} {'target':>7}")
    verdicts = []
    for workload, peer, peer_workload, minimum in TARGETS:
        if workload not in ours or peer_workload not in peers.get(peer, {}):
            continue
        peer_rate = peers[peer][peer_workload].rate
        ratio = ours[workload].rate / peer_rate if peer_rate else float("inf")
        verdict = "ok" if ratio >= minimum else "BELOW"
        print(f"{workload:<10} {peer + ' ' + peer_workload:<20} {ratio:>6.2f}x {minimum:>6.1f}x  {verdict}")
        verdicts.append({"ours": workload, "peer": peer, "peer_workload": peer_workload, "ratio": round(ratio, 2),
                         "target": minimum, "met": ratio >= minimum})
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000, help="N (default 100000)")
    parser.add_argument("--limit", type=float, default=20.0, help="wall-clock limit per workload in seconds")
    parser.add_argument("--peers", default="redis,nats,rabbitmq")
    parser.add_argument("--json", action="store_true", help="also print everything as one JSON object")
    args = parser.parse_args(argv)

    import uvloop

    workdir = tempfile.mkdtemp(prefix="rmq-peers-")
    broker, namesrv_port = prepare_broker(workdir, 256 * 1024 * 1024, None)
    peers: dict[str, dict[str, PhaseResult]] = {}
    skipped: dict[str, str] = {}
    try:
        print(broker.start().boot_line, file=sys.stderr, flush=True)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            ours = runner.run(run_ours(f"127.0.0.1:{namesrv_port}", args, broker.pid))
        broker.stop()
        for name in [p for p in args.peers.split(",") if p and p != "none"]:  # "none": only our own figures
            server_class = PEERS.get(name)
            if server_class is None:
                skipped[name] = f"unknown peer (known: {', '.join(PEERS)}, or none)"
                print(f"  {name}: skipped ({skipped[name]})", file=sys.stderr)
                continue
            if not server_class.installed():
                skipped[name] = f"{server_class.binary} not installed"
                print(f"  {name}: skipped ({skipped[name]})", file=sys.stderr)
                continue
            server = server_class(workdir)
            try:
                server.start()
                with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                    peers[name] = runner.run(bounded(run_peer(name, server.port, server.proc.pid, args),
                                                     PEER_BOUND_S))
                for workload, r in peers[name].items():
                    print(f"  {name} {workload:<10} {r.rate:>10,.0f} msgs/s  {r.note}", file=sys.stderr, flush=True)
            finally:
                server.stop()
    finally:
        broker.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    verdicts = print_comparison(ours, peers)
    for name, why in skipped.items():
        print(f"{name}: skipped ({why})")
    mismatches = [r for rs in [ours, *peers.values()] for r in rs.values() if "MISMATCH" in r.note]
    if args.json:
        print(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "ours": {k: r.as_dict() for k, r in ours.items()},
            "peers": {p: {k: r.as_dict() for k, r in rs.items()} for p, rs in peers.items()},
            "ratios": verdicts, "skipped": skipped,
        }, indent=2))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
