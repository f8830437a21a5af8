"""Lookups in the store's index files (index/<yyyyMMddHHmmssSSS>): where the records of a topic#key are.

The reference's layout: a 40-byte header (begin/end timestamp, begin/end commit-log offset, used slots, entry
count), `slots` 4-byte hash slots holding the newest entry of their chain, then 20-byte entries (key hash, commit-log
offset, time difference, previous entry). The slot count is not in the file: it is taken from the option
`index_hash_slots`, else from the file size with the reference's ratio of four entries per slot.
"""

from __future__ import annotations

import os
import re
import struct

from spark_export.pushdown import java_string_hash
from spark_export.store import StoreLayout, mapped

__all__ = ["index_paths", "lookup_offsets"]

_NAME = re.compile(r"^\d{17}$")
_HEADER = struct.Struct(">qqqqii")
_HEADER_SIZE = 40
_ENTRY = struct.Struct(">iqii")
_ENTRY_SIZE = 20
_SLOT = struct.Struct(">i")


def index_paths(layout: StoreLayout) -> list[str]:
    directory = os.path.join(layout.root, "index")
    if not os.path.isdir(directory):
        return []
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if _NAME.match(n)]


def _key_hash(topic: str, key: str) -> int:
    h = java_string_hash(f"{topic}#{key}")
    return 0 if h == -(1 << 31) else abs(h)


def _slot_count(size: int, slots: int | None) -> int | None:
    if slots:
        return slots if (size - _HEADER_SIZE - slots * 4) % _ENTRY_SIZE == 0 else None
    body = size - _HEADER_SIZE
    return body // 84 if body > 0 and body % 84 == 0 else None  # 4 bytes per slot + 4 entries of 20 bytes


def lookup_offsets(layout: StoreLayout, topics: list[str], keys: list[str], slots: int | None = None) -> list[int] | None:
    """Commit-log offsets indexed under topic#key for every pair (sorted, distinct): a superset of the records whose
    UNIQ_KEY or one of whose KEYS is `key` (hash collisions are weeded out by the reader). None when the store has
    no index files or one cannot be read with a known slot count: the caller then scans instead."""
    paths = index_paths(layout)
    if not paths:
        return None
    wanted = [_key_hash(t, k) for t in topics for k in keys]
    found: set[int] = set()
    for path in paths:
        size = os.path.getsize(path)
        slot_count = _slot_count(size, slots)
        if slot_count is None or size < _HEADER_SIZE:
            return None
        with mapped(path) as buf:
            data = memoryview(buf)
            _, _, _, _, _, count = _HEADER.unpack_from(data, 0)
            entries = _HEADER_SIZE + slot_count * 4
            capacity = (size - entries) // _ENTRY_SIZE
            for key_hash in wanted:
                (index,) = _SLOT.unpack_from(data, _HEADER_SIZE + (key_hash % slot_count) * 4)
                for _ in range(min(count, capacity) + 1):  # a chain never revisits an entry; bounded anyway
                    if index <= 0 or index > count or index >= capacity:
                        break
                    entry_hash, offset, _diff, previous = _ENTRY.unpack_from(data, entries + index * _ENTRY_SIZE)
                    if entry_hash == key_hash:
                        found.add(offset)
                    if previous >= index:
                        break
                    index = previous
    return sorted(found)
