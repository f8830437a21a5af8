"""Evaluations per second of a compiled SQL92 selector (in-process, no broker, no network).

    python bench/filter_eval.py [--selector TEXT] [--messages N] [--seconds S] [--json]

Builds N messages shaped like the sqlpull bench's, with 4 properties each: TAGS (TagA / TagB / TagC in turn),
a = i % 8, KEYS (unique) and UNIQ_KEY (unique), and encodes each as a commit-log record with a 128-byte body.
With the default selector (the issue's example expression) 1/3 of them match. Then it times, each for about
--seconds:

  map             selector.evaluate(properties) on already decoded dicts (the compiled closures alone)
  record-decode   selector.evaluate(record_properties(record)): walk to the properties, decode all of them
                  into a dict, evaluate (what the broker did per examined entry before the raw-record path)
  record          selector.matches_record(record): what the broker runs per examined entry on a filtered
                  pull (reads only the selector's properties from the raw bytes; decisions remembered per
                  combination of their values)
  record-miss     the same raw-record matcher told to also read UNIQ_KEY, so every record is a decision-cache
                  miss (the worst case of the raw-record path: selected values never repeat)

Every mode's match count is checked against the map results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from broker.filter import compile_selector, record_properties  # noqa: E402
from broker.filter.records import record_matcher  # noqa: E402
from protocol.ids import pack_host  # noqa: E402
from protocol.message import encode_record  # noqa: E402
from protocol.properties import encode_properties  # noqa: E402

EXAMPLE = "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)"
BODY = b"x" * 128
HOST = pack_host("127.0.0.1", 10911)


def make_properties(i: int) -> dict[str, str]:
    return {
        "TAGS": ("TagA", "TagB", "TagC")[i % 3],
        "a": str(i % 8),
        "KEYS": f"order-{i}",
        "UNIQ_KEY": f"7F00000100012A9F{i:016X}",
    }


def make_record(properties: dict[str, str], i: int) -> bytes:
    return encode_record(queue_id=0, flag=0, queue_offset=i, physical_offset=0, sys_flag=0, born_timestamp=1,
                         born_host=HOST, store_timestamp=2, store_host=HOST, reconsume_times=0,
                         prepared_transaction_offset=0, body=BODY, topic=b"BenchFilterTopic",
                         properties=encode_properties(properties).encode())


def measure(check, items: list, seconds: float) -> tuple[float, int]:
    """(evaluations per second, matches in one pass over items)."""
    matched = sum(1 for item in items if check(item))  # warm-up pass (and the count)
    rounds = 0
    start = time.perf_counter()
    elapsed = 0.0
    while elapsed < seconds:
        for item in items:
            check(item)
        rounds += 1
        elapsed = time.perf_counter() - start
    return rounds * len(items) / elapsed, matched


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--selector", default=EXAMPLE)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=2.0, help="time per mode")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    selector = compile_selector(args.selector)
    n = args.messages
    maps = [make_properties(i) for i in range(n)]
    records = [memoryview(make_record(p, i)) for i, p in enumerate(maps)]
    expected = sum(1 for p in maps if selector.evaluate(p))

    evaluate = selector.evaluate
    modes = [
        ("map", evaluate, maps, expected),
        ("record-decode", lambda record: evaluate(record_properties(record)), records, expected),
        ("record", selector.matches_record, records, expected),
        ("record-miss", record_matcher(selector.names + ("UNIQ_KEY",), evaluate), records, expected),
    ]
    print(f"selector: {selector.text}", file=sys.stderr)
    print(f"{n:,} messages with 4 properties; {expected:,} match", file=sys.stderr)
    results = []
    failed = False
    for name, check, items, want in modes:
        rate, matched = measure(check, items, args.seconds)
        ok = matched == want
        failed |= not ok
        results.append({"mode": name, "evaluations_per_s": round(rate), "us_per_evaluation": 1e6 / rate,
                        "matched": matched, "expected": want})
        print(f"{name:14s} {rate:>12,.0f} evaluations/s  {1e6 / rate:6.2f} us each  matched {matched:,}"
              + ("" if ok else f"  MISMATCH (expected {want:,})"), flush=True)
    if args.json:
        print(json.dumps({"selector": selector.text, "messages": n, "results": results}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
