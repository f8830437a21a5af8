"""Reads that go straight to the records a query can match, instead of walking the whole commit log.

The consume queues of the pushed topics (or the index files, for a key) give commit-log offsets; the records there
are checked (spark_export.kernels.records_at: magic, own offset, consistent lengths) and decoded like any other.
Only used when every pushed topic has a consume-queue directory: the broker dispatches every record it stores to
its topic's consume queue (transaction halves included, under their own topic), so the two reads see the same
records of a live store.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from spark_export.decode import CQ_UNIT_SIZE, DecodeOptions, decode_messages
from spark_export.kernels import RECORD_FIELDS, ensure_loaded, records_at
from spark_export.pushdown import Pushdown, java_string_hash
from spark_export.records import DEFAULT_BATCH_ROWS, Records
from spark_export.store import StoreLayout, mapped

__all__ = ["RecordSet", "consume_queue_offsets", "sorted_unique", "group_by_file", "known_topics", "read_records"]

_CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
_CQ_FILLER_SIZE = 0x7FFFFFFF
_SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # its units hold a delivery time where others hold the tag hash


@dataclass(frozen=True)
class RecordSet:
    """Records of one commit-log file at these file positions (sorted)."""

    path: str
    base: int
    positions: np.ndarray


def known_topics(layout: StoreLayout) -> list[str]:
    """Topics with a consume-queue directory."""
    root = os.path.join(layout.root, "consumequeue")
    if not os.path.isdir(root):
        return []
    return sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)))


def consume_queue_offsets(layout: StoreLayout, topics: frozenset[str], push: Pushdown) -> np.ndarray:
    """Commit-log offsets of the units of `topics` that the pushed queue, offset and tag filters allow (sorted)."""
    tag_codes = None
    if push.tags is not None:
        tag_codes = np.array(sorted({java_string_hash(t) for t in push.tags}), np.int64)
    chunks = []
    for f in layout.consume_queue_files(topics):
        if not push.queue_allowed(f.queue_id):
            continue
        first = f.base // CQ_UNIT_SIZE
        count = f.size // CQ_UNIT_SIZE
        bounds = push.queue_offset
        if (bounds.lo is not None and first + count <= bounds.lo) or (bounds.hi is not None and first > bounds.hi):
            continue
        with mapped(f.path) as buf:
            units = buf[:count * CQ_UNIT_SIZE].view(_CQ_DTYPE)
            units = units[:_written_units(units)]
            offset = units["offset"].astype(np.int64)
            size = units["size"].astype(np.int64)
            tags = units["tags_code"].astype(np.int64) if tag_codes is not None else None
        bad = np.flatnonzero((offset < 0) | (size <= 0))
        end = int(bad[0]) if len(bad) else len(offset)  # the first empty unit ends the written part
        keep = np.ones(end, bool)
        keep &= ~((offset[:end] == 0) & (size[:end] == _CQ_FILLER_SIZE))
        if bounds.bounded:
            keep &= bounds.mask(first + np.arange(end, dtype=np.int64))
        if push.commitlog_offset.bounded:
            keep &= push.commitlog_offset.mask(offset[:end])
        if tags is not None and f.topic != _SCHEDULE_TOPIC:
            keep &= np.isin(tags[:end], tag_codes)
        chunks.append(offset[:end][keep])
    if not chunks:
        return np.empty(0, np.int64)
    return sorted_unique(np.concatenate(chunks))


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values, ascending. np.unique hashes integer arrays first (numpy >= 2.3), ~5x slower than a sort
    for the 10^5 consume-queue offsets of a topic, a cost the planning worker pays on every pushed query."""
    values = np.sort(values)
    if len(values) > 1:
        values = values[np.concatenate(([True], values[1:] != values[:-1]))]
    return values


def _written_units(units: np.ndarray) -> int:
    """How many units are written: units are appended in order into a zero-filled file, so the written ones are a
    prefix; a binary search on "size set" finds its end without reading the (usually much longer) empty tail.
    The caller still stops at the first empty unit inside the prefix."""
    lo, hi = 0, len(units)
    while lo < hi:
        mid = (lo + hi) // 2
        if units[mid]["size"] != 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


def group_by_file(layout: StoreLayout, offsets: np.ndarray, per_set: int) -> list[RecordSet]:
    """Sorted global offsets -> RecordSets of at most `per_set` positions, per commit-log file; offsets outside
    the files (deleted or never written) are dropped."""
    files = layout.commit_log_files
    if not files or not len(offsets):
        return []
    bases = np.array([base for base, _, _ in files], np.int64)
    ends = bases + np.array([size for _, _, size in files], np.int64)
    which = np.searchsorted(bases, offsets, side="right") - 1
    valid = (which >= 0) & (offsets < ends[np.maximum(which, 0)])
    offsets, which = offsets[valid], which[valid]
    sets = []
    for k in np.unique(which):
        base, path, _ = files[int(k)]
        positions = offsets[which == k] - base
        for start in range(0, len(positions), per_set):
            sets.append(RecordSet(path, base, positions[start:start + per_set].copy()))
    return sets


def read_records(record_sets: tuple[RecordSet, ...], options: DecodeOptions,
                 batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator:
    """RecordBatches of the complete records at the given positions (others are skipped)."""
    ensure_loaded()
    for rs in record_sets:
        with mapped(rs.path) as buf:
            for start in range(0, len(rs.positions), batch_rows):
                positions = rs.positions[start:start + batch_rows]
                out = np.empty((len(RECORD_FIELDS), len(positions)), np.int64)
                count = records_at(buf, rs.base, positions, out)
                if count:
                    batch = decode_messages(buf, rs.base, Records(*out[:, :count]), options)
                    if batch.num_rows:
                        yield batch
