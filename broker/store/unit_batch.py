"""A pull's consume-queue slice read as one batch (the unfiltered and TAG-hash-filtered pull paths).

The units are unpacked with a few bulk struct calls into columns (commit-log offsets, sizes, tags codes); the
count, byte and tag limits are applied with C-level passes over those columns (accumulate, bisect, compress), and
the selected records are cut into runs of adjacent commit-log records: one file lookup, one header check and one
view per run instead of per record. Anything unusual in the slice (a recovery filler, a record that is gone or is
not what its unit says, a run that does not end on a record) returns None, and the store walks the units one by
one (``MessageStore._read_units``), which knows every such case. Both give the same answer for the same slice.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from itertools import accumulate, compress, islice
from operator import add, mul, ne, sub
from typing import Any, Callable

from protocol.message import BLANK_MAGIC, MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE

from .consume_queue import FILLER_SIZE, UNIT_SIZE

__all__ = ["ends_on_record", "read_unit_batch", "unit_columns"]

_SIZE_MAGIC = struct.Struct(">ii")
_CHUNK_UNITS = 256


def _structs(unit_format: str) -> tuple[struct.Struct, list[tuple[int, struct.Struct]]]:
    """One struct for _CHUNK_UNITS units and one for each of 128, 64, ..., 1 units (any remainder: at most 8)."""
    return (struct.Struct(">" + unit_format * _CHUNK_UNITS),
            [(n, struct.Struct(">" + unit_format * n)) for n in (128, 64, 32, 16, 8, 4, 2, 1)])


_ALL = _structs("qiq")
_NO_TAGS = _structs("qi8x")


def _unpack(units: Any, count: int, structs: tuple[struct.Struct, list[tuple[int, struct.Struct]]]) -> list[int]:
    """The values of the first ``count`` units, flat (bulk unpacks)."""
    chunk, powers = structs
    flat: list[int] = []
    full = count // _CHUNK_UNITS * _CHUNK_UNITS * UNIT_SIZE
    if full:
        for values in chunk.iter_unpack(units[:full]):
            flat += values
    pos = full
    rest = count % _CHUNK_UNITS
    for n, st in powers:
        if rest >= n:
            flat += st.unpack_from(units, pos)
            pos += n * UNIT_SIZE
            rest -= n
    return flat


def unit_columns(units: Any, count: int) -> tuple[list[int], list[int], list[int]]:
    """(commit-log offsets, sizes, tags codes) of the first ``count`` units of ``units``."""
    flat = _unpack(units, count, _ALL)
    return flat[0::3], flat[1::3], flat[2::3]


def ends_on_record(mf: Any, end: int) -> bool:
    """File position ``end`` is where the written data ends or a record (or the end-of-file marker) starts."""
    if end == mf.wrote_position:
        return True
    if end + 8 > mf.wrote_position:
        return False
    rec_size, magic = _SIZE_MAGIC.unpack_from(mf.mm, end)
    return rec_size > 0 and (magic == MAGIC_V1 or magic == MAGIC_V2 or magic == BLANK_MAGIC)


def read_unit_batch(mfq: Any, units: Any, count: int, max_nums: int, max_bytes: int,
                    tag_filter: Callable[[int], bool] | None) -> tuple[list, int, int, int, int, int] | None:
    """What ``MessageStore._read_units`` returns for these ``count`` units (buffers, count, bytes, units examined, 0
    missing, 0 fillers), computed per batch; None when the slice needs the per-unit walk.

    The limits are the walk's: stop before a unit once something was taken and either ``max_nums`` records were
    taken or that unit's size would pass ``max_bytes`` (checked for units the tag filter drops too); the first
    record is always taken. ``max_bytes`` is below a filler's size (the store caps it at 128 MiB)."""
    if count <= 0:
        return [], 0, 0, 0, 0, 0
    if tag_filter is None:
        flat = _unpack(units, count, _NO_TAGS)
        phys = flat[0::2]
        sizes = flat[1::2]
        if min(sizes) < MIN_RECORD_SIZE:
            return None
        first = phys[0]
        starts = list(accumulate(sizes, initial=first))  # where each record starts if they are all adjacent
        taken = min(max(bisect_right(starts, first + max_bytes, 1) - 1, 1), max_nums, count)
        # a filler is never taken: the cut is before it (its size passes any max_bytes) unless it is the first
        if sizes[0] >= FILLER_SIZE or (taken < count and taken < max_nums and sizes[taken] >= FILLER_SIZE):
            return None
        total = starts[taken] - first
        if taken < count:
            del phys[taken:], sizes[taken:]
        if phys == starts[:taken]:  # one run of adjacent records (their units in log order, as always)
            buffers = _views(mfq, [first], [first + total], [sizes[0]], [taken])
            return None if buffers is None else (buffers, taken, total, taken, 0, 0)
        # runs: within a run of adjacent records a record's offset minus where it would start if all were
        # adjacent is one constant; it grows from run to run (found by bisection, each run checked whole)
        drift = list(map(sub, phys, starts))
        run_starts = []
        run_stops = []
        a = 0
        while a < taken:
            value = drift[a]
            b = bisect_right(drift, value, a + 1, taken)
            if drift[a:b].count(value) != b - a:
                return _runs(mfq, phys, sizes, taken, total, taken)
            run_starts.append(a)
            run_stops.append(b)
            a = b
        buffers = _views(mfq, [phys[i] for i in run_starts], [starts[i] + drift[i - 1] for i in run_stops],
                         [sizes[i] for i in run_starts], list(map(sub, run_stops, run_starts)))
        return None if buffers is None else (buffers, taken, total, taken, 0, 0)
    phys, sizes, tags = unit_columns(units, count)
    if max(sizes) >= FILLER_SIZE or min(sizes) < MIN_RECORD_SIZE:
        return None
    mask = list(map(tag_filter, tags))
    selected = list(compress(range(count), mask))
    if not selected:
        return [], 0, 0, count, 0, 0
    # the unit after the max_nums-th taken one stops the batch
    examined = selected[max_nums - 1] + 1 if len(selected) >= max_nums else count
    taken = bisect_left(selected, examined)
    taken_sizes = list(compress(sizes, mask))
    del taken_sizes[taken:]
    taken_after = list(accumulate(taken_sizes))
    if taken_after[-1] + max(sizes) > max_bytes:
        # ... or the first unit after the first taken one whose size would pass max_bytes (taken or not)
        masked = list(map(mul, sizes, map(bool, mask)))
        after = list(accumulate(masked))  # bytes taken up to and including each unit
        start = selected[0] + 1
        if start < examined:
            would_be = map(add, islice(after, start, examined), map(sub, islice(sizes, start, examined),
                                                                     islice(masked, start, examined)))
            examined = next(compress(range(start, examined), map(max_bytes.__lt__, would_be)), examined)
        taken = bisect_left(selected, examined)
        del taken_sizes[taken:]
    total = sum(taken_sizes)
    taken_phys = list(compress(phys, mask))
    del taken_phys[taken:]
    return _runs(mfq, taken_phys, taken_sizes, taken, total, examined)


