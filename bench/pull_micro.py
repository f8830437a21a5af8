"""In-process cost of the broker's pull path per message (not a test): ``Puller.pull`` on a real broker's store.

    python bench/pull_micro.py [--messages 1000000] [--queues 10] [--body 128] [--pull 1024] [--rounds 3]
                               [--dir DIR] [--keep]

Writes --messages messages (--body bytes, tags tag0..tag15, a key each; batches of 256 to one queue, as
bench/spark_network.py sends them) into an in-process Broker's store under --dir (default: pull-micro-work/ in
this checkout, removed at the end unless --keep; an existing store there is reused). Then reads every queue from 0
with pulls of --pull messages (the Spark network reader's request: its own subscription, sysFlag 0x4), unfiltered,
with a TAG filter matching 4 of the 16 tags, and --rounds times each; prints the median CPU µs per message returned
and per consume-queue unit examined. With PYTHONPATH set, the broker of that tree is timed (before/after: run it
with PYTHONPATH on each checkout against one kept store).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.environ.get("PYTHONPATH"):  # PYTHONPATH set: time that tree's broker (an A/B against another checkout)
    sys.path.insert(0, ROOT)

from broker.broker import Broker  # noqa: E402
from broker.config import BrokerConfig  # noqa: E402
from broker.core.consume import PullRequest  # noqa: E402
from broker.store import MessageToStore  # noqa: E402
from broker.testing import free_port  # noqa: E402
from protocol.hashing import tags_code  # noqa: E402
from protocol.ids import pack_host  # noqa: E402
from protocol.properties import encode_properties  # noqa: E402

TOPIC = "PullMicro"
BATCH = 256


def _config(root: str) -> BrokerConfig:
    return BrokerConfig(
        broker_name="pull-micro", broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=free_port(),
        namesrv_addr=None, enable_embedded_namesrv=False, enable_vip_channel=False, store_path_root_dir=root,
        dashboard_port=0, metrics_port=0, message_index_enable=False)


async def _fill(broker: Broker, messages: int, queues: int, body: bytes) -> None:
    born = pack_host("192.168.0.10", 54321)
    now = int(time.time() * 1000)
    sent = 0
    batch_no = 0
    while sent < messages:
        n = min(BATCH, messages - sent)
        queue_id = batch_no % queues
        msgs = []
        for i in range(sent, sent + n):
            tag = "tag%d" % (i % 16)
            props = encode_properties({"TAGS": tag, "KEYS": "k%d" % i, "UNIQ_KEY": "%032X" % i, "WAIT": "true"})
            msgs.append(MessageToStore(TOPIC, queue_id, 0, 0, now, born, 0, body, props, tags_code(tag), None,
                                       "%032X" % i))
        result = await broker.store.put_messages(msgs)
        if not result.ok:
            raise SystemExit("put failed: %r" % (result,))
        sent += n
        batch_no += 1


def _read_all(broker: Broker, queues: int, pull: int, subscription: tuple[str, str]) -> tuple[int, int, int, float]:
    """(messages, units examined, pulls, CPU seconds) of reading every queue from 0 to its end."""
    puller = broker.puller
    messages = units = pulls = 0
    started = time.process_time()
    for queue_id in range(queues):
        offset = 0
        while True:
            outcome = puller.pull(PullRequest("pull-micro", TOPIC, queue_id, offset, max_nums=pull,
                                              subscription=subscription))
            pulls += 1
            value = outcome.value
            if value is None or value.next_begin_offset == offset:
                break
            body = value.body  # what the processor sends
            if value.message_count and not body:
                raise SystemExit("a pull found messages but has no body")
            messages += value.message_count
            units += value.next_begin_offset - offset
            offset = value.next_begin_offset
    return messages, units, pulls, time.process_time() - started


async def run(args: argparse.Namespace) -> None:
    root = args.dir or os.path.join(ROOT, "pull-micro-work")
    fresh = not os.path.isdir(root)
    broker = Broker(_config(root))
    await broker.start()
    try:
        broker.topic_config_manager.create_topic_if_absent(TOPIC, args.queues)
        have = sum(broker.store.get_max_offset(TOPIC, q) for q in range(args.queues))
        if have != args.messages:
            if have:
                raise SystemExit(f"{root} holds {have} messages, not {args.messages}: remove it or use another --dir")
            t0 = time.perf_counter()
            await _fill(broker, args.messages, args.queues, b"x" * args.body)
            print(f"wrote {args.messages:,} messages in {time.perf_counter() - t0:.1f} s")
        tags = " || ".join("tag%d" % i for i in (0, 5, 10, 15))
        for name, subscription in (("unfiltered", ("TAG", "*")), ("TAG filter, 4 of 16 tags", ("TAG", tags))):
            runs = [_read_all(broker, args.queues, args.pull, subscription) for _ in range(args.rounds)]
            messages, units, pulls, _ = runs[0]
            cpu = statistics.median(r[3] for r in runs)
            print(f"{name}: {messages:,} messages, {units:,} units, {pulls:,} pulls of {args.pull}: "
                  f"median {cpu:.3f} CPU s = {cpu / max(messages, 1) * 1e6:.3f} µs/message, "
                  f"{cpu / max(units, 1) * 1e6:.3f} µs/unit (CPU s per round: "
                  + ", ".join(f"{r[3]:.3f}" for r in runs) + ")")
    finally:
        await broker.shutdown()
        if fresh and not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(prog="python bench/pull_micro.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--queues", type=int, default=10)
    p.add_argument("--body", type=int, default=128)
    p.add_argument("--pull", type=int, default=1024, help="maxMsgNums of each pull")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", help="store directory (default: pull-micro-work/ in this checkout)")
    p.add_argument("--keep", action="store_true", help="keep the store for the next run")
    args = p.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
