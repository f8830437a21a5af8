"""Master/slave replication: send throughput of an ASYNC_MASTER and a SYNC_MASTER with one slave, and the
replication lag while batches are sent.

    PYTHONPATH=. python bench/replication.py [--count 10000] [--window 64] [--batch 32] [--limit 15]

Per role: a master (embedded name server) and a SLAVE of the same brokerName, both subprocesses (uvloop) on
loopback, separate stores. Phase "pipelined": `window` Producer.send in flight. Phase "batch": send_batch of
`batch` messages, 4 in flight, while the master's runtime info (haReplicationLagBytes) is sampled every 50 ms; the
lag figures are the sampled maximum and mean, and the time the slave needed to catch up after the last batch.

Measured (defaults, shared 2-core box: four processes on two cores), 2026-11-24: see bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [BENCH_DIR, os.path.dirname(BENCH_DIR)]

from tests.support.broker_process import BrokerProcess, free_port, write_broker_conf  # noqa: E402
from client import Producer  # noqa: E402
from client.admin import AdminClient  # noqa: E402
from phases import phase_batch, phase_pipelined  # noqa: E402

FILE_SIZE = 64 * 1024 * 1024


def free_listen_port() -> int:
    while True:
        port = free_port()
        if port > 1024 and port + 1 < 65535:
            return port


def start_pair(workdir: str, role: str) -> tuple[BrokerProcess, BrokerProcess, int, str]:
    ns_port, master_port, slave_port = free_port(), free_listen_port(), free_listen_port()
    master_conf = os.path.join(workdir, f"{role}-master.conf")
    write_broker_conf(master_conf, os.path.join(workdir, f"{role}-master-store"), master_port, ns_port, FILE_SIZE)
    with open(master_conf, "a", encoding="utf-8") as f:
        f.write(f"brokerRole={role}\nhaListenPort={free_port()}\n")
    slave_conf = os.path.join(workdir, f"{role}-slave.conf")
    write_broker_conf(slave_conf, os.path.join(workdir, f"{role}-slave-store"), slave_port, ns_port, FILE_SIZE)
    with open(slave_conf, "a", encoding="utf-8") as f:
        f.write(f"brokerRole=SLAVE\nbrokerId=1\nenableEmbeddedNamesrv=false\nnamesrvAddr=127.0.0.1:{ns_port}\n"
                f"haListenPort={free_port()}\n")
    master = BrokerProcess.from_conf(master_conf, os.path.join(workdir, f"{role}-master.log"))
    slave = BrokerProcess.from_conf(slave_conf, os.path.join(workdir, f"{role}-slave.log"))
    master.start()
    slave.start()
    return master, slave, ns_port, f"127.0.0.1:{master_port}"


async def lag(admin: AdminClient, master_addr: str) -> int:
    info = await admin.runtime_info(master_addr)
    return int(info.get("haReplicationLagBytes", -1))


async def measure(namesrv: str, master_addr: str, args: argparse.Namespace) -> dict[str, float]:
    async with AdminClient(namesrv) as admin:
        for _ in range(200):  # the slave attaches after its first registration answer
            info = await admin.runtime_info(master_addr)
            if int(info.get("haSlaveCount", 0)) >= 1 and int(info.get("haReplicationLagBytes", 1)) == 0:
                break
            await asyncio.sleep(0.1)
        async with Producer("bench-repl-pg", namesrv) as producer:
            pipelined = await phase_pipelined(producer, "BenchRepl", args.count, args.limit, args.window)
            samples: list[int] = []
            stop = asyncio.Event()

            async def sample() -> None:
                while not stop.is_set():
                    samples.append(await lag(admin, master_addr))
                    await asyncio.sleep(0.05)

            sampler = asyncio.create_task(sample())
            batch, _ = await phase_batch(producer, "BenchReplBatch", args.count * 4, args.limit, args.batch, 4)
            done_at = time.perf_counter()
            while await lag(admin, master_addr) > 0 and time.perf_counter() - done_at < 30:
                await asyncio.sleep(0.01)
            catch_up = time.perf_counter() - done_at
            stop.set()
            await sampler
    valid = [s for s in samples if s >= 0] or [0]
    return {"pipelined": pipelined.rate, "batch": batch.rate, "lag_max": max(valid),
            "lag_mean": sum(valid) / len(valid), "catch_up_ms": catch_up * 1000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="pipelined sends (batch phase: 4x as many)")
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--limit", type=float, default=15.0, help="seconds per phase at most")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-repl-") as workdir:
        for role in ("ASYNC_MASTER", "SYNC_MASTER"):
            master, slave, ns_port, master_addr = start_pair(workdir, role)
            try:
                results[role] = asyncio.run(measure(f"127.0.0.1:{ns_port}", master_addr, args))
            finally:
                slave.stop()
                master.stop()
    print(f"{'role':<14} {'pipelined msg/s':>16} {'batch msg/s':>12} {'lag max B':>10} {'lag mean B':>11} "
          f"{'catch-up ms':>12}")
    for role, r in results.items():
        print(f"{role:<14} {r['pipelined']:>16,.0f} {r['batch']:>12,.0f} {r['lag_max']:>10,.0f} "
              f"{r['lag_mean']:>11,.0f} {r['catch_up_ms']:>12,.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
