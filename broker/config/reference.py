"""The reference broker's broker.conf keys (package data ``reference_keys.txt``) and the nearest-key suggestion.

Real broker.conf files carry keys of Apache RocketMQ that this broker does not implement; those only warn. A key
neither broker knows is a typo, so the loader refuses it and names the closest key it could have meant.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from importlib import resources
from typing import Iterable

__all__ = ["reference_keys", "nearest_key"]


@lru_cache(maxsize=1)
def reference_keys() -> frozenset[str]:
    """Every key listed in reference_keys.txt (comments, blank lines and ``[Class]`` section lines skipped)."""
    text = resources.files(__package__).joinpath("reference_keys.txt").read_text(encoding="utf-8")
    keys = set()
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("["):
            keys.add(line)
    return frozenset(keys)


def nearest_key(name: str, preferred: Iterable[str], fallback: Iterable[str] = ()) -> str | None:
    """The key most like ``name`` (compared case-insensitively, by difflib's ratio) among ``preferred`` (the keys
    that would take effect) and ``fallback``; a tie goes to ``preferred``. None only when both are empty."""
    wanted = name.lower()
    best: tuple[float, int, str] | None = None
    for rank, pool in enumerate((preferred, fallback)):
        for key in pool:
            matcher = difflib.SequenceMatcher(None, wanted, key.lower())
            if best is not None and matcher.real_quick_ratio() < best[0]:
                continue
            score = (matcher.ratio(), -rank, key)
            if best is None or score[:2] > best[:2]:
                best = score
    return best[2] if best else None
