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

from client import Message, Producer, PullConsumer  # noqa: E402

from phases import BODY, TAG, phase_batch, phase_pipelined, phase_single  # noqa: E402
from profiling import Profiling  # noqa: E402
from pull_phases import phase_pull, phase_push, phase_sqlpull  # noqa: E402
from results import PhaseResult, print_table, row  # noqa: E402


async def run_phases(args, namesrv: str, profiling: Profiling) -> list[PhaseResult]:
    results: list[PhaseResult] = []
    phases = set(args.phases.split(","))
    n = args.messages
    stamp = int(time.time())
    producer = Producer("BenchProducerGroup", namesrv, send_timeout=30.0)
    await producer.start()
    try:
        if "single" in phases:
            await profiling.run("single", results, phase_single(producer, f"BenchSingle{stamp}", max(1, n // 10),
                                                                args.limit))
        if "pipelined" in phases:
            await profiling.run("pipelined", results, phase_pipelined(producer, f"BenchPipe{stamp}", n, args.limit,
                                                                      args.window))
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
                print(row(results[-1]), file=sys.stderr, flush=True)
    finally:
        await producer.shutdown()
    if "pull" in phases:
        consumer = PullConsumer("BenchConsumerGroup", namesrv, pull_timeout=30.0)
        await consumer.start()
        try:
            await profiling.run("pull", results, phase_pull(consumer, batch_topic, stored, args.limit, args.max_nums,
                                                            args.pulls_per_queue))
        finally:
            await consumer.shutdown()
    if "push" in phases:
        await profiling.run("push", results, phase_push(namesrv, batch_topic, stored, args.limit,
                                                        args.push_pull_batch, args.push_consume_batch,
                                                        args.push_threads))
    if "sqlpull" in phases:
        results.extend(await phase_sqlpull(namesrv, stamp, args, profiling))
    return results


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
    broker, namesrv_port = prepare_broker(workdir, args.commit_log_size, args.broker_wrapper)
    failed = True
    try:
        boot = broker.start().boot_line
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
