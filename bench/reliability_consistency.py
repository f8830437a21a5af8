"""Issue 11 figures for "recovery serves exactly what was acknowledged" and the consume-queue disk footprint.

    python bench/reliability_consistency.py [--queues 1000] [--old 2000] [--new 10]

Runs the real broker (``python -m broker``) on free loopback ports with a temporary store and prints:

* disk: blocks really used (``du``, st_blocks) by the consume-queue files of --queues auto-created queues holding
  one message each, next to what pre-allocating every file costs (the files' apparent size; that is what the
  broker used before: each 6,000,000-byte file was posix_fallocate'd at creation);
* deleted topic: --old messages sent to a topic, the topic deleted, --new messages sent to its re-created
  incarnation, then kill -9 and restart: how many old messages a full read of the topic returns ("resurrected";
  before the fix: every old message whose queue offset is >= the new queue's end came back after the new ones);
* pull gaps: a consume queue whose units 20..24 point 3 bytes into their records: how many intact messages a full
  read returns, how many readable ones the pulls moved past without returning them, and how many responses carried
  bytes that are not records (before the fix the broker sent the misaligned bytes, so a client fails to decode).

Measured on the shared 2-core dev box (defaults, and the same script on the code before the fix, --queues 200):
  disk          after: 1,000 queues use 3.9 MiB (4 KiB each)       before: 5,860 KiB each (200 queues: 1.12 GiB)
  pull gaps     after: 55 of 55 returned, 0 skipped, 0 garbage     before: 48 of 55, 7 skipped, 1 undecodable body
  deleted topic after: 10 new read, 0 resurrected                  before: 10 new read, 1,990 of 2,000 resurrected
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.broker_process import BrokerProcess, free_port  # noqa: E402
from client.admin import AdminClient  # noqa: E402
from protocol.codes import RequestCode, ResponseCode  # noqa: E402
from protocol.message import RecordError, iter_records  # noqa: E402

CQ_FILE_SIZE = 6_000_000  # the reference default (300,000 units)
UNIT = struct.Struct(">qiq")


def write_conf(workdir: str) -> tuple[str, str]:
    port, ns_port = free_port(), free_port()
    conf = os.path.join(workdir, "broker.conf")
    settings = {
        "brokerClusterName": "BenchCluster", "brokerName": "consistency", "brokerIP1": "127.0.0.1",
        "listenHost": "127.0.0.1", "listenPort": port, "enableEmbeddedNamesrv": "true", "namesrvListenPort": ns_port,
        "storePathRootDir": os.path.join(workdir, "store"), "mappedFileSizeCommitLog": 16 << 20,
        "mappedFileSizeConsumeQueue": CQ_FILE_SIZE, "maxHashSlotNum": 50_000, "maxIndexNum": 200_000,
        "autoCreateTopicEnable": "true", "defaultTopicQueueNums": 4, "enableVipChannel": "false",
    }
    with open(conf, "w", encoding="utf-8") as f:
        f.write("".join(f"{k}={v}\n" for k, v in settings.items()))
    return conf, f"127.0.0.1:{port}"


def send_fields(topic: str, queue_id: int) -> dict[str, str]:
    return {"a": "bench-pg", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
            "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}


async def send(admin: AdminClient, addr: str, topic: str, queue_id: int, body: bytes) -> int:
    resp = admin.check(await admin.invoke(addr, RequestCode.SEND_MESSAGE_V2, send_fields(topic, queue_id), body),
                       f"send to {topic}")
    return int(resp.ext_fields["queueOffset"])


async def read_all(admin: AdminClient, addr: str, topic: str, queues: int) -> tuple[list, int, int]:
    """(records of every queue from offset 0, offsets the pulls moved past without returning them, responses
    whose body held something that is not a record)."""
    out, skipped, garbage = [], 0, 0
    for queue_id in range(queues):
        offset = 0
        for _ in range(100_000):
            ext = {"consumerGroup": "bench-reader", "topic": topic, "queueId": queue_id, "queueOffset": offset,
                   "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0,
                   "subscription": "*", "subVersion": 0, "expressionType": "TAG"}
            resp = await admin.invoke(addr, RequestCode.PULL_MESSAGE, ext)
            if resp.code not in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY):
                break
            records = []
            try:
                for record in iter_records(resp.body or b""):
                    records.append(record)
            except RecordError:
                garbage += 1
            nxt = int(resp.ext_fields["nextBeginOffset"])
            got = {r.queue_offset for r in records}
            skipped += sum(1 for o in range(offset, nxt) if o not in got)
            out.extend(records)
            offset = nxt
    return out, skipped, garbage


def blocks_used(directory: str) -> tuple[int, int, int]:
    used = apparent = files = 0
    for root, _dirs, names in os.walk(directory):
        for name in names:
            st = os.stat(os.path.join(root, name))
            used += st.st_blocks * 512
            apparent += st.st_size
            files += 1
    return used, apparent, files


def mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB" if n < 1 << 30 else f"{n / (1 << 30):,.2f} GiB"


async def run(args: argparse.Namespace, workdir: str) -> None:
    conf, addr = write_conf(workdir)
    broker = BrokerProcess.from_conf(conf, os.path.join(workdir, "broker.log"))
    broker.start()
    store = os.path.join(workdir, "store")
    try:
        async with AdminClient(addr) as admin:
            # -- disk footprint of auto-created queues
            started = time.monotonic()
            topics = -(-args.queues // 4)
            for i in range(args.queues):
                await send(admin, addr, f"Auto{i // 4}", i % 4, b"x" * 100)
            used, apparent, files = blocks_used(os.path.join(store, "consumequeue"))
            print(f"disk: {files:,} auto-created queues ({topics:,} topics x 4) with one message each: "
                  f"{mib(used)} of consume-queue blocks used (du), {mib(apparent)} if pre-allocated "
                  f"({used / max(files, 1) / 1024:.1f} KiB vs {apparent / max(files, 1) / 1024:,.0f} KiB per queue; "
                  f"{time.monotonic() - started:.1f}s to create)")

            # -- pull gaps: damage units 20..24 of a 60-message queue in place (the broker maps the file shared)
            for i in range(60):
                await send(admin, addr, "Gappy", 0, f"g{i}".encode())
            path = os.path.join(store, "consumequeue", "Gappy", "0", "%020d" % 0)
            fd = os.open(path, os.O_RDWR)
            try:
                for off in range(20, 25):
                    phys, size, tags = UNIT.unpack(os.pread(fd, UNIT.size, off * UNIT.size))
                    os.pwrite(fd, UNIT.pack(phys + 3, size, tags), off * UNIT.size)
            finally:
                os.close(fd)
            records, skipped, garbage = await read_all(admin, addr, "Gappy", 1)
            good = sum(1 for r in records if r.body.startswith(b"g"))
            print(f"pull gaps: 5 damaged units in 60: {good} of 55 intact messages returned, {skipped - 5} readable "
                  f"messages skipped by a nextBeginOffset, {garbage} responses with undecodable bytes")

            # -- deleted topic: old incarnation, delete, new incarnation
            for i in range(args.old):
                await send(admin, addr, "Phoenix", i % 4, f"old-{i}".encode())
            await admin.delete_topic_in_broker(addr, "Phoenix")
            for i in range(args.new):
                await send(admin, addr, "Phoenix", i % 4, f"new-{i}".encode())
            await asyncio.sleep(0.5)  # the re-created topic's config reaches topics.json
        broker.kill()
        started = time.monotonic()
        broker = BrokerProcess.from_conf(conf, os.path.join(workdir, "broker-2.log"))
        broker.start()
        restart_s = time.monotonic() - started
        async with AdminClient(addr) as admin:
            records, _, _ = await read_all(admin, addr, "Phoenix", 4)
        old = sum(1 for r in records if r.body.startswith(b"old-"))
        new = sum(1 for r in records if r.body.startswith(b"new-"))
        print(f"deleted topic: {args.old:,} old messages, delete, {args.new} new, kill -9, restart ({restart_s:.1f}s): "
              f"read {new} new, resurrected {old:,} old")
    finally:
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=1000, help="auto-created queues for the disk figure")
    parser.add_argument("--old", type=int, default=2000, help="messages of the deleted incarnation")
    parser.add_argument("--new", type=int, default=10, help="messages of the re-created topic")
    parser.add_argument("--keep", action="store_true", help="keep the temporary store")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="reliability-consistency-")
    try:
        asyncio.run(run(args, workdir))
    finally:
        if args.keep:
            print("store kept in", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
