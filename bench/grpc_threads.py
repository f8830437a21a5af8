"""Per-thread CPU per gRPC call, the floor beside the broker (issue 30): where the broker's extra cost per call is.

    PYTHONPATH=. python bench/grpc_threads.py [--workload send1|send16|receive] [--seconds 4] [--fixed METHODS]

Starts the real broker (gRPC endpoint, as bench/grpc_core.py does) and the floor (grpc_core's bare grpc.aio server
with fixed replies), drives the workload against each with grpc_core's client, and prints each side's rate and,
for its busiest threads (the event loop, grpc's poller thread, grpc's event-engine threads), user and system CPU
per call, minor page faults and voluntary/involuntary context switches per call, from /proc/<pid>/task. A receive
"call" is one ReceiveMessage of 32 or one AckMessage (two per round).

--fixed send,receive,ack runs the broker through bench/fixed_grpc_broker.py, those handlers answering the floor's
prebuilt replies: the broker's environment without its handlers' work.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

import uvloop  # noqa: E402

import grpc_core  # noqa: E402
from tests.support.broker_process import free_port, prepare_broker  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def thread_counters(pid: int) -> dict[tuple[str, str], tuple[float, float, int, int, int]]:
    """(tid, name) -> (user s, system s, minor faults, voluntary, involuntary context switches) of each thread."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text().rpartition(")")[2].split()
            status = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines() if ":\t" in line)
            out[(task.name, (task / "comm").read_text().strip())] = (
                int(stat[11]) / _TICK, int(stat[12]) / _TICK, int(stat[7]),
                int(status["voluntary_ctxt_switches"]), int(status["nonvoluntary_ctxt_switches"]))
        except (OSError, KeyError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return out


def measure(label: str, port: int, pid: int, workload: str, seconds: float, top: int = 4) -> None:
    uvloop.run(grpc_core.measure(port, pid, workload, 1.0))  # warm-up
    before = thread_counters(pid)
    result = uvloop.run(grpc_core.measure(port, pid, workload, seconds))
    after = thread_counters(pid)
    calls = max(1, result["count"] // 16 if workload == "receive" else result["count"])
    unit = "msgs/s" if workload == "receive" else "calls/s"
    print(f"{label}: {result['rate']:,.0f} {unit}, {result['cpu_us_per_call']:.0f} µs CPU per call")
    zero = (0.0, 0.0, 0, 0, 0)
    used = {k: [a - b for a, b in zip(v, before.get(k, zero))] for k, v in after.items()}
    for (tid, name), d in sorted(used.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:top]:
        print(f"  {name:<16} user {d[0] / calls * 1e6:6.1f}  sys {d[1] / calls * 1e6:6.1f} µs per call;  "
              f"minor faults {d[2] / calls:.2f}  voluntary cs {d[3] / calls:.2f}  involuntary cs {d[4] / calls:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="send16", choices=("send1", "send16", "receive"))
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--fixed", metavar="METHODS", help="send,receive,ack: the broker with these fixed")
    args = parser.parse_args()
    work = BENCH / f".grpc-threads-{os.getpid()}"
    work.mkdir()
    floor = None
    try:
        grpc_port, floor_port = free_port(), free_port()
        entry = [str(BENCH / "fixed_grpc_broker.py")] if args.fixed else None
        if args.fixed:
            os.environ["FIXED"] = args.fixed
        broker, namesrv_port = prepare_broker(str(work), 256 << 20, None, entry=entry,
                                              extra={"enableGrpcProxy": "true", "grpcServerPort": grpc_port})
        broker.start()
        try:
            floor = grpc_core.start_floor(floor_port)
            namesrv = f"127.0.0.1:{namesrv_port}"
            grpc_core.create_topic(namesrv, broker.addr)
            if args.workload == "receive":
                grpc_core.top_up(namesrv, int((args.seconds + 1) * 25_000))
            measure("floor", floor_port, floor.pid, args.workload, args.seconds)
            measure("broker" + (f" (fixed: {args.fixed})" if args.fixed else ""), grpc_port, broker.pid,
                    args.workload, args.seconds)
        finally:
            if floor is not None:
                floor.kill()
                floor.wait()
            broker.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
