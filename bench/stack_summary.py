"""Summarise py-spy collapsed stacks (`py-spy record --format raw`): self and inclusive share per function.

    python bench/stack_summary.py /tmp/prof/broker_batch.txt [--top 30]
"""

from __future__ import annotations

import argparse
import collections
import re

_FRAME_RE = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def frame_key(frame: str) -> str:
    """'put_messages (broker/store/message_store.py:123)' -> 'put_messages (broker/store/message_store.py)'."""
    m = _FRAME_RE.match(frame.strip())
    if not m:
        return frame.strip()
    path = m.group("file")
    for marker in ("/work/main/", "site-packages/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{m.group('func')} ({path})"


def summarise(path: str) -> tuple[int, collections.Counter, collections.Counter]:
    self_counts: collections.Counter = collections.Counter()
    incl_counts: collections.Counter = collections.Counter()
    total = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, count = line.rpartition(" ")
            try:
                n = int(count)
            except ValueError:
                continue
            frames = [frame_key(fr) for fr in stack.split(";") if fr]
            if not frames:
                continue
            total += n
            self_counts[frames[-1]] += n
            for key in set(frames):
                incl_counts[key] += n
    return total, self_counts, incl_counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    for path in args.files:
        total, self_counts, incl_counts = summarise(path)
        print(f"== {path}: {total} samples")
        print("-- self")
        for key, n in self_counts.most_common(args.top):
            print(f"{100.0 * n / total:6.1f}%  {key}")
        print("-- inclusive")
        for key, n in incl_counts.most_common(args.top):
            print(f"{100.0 * n / total:6.1f}%  {key}")


if __name__ == "__main__":
    main()