def _runs(mfq: Any, phys: list[int], sizes: list[int], taken: int, total: int,
          examined: int) -> tuple[list, int, int, int, int, int] | None:
    """The records at ``phys`` cut into runs of adjacent records, one view each."""
    ends = list(map(add, phys, sizes))
    run_starts = list(compress(range(1, taken), map(ne, islice(phys, 1, None), ends)))
    run_stops = run_starts + [taken]
    run_starts.insert(0, 0)
    buffers = _views(mfq, [phys[i] for i in run_starts], [ends[i - 1] for i in run_stops],
                     [sizes[i] for i in run_starts], list(map(sub, run_stops, run_starts)))
    return None if buffers is None else (buffers, taken, total, examined, 0, 0)


def _views(mfq: Any, starts: list[int], ends: list[int], first_sizes: list[int], lengths: list[int]) -> list | None:
    """One view per run [start, end) of ``length`` records; None when a run is not inside one file's written data,
    does not start with a record of its first unit's size or does not end on a record."""
    buffers: list = []
    append = buffers.append
    head = _SIZE_MAGIC.unpack_from
    mf = mm = view = None
    base = lo = hi = 0
    for start_offset, end_offset, first_size, length in zip(starts, ends, first_sizes, lengths):
        if start_offset < lo or end_offset > hi:  # not in the file of the run before
            mf = mfq.find(start_offset)
            if mf is None:
                return None
            base = lo = mf.file_from_offset
            hi = base + mf.wrote_position
            if end_offset > hi:
                return None
            mm = mf.mm
            view = mf.view
        pos = start_offset - base
        rec_size, magic = head(mm, pos)
        if rec_size != first_size or (magic != MAGIC_V1 and magic != MAGIC_V2):
            return None
        end = end_offset - base
        if length > 1 and not ends_on_record(mf, end):
            return None
        append(view[pos:end])
    return buffers
