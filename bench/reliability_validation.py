"""Issue 11, bad values: fire each class of bad value at a real broker and print what comes back.

    python bench/reliability_validation.py [--n 1000] [--cap-ms 2000] [--wait-s 20]

Starts the broker of this checkout (`python -m broker`, log level WARNING) with maxMessageSize=1024 and
maxPullSuspendTimeMillis=--cap-ms, then reports:

1. header integers: every integer field of every request (tests/support/validation_cases.py) with values beyond
   its Java type, non-numbers and in-range extremes -> response codes per request, cases not answered as
   expected, one sample remark;
2. consumer offsets: UPDATE_CONSUMER_OFFSET / a pull's commitOffset outside the queue -> code, remark, stored offset;
3. group names: bad names on heartbeat, send, pull -> code and remark;
4. long-poll suspend: a pull asking for suspendTimeoutMillis=10^12 on an empty queue -> seconds held;
5. log volume: --n requests of each bad kind -> log lines written (and tracebacks).

Every section also prints the broker log lines it caused. Runs in about 15 s (plus --wait-s when a pull is never
answered, as without the cap).

Figures (2-core machine shared with other jobs), `python bench/reliability_validation.py`, before = the same script
run against the tree before this change:
  1. header integers: 651 cases over 15 request codes; after: 0 answered unexpectedly, 20 log lines (one per
     request code and kind), 0 tracebacks; before: 210 answered unexpectedly (63 SYSTEM_ERROR from struct.error /
     OverflowError in the store, out-of-type values answered SUCCESS), 994 log lines, 47 tracebacks.
  2. offsets: UPDATE_CONSUMER_OFFSET -5 / 1000 (maxOffset 64) / queueId -1 / 99 -> INVALID_PARAMETER with the
     reason; before: all SUCCESS and stored (a pull's commitOffset 1000 was stored too).
  3. group names "bad.group" / 256 x "x" -> INVALID_PARAMETER on heartbeat, send, pull; before: SUCCESS
     (and the group was auto-created and persisted).
  4. suspendTimeoutMillis=10^12 with a 2000 ms cap: answered PULL_NOT_FOUND after 2.00 s; before: no answer
     within 20 s (held for 31 years).
  5. 1,000 requests each: overflowing header 1 log line (before: 20,000 lines, 1,000 tracebacks); one-way
     out-of-queue offset update 1 line (before: 0 lines, all stored); out-of-queue pull commitOffset 1 line
     (before: stored); refused send 1 line and bad group pull 1 line (broker.metrics' rejected-request line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.broker_process import BrokerProcess  # noqa: E402  (the test suite's broker launcher)
from tests.support.validation_cases import (  # noqa: E402
    GROUP,
    TOPIC,
    prepare,
    request_table,
    run_int_cases,
)
from tests.support.wire import WireClient, pull_fields, send_v2_fields  # noqa: E402
from protocol.codes import RequestCode as RC  # noqa: E402
from protocol.codes import ResponseCode as R  # noqa: E402


def _name(code: int | None, enum) -> str:
    try:
        return enum(code).name
    except (ValueError, TypeError):
        return str(code)


class LogWatch:
    """Counts the broker output lines written since the last mark."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.mark = len(broker.output)

    async def since(self, settle_s: float = 0.3) -> list[str]:
        await asyncio.sleep(settle_s)  # the output is read by a thread
        lines = "".join(self.broker.output[self.mark:]).splitlines()
        self.mark = len(self.broker.output)
        return lines


SHOW_LOG = False


def _log_summary(lines: list[str]) -> str:
    tracebacks = sum("Traceback" in line for line in lines)
    if SHOW_LOG:
        for line in lines:
            print(f"    | {line[:160]}")
    return f"broker log: {len(lines)} lines, {tracebacks} tracebacks"


