"""Java ``String.hashCode`` and the hashes RocketMQ derives from it.

The broker must agree bit-for-bit with Java clients: tagsCode in ConsumeQueue units, subscription code sets and
index-file slots are all computed from ``String.hashCode``, which runs over UTF-16 code units (a character outside the
BMP counts as two surrogates) with signed 32-bit wrap-around.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from operator import mul

__all__ = ["java_string_hash", "java_string_hashes", "tags_code", "index_key_hash"]

_MASK32 = 0xFFFFFFFF
_SIGN32 = 0x80000000
_WRAP32 = 1 << 32
_INT_MIN = -(1 << 31)

# Above this many code units the C-level "sum of unit * 31^k" beats a Python loop.
_SHORT_LIMIT = 32
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"

# _POWERS[k] = 31**k mod 2**32; grown on demand for long strings.
_POWERS: list[int] = [1]


def _powers(n: int) -> list[int]:
    powers = _POWERS
    if len(powers) < n:
        value = powers[-1]
        for _ in range(n - len(powers)):
            value = (value * 31) & _MASK32
            powers.append(value)
    return powers


def _hash_units(units) -> int:
    """Unsigned 32-bit polynomial hash of a sequence of code units (bytes or memoryview of 'H')."""
    n = len(units)
    if n <= _SHORT_LIMIT:
        h = 0
        for unit in units:
            h = h * 31 + unit  # masking once at the end is exact: only the low 32 bits matter
        return h & _MASK32
    return sum(map(mul, units[::-1], _powers(n))) & _MASK32


def java_string_hash(s: str) -> int:
    """Java ``s.hashCode()`` as a signed 32-bit int."""
    if s.isascii():
        h = _hash_units(s.encode("ascii"))
    else:
        h = _hash_units(memoryview(s.encode(_UTF16_NATIVE)).cast("H"))
    return h - _WRAP32 if h & _SIGN32 else h


def java_string_hashes(strings: list[str]) -> list[int]:
    """Batch form of :func:`java_string_hash` (saves the per-call lookup overhead)."""
    return [java_string_hash(s) for s in strings]


@lru_cache(maxsize=4096)
def tags_code(tag: str | None) -> int:
    """tagsCode stored in ConsumeQueue units: hash of the tag, 0 for no tag. Cached: tags repeat a lot."""
    if not tag:
        return 0
    return java_string_hash(tag)


def index_key_hash(key: str) -> int:
    """Index-file slot hash: ``Math.abs(key.hashCode())`` with Integer.MIN_VALUE mapped to 0 as Java does."""
    h = java_string_hash(key)
    if h == _INT_MIN:
        return 0
    return -h if h < 0 else h
