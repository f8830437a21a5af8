"""Broker memory under hostile connections (issue 11, "memory is bounded whatever clients do").

    python bench/reliability_connections.py [--peers 30] [--partial-mib 4] [--budget-mib 32] [--pulls 20000]

Starts the real broker (temporary store, free ports) and measures its resident memory (VmRSS) in two
scenarios, each bounded in time (about 10 s) and by a memory cap that stops the scenario early:

  partial    --peers connections each announce a ~16 MiB frame and send --partial-mib MiB of it, never
             finishing; the broker runs with serverMaxBufferedFrameBytes = --budget-mib
             (serverFrameStallTimeoutSeconds=2). Printed: RSS growth, MiB the peers handed to their sockets
             (what the broker did not read stays in kernel buffers), connections the broker closed, slowest
             answer of a side client sending GET_MAX_OFFSET.
  noread     one connection pipelines pulls of ~256 KiB each (20 stored 16 KiB messages) and never reads
             the responses; it stops when its socket stays full for 2 s (the broker stopped reading) or
             after --pulls. Printed: RSS growth, pulls sent, whether the broker stopped reading.

"Before" figures come from running this script from a checkout of the code before the change (unknown
broker.conf keys only produce a warning there), e.g.
    git archive 09e9209 | tar -x -C /tmp/before && cp bench/reliability_connections.py /tmp/before/bench/
    python /tmp/before/bench/reliability_connections.py

Measured on the 2-vCPU bench VM (Python 3.11, uvloop), defaults, 2026-11-23:

  scenario  before (09e9209)                                   after
  partial   RSS +120.4 MiB, 0 closed, side client max 480 ms   RSS +12.1 MiB, 6 stalled holders closed, max 8 ms
  noread    RSS +228.9 MiB (cap hit) after 16,641 pulls,       RSS +2.3 MiB; 12,490 pulls sit in kernel buffers
            still reading                                      and the broker stopped reading
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # tests.support: the fault suite's probes, the same peers as the tests

from tests.support.broker_process import prepare_broker  # noqa: E402
from protocol.codes import RequestCode  # noqa: E402
from protocol.command import RemotingCommand, encode_command  # noqa: E402
from protocol.frame import FrameDecoder  # noqa: E402
from tests.support.probes import LatencyProbe, peer_closed, raw_connect, rss_bytes, send_some  # noqa: E402

MIB = 1024 * 1024
SCENARIO_S = 10.0
RSS_CAP = 200 * MIB


async def scenario_partial(port: int, pid: int, peers: int, partial: int) -> dict:
    async with LatencyProbe(f"127.0.0.1:{port}") as side:
        await asyncio.sleep(0.3)
        baseline = peak = rss_bytes(pid)
        socks = [raw_connect(port) for _ in range(peers)]
        payload = memoryview(struct.pack(">i", 16 * MIB - 64) + b"\0" * partial)
        sent = [0] * peers
        closed: set[int] = set()
        deadline = time.monotonic() + SCENARIO_S
        while time.monotonic() < deadline and peak - baseline < RSS_CAP:
            for i, sock in enumerate(socks):
                if i not in closed and sent[i] < len(payload):
                    n = send_some(sock, payload[sent[i]:])
                    if n < 0:
                        closed.add(i)
                    else:
                        sent[i] += n
            closed.update(i for i, s in enumerate(socks) if i not in closed and peer_closed(s))
            peak = max(peak, rss_bytes(pid))
            await asyncio.sleep(0.05)
        for sock in socks:
            sock.close()
    return {"growth": peak - baseline, "sent": sum(sent), "closed": len(closed), "probe": side.max_latency,
            "probe_failures": side.failures}


async def scenario_noread(port: int, pid: int, max_pulls: int) -> dict:
    topic, group = "BenchNoRead", "BenchNoReadGroup"
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    decoder = FrameDecoder()
    for i in range(20):
        fields = {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
                  "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
        writer.write(encode_command(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, bytes([i]) * 16384,
                                                            opaque=i + 1)))
        got: list = []
        while not got:
            got = decoder.feed(await asyncio.wait_for(reader.read(65536), 10))
    writer.close()
    pull_fields = {"consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
                   "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                   "subVersion": "0", "expressionType": "TAG"}
    pull = encode_command(RemotingCommand.request(RequestCode.PULL_MESSAGE, pull_fields, opaque=1))
    async with LatencyProbe(f"127.0.0.1:{port}") as side:
        await asyncio.sleep(0.3)
        baseline = peak = rss_bytes(pid)
        sock = raw_connect(port, rcvbuf=16384)
        pending = memoryview(pull * 50)
        sent_bytes, blocked_since = 0, None
        deadline = time.monotonic() + SCENARIO_S * 2
        while time.monotonic() < deadline and sent_bytes // len(pull) < max_pulls and peak - baseline < RSS_CAP:
            peak = max(peak, rss_bytes(pid))
            n = send_some(sock, pending)
            if n < 0:
                break
            sent_bytes += n
            pending = pending[n:] if n < len(pending) else memoryview(pull * 50)
            if n == 0:
                blocked_since = blocked_since or time.monotonic()
                if time.monotonic() - blocked_since > 2:
                    break
                await asyncio.sleep(0.05)
            else:
                blocked_since = None
                await asyncio.sleep(0)
        stopped = blocked_since is not None and time.monotonic() - blocked_since > 2
        sock.close()
    return {"growth": peak - baseline, "pulls": sent_bytes // len(pull), "stopped": stopped,
            "probe": side.max_latency, "probe_failures": side.failures}


async def run(args: argparse.Namespace, port: int, pid: int) -> None:
    part = await scenario_partial(port, pid, args.peers, args.partial_mib * MIB)
    print(f"partial  {args.peers} peers x {args.partial_mib} MiB of a 16 MiB frame, budget {args.budget_mib} MiB: "
          f"RSS +{part['growth'] / MIB:.1f} MiB, peers sent {part['sent'] / MIB:.0f} MiB, "
          f"{part['closed']} closed by the broker, side client max {part['probe'] * 1000:.0f} ms "
          f"({part['probe_failures']} failures)", flush=True)
    noread = await scenario_noread(port, pid, args.pulls)
    print(f"noread   RSS +{noread['growth'] / MIB:.1f} MiB after {noread['pulls']} unread pulls of ~256 KiB; "
          f"broker stopped reading: {'yes' if noread['stopped'] else 'no'}; side client max "
          f"{noread['probe'] * 1000:.0f} ms ({noread['probe_failures']} failures)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", type=int, default=30)
    parser.add_argument("--partial-mib", type=int, default=4)
    parser.add_argument("--budget-mib", type=int, default=32, help="serverMaxBufferedFrameBytes in MiB")
    parser.add_argument("--pulls", type=int, default=20_000, help="most pulls the non-reading peer sends")
    args = parser.parse_args()
    try:
        import uvloop
        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    with tempfile.TemporaryDirectory(prefix="rmq-conn-bench-") as workdir:
        broker, _ = prepare_broker(workdir, 64 * MIB, None)
        with open(broker.conf_path, "a", encoding="utf-8") as conf:
            conf.write(f"serverMaxBufferedFrameBytes={args.budget_mib * MIB}\nserverFrameStallTimeoutSeconds=2\n")
        port = int(next(line.split("=", 1)[1] for line in open(broker.conf_path) if line.startswith("listenPort=")))
        print(broker.start().boot_line, flush=True)
        try:
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                runner.run(run(args, port, broker.pid))
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