async def header_integers(client: WireClient, watch: LogWatch) -> None:
    print("\n== 1. header integers beyond their Java type, non-numbers, extremes")
    total = unexpected = 0
    for code in sorted(request_table(), key=int):
        outcomes = await run_int_cases(client, code)
        total += len(outcomes)
        bad = [o for o in outcomes if not o.ok]
        unexpected += len(bad)
        codes = Counter(_name(o.response_code, R) for o in outcomes)
        sample = next((o for o in outcomes if o.kind == "overflow"), outcomes[0])
        print(f"{_name(code, RC):28s} {len(outcomes):4d} cases  {dict(codes)}")
        print(f"{'':28s} e.g. {sample.field}={sample.value[:24]} -> {_name(sample.response_code, R)} "
              f"{sample.remark[:90]!r}")
        for o in bad[:3]:
            print(f"{'':28s} UNEXPECTED {o.field}={o.value[:24]} ({o.kind}) -> {_name(o.response_code, R)} "
                  f"{o.remark[:90]!r}")
    print(f"total: {total} cases, {unexpected} not answered as expected; {_log_summary(await watch.since())}")


async def offsets(client: WireClient, watch: LogWatch) -> None:
    q = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"}
    max_offset = (await client.request(RC.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})).ext_fields["offset"]
    print(f"\n== 2. consumer offsets outside the queue (queue 0: maxOffset {max_offset})")
    ok = await client.request(RC.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": "1"})
    print(f"UPDATE_CONSUMER_OFFSET commitOffset=1 -> {_name(ok.code, R)}")
    for field, value in (("commitOffset", "-5"), ("commitOffset", "1000"), ("queueId", "-1"), ("queueId", "99")):
        ext = {**q, "commitOffset": "0", field: value}
        response = await client.request(RC.UPDATE_CONSUMER_OFFSET, ext)
        print(f"UPDATE_CONSUMER_OFFSET {field}={value} -> {_name(response.code, R)} {response.remark!r}")
    for commit in (-1, 1000):
        pulled = await client.request(RC.PULL_MESSAGE, pull_fields(TOPIC, GROUP, 0, 0, sys_flag=0x5,
                                                                   commit_offset=commit))
        stored = await client.request(RC.QUERY_CONSUMER_OFFSET, q)
        print(f"PULL commitOffset={commit} -> {_name(pulled.code, R)}; stored offset now "
              f"{stored.ext_fields.get('offset') if stored.ext_fields else None}")
    print(_log_summary(await watch.since()))


async def groups(client: WireClient, watch: LogWatch) -> None:
    print("\n== 3. group names")
    for group in ("bad.group", "x" * 256, "%RETRY%fine_group"):
        heartbeat = json.dumps({"clientID": "127.0.0.1@bench", "producerDataSet": [], "consumerDataSet": [
            {"groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
             "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": []}]}).encode()
        requests = {
            "HEART_BEAT": (RC.HEART_BEAT, {}, heartbeat),
            "SEND_MESSAGE_V2": (RC.SEND_MESSAGE_V2, send_v2_fields(TOPIC, 0, group=group), b"x"),
            "PULL_MESSAGE": (RC.PULL_MESSAGE, pull_fields(TOPIC, group, 0, 0, sys_flag=0x4), b""),
        }
        for what, (code, ext, body) in requests.items():
            response = await client.request(code, ext, body)
            print(f"{group[:20]!r:24s} {what:16s} -> {_name(response.code, R)} {(response.remark or '')[:100]!r}")
    print(_log_summary(await watch.since()))


async def suspend(client: WireClient, watch: LogWatch, cap_ms: int, wait_s: float) -> None:
    print(f"\n== 4. long-poll suspend: suspendTimeoutMillis=10^12 on an empty queue (cap {cap_ms} ms)")
    await client.request(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "BenchSuspend", "readQueueNums": "1",
                                                     "writeQueueNums": "1", "perm": "6"})
    started = time.monotonic()
    try:
        pulled = await client.request(RC.PULL_MESSAGE, pull_fields("BenchSuspend", GROUP, 0, 0, sys_flag=0x6,
                                                                   suspend_ms=10**12), timeout=wait_s)
        print(f"answered {_name(pulled.code, R)} after {time.monotonic() - started:.2f} s")
    except asyncio.TimeoutError:
        print(f"no answer within {wait_s:.0f} s")
    print(_log_summary(await watch.since()))


