"""SQL92 selectors cannot stall the broker (issue 11): compile time of hostile and of the largest selectors.

For each lexer trap class (a run of one character class, the shape that made lexing quadratic) and sizes
up to the maximum selector length, prints:
  * before: lexing alone with lark's standard lexer over the same grammar (what the broker used before;
    skipped for larger sizes once a size takes over --before-budget seconds, the growth already shows);
  * after: a full `compile_selector` (lex, parse, compile or refuse), uncached, best of 3.
Then the compile time of the largest selector each limit accepts, its per-message evaluation time, and how
many consume-queue units one filtered pull examines with it.

Run: PYTHONPATH=. python bench/reliability_sql92.py [--before-budget 3]

Figures measured on the shared 2-core dev box (other jobs running, so +-50%); runs in ~10 s:
  trap                 before (lexing only; the old broker also parsed and re-lexed for the error)   after
  '-' x 16 KiB         2,200 ms (64 KiB ~35 s est.; 40 KB held the broker's loop 31 s)                0.3 ms
  '0' x 16 KiB         2,150 ms (64 KiB ~34 s est.)                                                    0.6 ms
  '--a' x 16 KiB         750 ms (64 KiB ~12 s est.)                                                    0.4 ms
  every trap class at 64 KiB (the maximum length), after: 0.1 - 16 ms
  largest accepted selector      compile   eval/message   units per pull
  OR chain, 1,000 terms          ~17 ms    ~57 us         80
  AND of orderings, 1,000 terms  ~17 ms    ~124 us        80
  IN list, 2,000 items           ~14 ms    ~0.2 us        800 (a set lookup)
  nested, ~5,000 tokens          ~38 ms    ~33 us         32
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lark import Lark  # noqa: E402
from lark.exceptions import UnexpectedInput  # noqa: E402

from broker.filter import sql92  # noqa: E402
from broker.filter.sql92 import (  # noqa: E402
    MAX_IN_ITEMS,
    MAX_SELECTOR_LENGTH,
    MAX_TERMS,
    MAX_TOKENS,
    SelectorError,
    compile_selector,
)
from broker.core.consume import FILTER_SCAN_WEIGHT_BUDGET, MAX_FILTER_SCAN_UNITS  # noqa: E402

TRAPS = {
    "'-' run": lambda n: "-" * n,
    "'--a' run": lambda n: "--a" * (n // 3),
    "'+' run": lambda n: "+" * n,
    "'0' run": lambda n: "0" * n,
    "digits": lambda n: "1" * n,
    "unterminated 'string": lambda n: "a = '" + "x" * (n - 5),
    "quotes": lambda n: "'" * n,
    "letters": lambda n: "a" * n,
    "'e' run": lambda n: "e" * n,
    "'(' run": lambda n: "(" * n,
    "whitespace": lambda n: " " * n,
    "'.' run": lambda n: "." * n,
    "line comments": lambda n: "--\n" * (n // 3),
    "unterminated /*": lambda n: "/*" + "-" * (n - 2),
    "'NOT ' run": lambda n: "NOT " * (n // 4),
    "conditions": lambda n: "a = 'x' AND " * (n // 12),
}
SIZES = [1024, 4096, 16384, MAX_SELECTOR_LENGTH]


def _after(text: str) -> tuple[float, str]:
    best, outcome = float("inf"), ""
    for _ in range(3):
        sql92.clear_cache()
        started = time.perf_counter()
        try:
            compile_selector(text)
            outcome = "accepted"
        except SelectorError as exc:
            outcome = exc.reason
        best = min(best, time.perf_counter() - started)
    return best, outcome


_standard = Lark(sql92._GRAMMAR_PATH.read_text(), parser="lalr", lexer="basic")


def _before(text: str) -> float:
    started = time.perf_counter()
    try:
        for _ in _standard.lex(text):
            pass
    except UnexpectedInput:
        pass
    return time.perf_counter() - started


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:9.1f}"


def traps(before_budget: float) -> None:
    print(f"{'trap':24} {'size':>6} {'before ms':>10} {'after ms':>9}  outcome after")
    for name, build in TRAPS.items():
        previous: tuple[int, float] | None = None
        for size in SIZES:
            text = build(size)
            estimate = previous[1] * (size / previous[0]) ** 2 if previous else 0.0
            if estimate > before_budget and previous[1] > 0.05:  # clearly superlinear: don't wait for it
                before = "~" + _ms(estimate).strip()
                previous = (size, estimate)
            else:
                seconds = _before(text)
                before = _ms(seconds)
                previous = (size, seconds)
            after, outcome = _after(text)
            print(f"{name:24} {size:6} {before:>10} {_ms(after)}  {outcome[:70]}")


def largest() -> None:
    wanted = "v-last"
    cases = {
        f"OR chain, {MAX_TERMS} terms": " OR ".join(f"a = 'v{i}'" for i in range(MAX_TERMS // 2 - 1))
        + f" OR a = '{wanted}'",
        f"AND of orderings, {MAX_TERMS} terms": " AND ".join(f"a{i % 30} > {i}" for i in range(MAX_TERMS // 2)),
        f"IN list, {MAX_IN_ITEMS} items": "a IN (" + ", ".join(f"'v{i}'" for i in range(MAX_IN_ITEMS)) + ")",
        f"nested, ~{MAX_TOKENS} tokens": " OR ".join(["((((((a = 'x'))))))"] * (MAX_TOKENS // 16)),
        "deep NOT, 126 levels": "NOT " * 126 + "(a = 'x')",
    }
    message = {f"a{i}": str(10_000 + i) for i in range(30)} | {"a": "no-match"}
    print(f"\n{'largest accepted selector':34} {'chars':>6} {'compile ms':>10} {'eval us/msg':>11} "
          f"{'units/pull':>10}")
    for name, text in cases.items():
        seconds, outcome = _after(text)
        assert outcome == "accepted", (name, outcome)
        selector = compile_selector(text)
        runs = 2000
        started = time.perf_counter()
        for _ in range(runs):
            selector.evaluate(message)
        per_message = (time.perf_counter() - started) / runs
        units = max(1, min(MAX_FILTER_SCAN_UNITS, FILTER_SCAN_WEIGHT_BUDGET // selector.weight))
        print(f"{name:34} {len(text):6} {_ms(seconds):>10} {per_message * 1e6:11.1f} {units:10}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-budget", type=float, default=3.0,
                        help="stop measuring 'before' for a trap once one size takes longer (seconds)")
    args = parser.parse_args()
    compile_selector("warm = 'up'")
    traps(args.before_budget)
    largest()


if __name__ == "__main__":
    main()
