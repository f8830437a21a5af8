"""In-process MessageStore micro-benchmark (not a test).

    python bench/store_micro.py [--messages 500000] [--body 128] [--batch 256] [--dir /tmp/x]

Reports put_messages msgs/s for batches of ``--batch`` messages with ``--body``-byte bodies, and
get_messages msgs/s for 32- and 256-message pulls over what was written.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from broker.store import GetStatus, MessageStore, MessageToStore, PutStatus, StoreConfig  # noqa: E402
from protocol.hashing import tags_code  # noqa: E402
from protocol.ids import UniqKeyGenerator, pack_host  # noqa: E402
from protocol.properties import encode_properties  # noqa: E402


def make_batch(gen: UniqKeyGenerator, topic: str, queue_id: int, batch: int, body: bytes,
               born_host: bytes) -> list[MessageToStore]:
    now = int(time.time() * 1000)
    tag_code = tags_code("TagA")
    msgs = []
    for _ in range(batch):
        uniq = gen.next()
        props = encode_properties({"TAGS": "TagA", "UNIQ_KEY": uniq, "WAIT": "true", "CLUSTER": "DefaultCluster"})
        msgs.append(MessageToStore(topic, queue_id, 0, 0, now, born_host, 0, body, props, tag_code, None, uniq))
    return msgs


async def run(args: argparse.Namespace) -> None:
    root = args.dir or tempfile.mkdtemp(prefix="store-micro-")
    cfg = StoreConfig(root_dir=root, store_host=pack_host("127.0.0.1", 10911),
                      flush_disk_type=args.flush, max_hash_slot_num=5_000_000, max_index_num=20_000_000)
    store = MessageStore(cfg)
    store.load()
    await store.start()
    gen = UniqKeyGenerator("192.168.0.10")
    body = b"x" * args.body
    born = pack_host("192.168.0.10", 54321)
    topic = "BenchTopic"
    queues = args.queues
    # Pre-build batches outside the timed region (the broker decodes them from the wire).
    n_batches = args.messages // args.batch
    batches = [make_batch(gen, topic, i % queues, args.batch, body, born) for i in range(n_batches)]
    t0 = time.perf_counter()
    c0 = time.process_time()
    for msgs in batches:
        r = await store.put_messages(msgs)
        if r.status is not PutStatus.PUT_OK:
            raise SystemExit("put failed: %r" % r)
    put_s = time.perf_counter() - t0
    put_cpu = time.process_time() - c0
    total = n_batches * args.batch
    print("put_messages: %d msgs (%d x %d, body %dB, %d queue(s), %s): %.0f msgs/s  (%.2f us/msg wall, "
          "%.2f us/msg CPU incl. flush threads)" % (total, n_batches, args.batch, args.body, queues, args.flush,
                                                    total / put_s, put_s / total * 1e6, put_cpu / total * 1e6))

    for pull in (32, 256):
        t0 = time.perf_counter()
        got = 0
        for q in range(queues):
            offset = 0
            while True:
                g = store.get_messages(topic, q, offset, pull, max_bytes=1 << 24)
                if g.status is not GetStatus.FOUND:
                    break
                got += g.message_count
                offset = g.next_begin_offset
        get_s = time.perf_counter() - t0
        print("get_messages(max_nums=%d): %d msgs: %.0f msgs/s  (%.2f us/msg)"
              % (pull, got, got / get_s, get_s / got * 1e6))
    await store.shutdown()
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--messages", type=int, default=500_000)
    p.add_argument("--body", type=int, default=128)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--flush", default="ASYNC_FLUSH")
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
