"""A bystander's send latencies while another client floods the broker (issue 27's flood findings).

The flooder runs in a process of its own (`python -m tests.support.flood MODE ADDR SECONDS`), as an attacker would:
in the test's own event loop, building thousands of 65 KB frames would stall the bystander's client and be measured
as broker latency. It prints one JSON line: the count of each response code and one remark per code.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R
from protocol.command import RemotingCommand, encode_command
from protocol.frame import FrameDecoder

from tests.support.wire import WireClient, send_v2_fields

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# ~4,100 properties in ~24 KB (the finding's shape; under the record's 32767-byte limit)
HEAVY_PROPERTIES = "".join(f"{i:x}\x01v\x02" for i in range(4100))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else float("nan")


async def bystander_sends(addr: str, topic: str, seconds: float) -> list[float]:
    """Sequential single sends to an existing topic for `seconds`; each send's latency in ms (all must succeed)."""
    latencies: list[float] = []
    end = time.monotonic() + seconds
    async with await WireClient.connect(addr) as client:
        while time.monotonic() < end:
            started = time.perf_counter()
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, -1, group="bystanderPG"),
                                        b"b" * 128, timeout=30)
            latencies.append((time.perf_counter() - started) * 1000)
            assert resp.code == R.SUCCESS, (resp.code, resp.remark)
    return latencies


async def with_flooder(addr: str, mode: str, bystander_topic: str, seconds: float,
                       local_host: str = "127.0.0.1") -> tuple[list[float], dict]:
    """Start the flooder process (mode `autocreate` or `heavy`), run the bystander beside it for `seconds`;
    (bystander latencies, the flooder's answer counts)."""
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.flood", mode, addr, str(seconds), local_host,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=str(PROJECT_ROOT))
    try:
        started = await asyncio.wait_for(proc.stdout.readline(), 20)  # "ready": connected and flooding
        assert started.strip() == b"ready", (started, await proc.stderr.read())
        latencies = await bystander_sends(addr, bystander_topic, seconds)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-2000:]
        return latencies, json.loads(out.decode().strip().splitlines()[-1])
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# ---- the flooder process ------------------------------------------------------------------------------------------
async def _flood(mode: str, addr: str, seconds: float, local_host: str) -> dict:
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(local_host, 0))
    decoder = FrameDecoder()
    codes: Counter = Counter()
    remarks: dict[int, str] = {}
    window = 8 if mode == "autocreate" else 2048
    heavy = None
    if mode == "heavy":  # one frame, written again and again: the flooder costs itself nothing per message
        heavy = encode_command(RemotingCommand.request(
            RC.SEND_MESSAGE_V2, send_v2_fields("HeavyTopic", -1, HEAVY_PROPERTIES, group="heavyPG"), b"h" * 64,
            opaque=1))
    n = 0
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(window):
            if heavy is not None:
                writer.write(heavy)
            else:
                writer.write(encode_command(RemotingCommand.request(
                    RC.SEND_MESSAGE_V2, send_v2_fields(f"Flood{n:06d}", -1, group="floodPG"), b"f" * 64, opaque=n)))
            n += 1
        await writer.drain()
        answered = 0
        while answered < window:
            data = await asyncio.wait_for(reader.read(1 << 20), 60)
            if not data:
                raise ConnectionError("the broker closed the flooder's connection")
            for resp in decoder.feed(data):
                answered += 1
                codes[resp.code] += 1
                remarks.setdefault(resp.code, resp.remark or "")
    writer.close()
    return {"codes": {str(k): v for k, v in codes.items()}, "remarks": {str(k): v for k, v in remarks.items()}}


if __name__ == "__main__":
    mode_arg, addr_arg, seconds_arg, local_arg = sys.argv[1:5]
    print(json.dumps(asyncio.run(_flood(mode_arg, addr_arg, float(seconds_arg), local_arg))), flush=True)