async def log_volume(client: WireClient, watch: LogWatch, n: int) -> None:
    print(f"\n== 5. log volume: {n} requests of each bad kind")
    kinds = {
        "overflowing header (flag=2^40)": lambda: client.make(RC.SEND_MESSAGE_V2,
                                                              send_v2_fields(TOPIC, 0, flag=2**40), b"x"),
        "refused send (body 2 KiB > maxMessageSize)": lambda: client.make(RC.SEND_MESSAGE_V2,
                                                                          send_v2_fields(TOPIC, 0), b"x" * 2048),
        "one-way UPDATE_CONSUMER_OFFSET beyond queue": lambda: client.make(
            RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0",
                                        "commitOffset": "999"}, oneway=True),
        "pull commitOffset beyond queue": lambda: client.make(
            RC.PULL_MESSAGE, pull_fields(TOPIC, GROUP, 0, 0, sys_flag=0x5, commit_offset=999)),
        "bad group name (pull)": lambda: client.make(RC.PULL_MESSAGE, pull_fields(TOPIC, "bad.group", 0, 0)),
    }
    for what, make in kinds.items():
        started = time.monotonic()
        futures = [client.send_nowait(make()) for _ in range(n)]
        await client.writer.drain()
        answered = [f for f in futures if f is not None]
        codes: Counter = Counter()
        if answered:
            codes.update(_name(r.code, R) for r in await asyncio.wait_for(asyncio.gather(*answered), 120))
        else:
            await client.request(RC.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})  # one-way ones are done
        elapsed = time.monotonic() - started
        lines = await watch.since(0.5)
        print(f"{what:45s} {dict(codes) or 'one-way'}  {elapsed:.2f} s  {_log_summary(lines)}")
    stored = await client.request(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"})
    print(f"stored offset of {GROUP} after all that: {stored.ext_fields.get('offset') if stored.ext_fields else None}"
          " (maxOffset 1: nothing beyond it was stored)")


async def run(args: argparse.Namespace) -> None:
    extra = {"maxMessageSize": 1024, "maxPullSuspendTimeMillis": args.cap_ms}
    with tempfile.TemporaryDirectory(prefix="bench-validation-") as tmp:
        broker = BrokerProcess(Path(tmp), "broker-bench", extra=extra)
        broker.start()
        try:
            async with await WireClient.connect(broker.addr) as client:
                await prepare(client)
                watch = LogWatch(broker)
                await watch.since()
                await header_integers(client, watch)
                await offsets(client, watch)
                await groups(client, watch)
                await suspend(client, watch, args.cap_ms, args.wait_s)
        finally:
            broker.stop()
        first = broker.log_text().splitlines()
        # A fresh broker, so the log lines counted are those of the flood alone (the rate limiter remembers keys).
        flood = BrokerProcess(Path(tmp), "broker-flood", extra=extra)
        flood.start()
        try:
            async with await WireClient.connect(flood.addr) as client:
                await prepare(client)
                watch = LogWatch(flood)
                await watch.since()
                await log_volume(client, watch, args.n)
        finally:
            flood.stop()
        total = first + flood.log_text().splitlines()
        print(f"\nwhole run (two brokers): {len(total)} broker log lines, "
              f"{sum('Traceback' in line for line in total)} tracebacks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="requests per bad kind in the log-volume section")
    parser.add_argument("--cap-ms", type=int, default=2000, help="maxPullSuspendTimeMillis of the bench broker")
    parser.add_argument("--wait-s", type=float, default=20.0, help="how long to wait for the suspended pull")
    parser.add_argument("--show-log", action="store_true", help="print the broker log lines of each section")
    args = parser.parse_args()
    global SHOW_LOG
    SHOW_LOG = args.show_log
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
