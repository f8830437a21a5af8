"""Helpers for the recovery fault tests: fill a real broker over the wire, pull everything back, damage files,
run a broker that must refuse to start."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.support.broker_process import PROJECT_ROOT, BrokerProcess
from tests.support.wire import WireClient, props, pull_records, send_v2_fields
from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.ids import decode_offset_msg_id
from protocol.message import BatchEntry, encode_batch_body

BODY_HEAD = 88  # body offset inside a record with IPv4 hosts


def body_of(topic: str, queue_id: int, i: int, size: int) -> bytes:
    head = b"%s/%d/%d/" % (topic.encode(), queue_id, i)
    return head + b"x" * max(0, size - len(head))


async def fill(addr: str, topic: str, queue_id: int, count: int, size: int = 200, batch: int = 50,
               start: int = 0) -> list[tuple[int, int]]:
    """Send ``count`` messages in batches; returns [(queue offset, commit-log offset)] in order."""
    placed = []
    async with await WireClient.connect(addr) as client:
        for first in range(start, start + count, batch):
            n = min(batch, start + count - first)
            entries = [BatchEntry(0, body_of(topic, queue_id, first + k, size), props(TAGS="t"))
                       for k in range(n)]
            fields = send_v2_fields(topic, queue_id)
            fields["m"] = "true"
            resp = await client.request(RC.SEND_BATCH_MESSAGE, fields, encode_batch_body(entries))
            assert resp.code == R.SUCCESS, resp.remark
            base = int(resp.ext_fields["queueOffset"])
            for k, msg_id in enumerate(resp.ext_fields["msgId"].split(",")):
                placed.append((base + k, decode_offset_msg_id(msg_id)[2]))
    return placed


async def pull_all(addr: str, topic: str, queue_id: int, group: str = "recovery-check") -> dict[int, bytes]:
    """Every message of a queue as {queue offset: body}; offsets reported missing are stepped over."""
    async with await WireClient.connect(addr) as client:
        return {rec.queue_offset: rec.body for rec in await pull_records(client, topic, queue_id, group)}


def expected(topic: str, queue_id: int, count: int, size: int = 200, skip=()) -> dict[int, bytes]:
    return {i: body_of(topic, queue_id, i, size) for i in range(count) if i not in skip}


def commit_log_file(broker: BrokerProcess, phys: int, file_size: int) -> tuple[str, int]:
    """(path, position) of a commit-log offset."""
    start = phys - phys % file_size
    return os.path.join(broker.store_dir, "commitlog", "%020d" % start), phys - start


def flip_byte(path: str, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        value = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([value ^ 0x5A]))


def run_refused(broker: BrokerProcess, timeout: float = 30.0) -> tuple[int, str]:
    """Run the broker of ``broker``'s conf to completion (it must refuse to start): (exit code, output)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "broker", "-c", str(broker.conf_path), "-l", "WARNING"],
                          cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert time.monotonic() - started < timeout
    return proc.returncode, proc.stdout + proc.stderr
