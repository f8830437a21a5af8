"""Crash soak: N rounds of `kill -9` under concurrent send load, then a full pull-back.

Each round starts the broker on the same store directory, runs several producers sending concurrently (every
message's body carries its round, index and a checksum of both), kills the broker with SIGKILL after a random
moment, and records which sends were acknowledged. After the last round the broker is started once more and every
queue is pulled from offset 0. Printed per round and in total:

* acked       sends the broker answered SEND_OK
* lost        acknowledged messages that are not in the store after recovery (must be 0)
* duplicated  messages stored more than once (must be 0: producers here never retry)
* corrupted   stored bodies that fail their checksum or cannot be parsed (must be 0)
* skipped     queue offsets missing between 0 and a queue's max offset (must be 0)
* unacked     messages stored although their send was not acknowledged (in flight at the kill; allowed)

Usage: python bench/soak.py [--rounds 10] [--producers 4] [--window 64] [--min-run 0.5] [--max-run 2.5]
Exit status 1 when anything was lost, duplicated, corrupted or skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import sys
import tempfile
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.broker_process import prepare_broker  # noqa: E402
from client import Message, Producer, PullConsumer  # noqa: E402
from client.message import PullStatus, SendStatus  # noqa: E402

TOPIC = "SoakTopic"
PAYLOAD_BYTES = 256


def make_body(round_no: int, index: int) -> bytes:
    """`round:index:` + a digest of both, repeated to PAYLOAD_BYTES: any flipped byte fails `check_body`."""
    head = b"%d:%d:" % (round_no, index)
    digest = hashlib.sha256(head).hexdigest().encode()
    reps = PAYLOAD_BYTES // len(digest) + 1
    return head + (digest * reps)[:PAYLOAD_BYTES]


def check_body(body: bytes) -> tuple[int, int] | None:
    """(round, index) of a well-formed body, None when it is corrupt."""
    try:
        round_s, index_s, _ = body.split(b":", 2)
        key = (int(round_s), int(index_s))
    except ValueError:
        return None
    return key if make_body(*key) == body else None


async def send_until_killed(namesrv: str, round_no: int, producer_no: int, producers: int, window: int,
                            deadline: float, acked: set[tuple[int, int]]) -> None:
    """One producer: keep `window` sends in flight until the broker dies or the deadline passes."""
    producer = Producer(f"soak-p{producer_no}", namesrv_addr=namesrv, send_timeout=3.0,
                        retry_times_when_send_failed=0, heartbeat_interval=3600)
    try:
        await producer.start()
    except Exception:
        return
    index = producer_no
    in_flight: set[asyncio.Future] = set()
    dead = False
    try:
        while not dead and time.monotonic() < deadline:
            while len(in_flight) < window:
                key = (round_no, index)
                fut = asyncio.ensure_future(producer.send(Message(TOPIC, make_body(*key))))
                fut.key = key  # type: ignore[attr-defined]
                in_flight.add(fut)
                index += producers
            done, in_flight = await asyncio.wait(in_flight, timeout=5, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                break
            for fut in done:
                if fut.exception() is not None:
                    dead = True
                elif fut.result().status is SendStatus.SEND_OK:
                    acked.add(fut.key)  # type: ignore[attr-defined]
        if in_flight:
            done, _ = await asyncio.wait(in_flight, timeout=5)
            for fut in done:
                if fut.exception() is None and fut.result().status is SendStatus.SEND_OK:
                    acked.add(fut.key)  # type: ignore[attr-defined]
    finally:
        for fut in in_flight:
            fut.cancel()
        try:
            await asyncio.wait_for(producer.shutdown(), 5)
        except Exception:
            pass


async def one_round(broker, namesrv: str, round_no: int, args, rng: random.Random) -> tuple[float, set]:
    """Start the broker, load it, kill -9 it at a random moment; seconds of load and the acknowledged keys."""
    broker.start()
    acked: set[tuple[int, int]] = set()
    run_for = rng.uniform(args.min_run, args.max_run)
    senders = [asyncio.ensure_future(send_until_killed(namesrv, round_no, p, args.producers, args.window,
                                                       time.monotonic() + run_for + 30, acked))
               for p in range(args.producers)]
    await asyncio.sleep(run_for)
    broker.kill()
    await asyncio.wait(senders, timeout=60)
    return run_for, acked


async def pull_everything(namesrv: str) -> tuple[list[tuple[int, int] | None], int]:
    """Every stored message's key (None when corrupt) and the number of skipped queue offsets."""
    keys: list[tuple[int, int] | None] = []
    skipped = 0
    consumer = PullConsumer("soak-verifier", namesrv_addr=namesrv)
    await consumer.start()
    try:
        for mq in await consumer.fetch_message_queues(TOPIC):
            offset = 0
            for _ in range(1_000_000):
                res = await consumer.pull(mq, "*", offset=offset, max_nums=32)
                if res.status is not PullStatus.FOUND:
                    if res.status is PullStatus.OFFSET_ILLEGAL or offset < res.max_offset:
                        skipped += max(0, res.max_offset - offset)
                    break
                for msg in res.messages:
                    if msg.queue_offset != offset:
                        skipped += msg.queue_offset - offset
                    offset = msg.queue_offset + 1
                    keys.append(check_body(msg.body))
                if res.next_offset < offset:
                    break
                offset = res.next_offset
    finally:
        await consumer.shutdown()
    return keys, skipped


async def main_async(args) -> int:
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="soak-") as workdir:
        broker, namesrv_port = prepare_broker(workdir, args.commit_log_size, None)
        namesrv = f"127.0.0.1:{namesrv_port}"
        acked_by_round: dict[int, set] = {}
        for round_no in range(args.rounds):
            run_for, acked = await one_round(broker, namesrv, round_no, args, rng)
            acked_by_round[round_no] = acked
            print(f"round {round_no + 1}/{args.rounds}: {len(acked):,} acked, kill -9 after {run_for:.1f}s of load",
                  flush=True)
        broker.start()
        try:
            keys, skipped = await pull_everything(namesrv)
        finally:
            broker.stop()
    all_acked = set().union(*acked_by_round.values())
    stored = Counter(k for k in keys if k is not None)
    corrupted = sum(1 for k in keys if k is None)
    lost = [k for k in all_acked if k not in stored]
    duplicated = sum(n - 1 for n in stored.values() if n > 1)
    unacked = sum(1 for k in stored if k not in all_acked)
    print(f"\n{args.rounds} rounds of kill -9 under load ({args.producers} producers x {args.window} in flight, "
          f"{PAYLOAD_BYTES}-byte bodies)")
    print(f"acked {len(all_acked):,}  stored {sum(stored.values()):,}  lost {len(lost):,}  "
          f"duplicated {duplicated:,}  corrupted {corrupted:,}  skipped {skipped:,}  unacked-but-stored {unacked:,}")
    if lost:
        print("lost e.g.", sorted(lost)[:10])
    return 1 if (lost or duplicated or corrupted or skipped) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--window", type=int, default=64, help="sends in flight per producer")
    parser.add_argument("--min-run", type=float, default=0.5, help="shortest load before the kill (s)")
    parser.add_argument("--max-run", type=float, default=2.5, help="longest load before the kill (s)")
    parser.add_argument("--commit-log-size", type=int, default=4 << 20,
                        help="mappedFileSizeCommitLog (small files: rounds cross file boundaries)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
