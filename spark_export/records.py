"""Locating complete commit-log records in a byte range.

The record chain is walked by a compiled loop (spark_export.kernels): a record is taken when it has the magic
code, its own global offset in PHYSICALOFFSET and lengths (body, topic, properties) that add up to its TOTALSIZE.
The chain stops at a zero TOTALSIZE, a BLANK end-of-file marker, a size whose recomputed length disagrees with
TOTALSIZE (a record still being written), or a record that ends past the end of the file (a truncated copy).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from spark_export.arrow_util import be32, be_int
from spark_export.schema import DEFAULT_BATCH_ROWS
from spark_export.kernels import (RECORD_FIELDS, WALK_FULL, check_record, ensure_loaded, find_first_record,
                                   walk_chain)

__all__ = ["MAGIC_V1", "MAGIC_V2", "BLANK_MAGIC", "DEFAULT_BATCH_ROWS", "BORN_V6", "STORE_V6", "ChainEnd", "ChainScan",
           "Records", "locate_records", "record_headers"]

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB: two-byte topic length
BLANK_MAGIC = -875286124  # 0xCBD43194
BORN_V6 = 0x10
STORE_V6 = 0x20
# while its columns are decoded (32768 was ~20% slower for topic+tags); bigger batches save little in Spark


class ChainEnd:
    """Why a record chain stopped (see :func:`locate_records`)."""

    LIMIT = "limit"  # reached the requested end position
    BLANK = "blank"  # BLANK end-of-file marker: the file is finished
    EOF = "eof"      # the last record ends exactly at the end of the file
    DATA = "data"    # zeros, garbage, a torn or truncated record: no more complete data (yet)


# The first 88 bytes of a record. Offsets up to born_timestamp are fixed; the rest (v4_*) hold those fields
# only when both hosts are IPv4 (8 bytes each), the common layout; IPv6 records are read field by field.
_HEAD = np.dtype([
    ("size", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
    ("queue_offset", ">i8"), ("physical_offset", ">i8"), ("sysflag", ">i4"), ("born_timestamp", ">i8"),
    ("v4_born_host", ">i8"), ("v4_store_timestamp", ">i8"), ("v4_store_host", ">i8"),
    ("v4_reconsume_times", ">i4"), ("v4_prepared_offset", ">i8"), ("v4_body_length", ">i4"),
])
_HEAD_SIZE = _HEAD.itemsize  # 88 < a record's minimum size (91): a record's header lies inside the buffer


def record_headers(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The 88-byte headers at `pos` (each pos + 88 <= len(buf)) as a _HEAD array: one gather for all fields."""
    if not buf.flags.c_contiguous:
        buf = np.ascontiguousarray(buf)
    view = np.ndarray((len(buf) - _HEAD_SIZE + 1,), dtype=f"V{_HEAD_SIZE}", buffer=buf, strides=(1,))
    return view[pos].view(_HEAD)


_FIELDS = RECORD_FIELDS


@dataclass(slots=True)
class Records:
    """Records found in a scan window: file positions plus the lengths read while checking them (int64)."""

    pos: np.ndarray
    size: np.ndarray
    sysflag: np.ndarray
    body_pos: np.ndarray
    body_len: np.ndarray
    topic_pos: np.ndarray
    topic_len: np.ndarray
    props_pos: np.ndarray
    props_len: np.ndarray

    def __len__(self) -> int:
        return len(self.pos)

    def take(self, index: np.ndarray | slice) -> "Records":
        return Records(*(getattr(self, f)[index] for f in _FIELDS))

    @property
    def ipv4_only(self) -> bool:
        return not bool((self.sysflag & (BORN_V6 | STORE_V6)).any())


class ChainScan:
    """The chain of records starting at `begin`, for records that start before `end`, batch by batch.

    Iterating yields :class:`Records` (at most `batch` records each, in order); afterwards `end` is the position
    where the following record would start and `reason` a :class:`ChainEnd` value.
    buf is the whole file (np.uint8, usually over an mmap), base its global offset (the file name).
    synced=True: `begin` is a record start (or the file start). synced=False: begin anywhere; the chain starts
    at the first real record at or after it (used for byte-range splits).
    """

    def __init__(self, buf: np.ndarray, base: int, begin: int, end: int | None = None, *, synced: bool = True,
                 max_records: int | None = None, batch: int = DEFAULT_BATCH_ROWS) -> None:
        self.buf, self.base, self.begin = buf, base, begin
        self.stop = len(buf) if end is None else min(end, len(buf))
        self.synced, self.max_records, self.batch = synced, max_records, max(1, batch)
        self.end: int | None = None
        self.reason: str | None = None

    def __iter__(self) -> Iterator[Records]:
        ensure_loaded()
        buf, base, stop = self.buf, self.base, self.stop
        pos = self.begin
        if not self.synced:
            pos = int(find_first_record(buf, base, self.begin, stop, np.empty((len(RECORD_FIELDS), 1), np.int64)))
            if pos < 0:  # no record starts in [begin, stop)
                self.end, self.reason = stop, (ChainEnd.LIMIT if stop < len(buf) else ChainEnd.EOF)
                return
        remaining = self.max_records
        while True:
            cap = self.batch if remaining is None else max(0, min(self.batch, remaining))
            out = np.empty((len(RECORD_FIELDS), cap), np.int64)
            count, pos, status = walk_chain(buf, base, pos, stop, out)
            records = Records(*out[:, :count])
            if remaining is not None:
                remaining -= count
            if status == WALK_FULL and (remaining is None or remaining > 0):
                yield records
                continue
            records = self._finish(records, int(pos))
            if len(records):
                yield records
            return

    def _record_at(self, pos: int) -> bool:
        return bool(check_record(self.buf, self.base, pos, np.empty((len(RECORD_FIELDS), 1), np.int64), 0))

    def _finish(self, records: Records, pos: int) -> Records:
        """The chain stopped at `pos`: a limit with another record there, or the end of the written data.

        On a live store the last record may be mid-append: a writer appends a record front to back, so a
        torn record has a zero tail while its lengths may already be consistent. The last record is kept
        only if its final byte is set (when it has properties) and its body CRC matches.
        """
        buf = self.buf
        if pos >= len(buf):
            self.end, self.reason = pos, ChainEnd.EOF
        elif self._record_at(pos):
            self.end, self.reason = pos, ChainEnd.LIMIT
        else:
            self.end, self.reason = pos, _reason_at(buf, pos)
            if self.reason == ChainEnd.DATA and len(records):
                last = int(records.pos[-1])
                if not _record_complete(buf, last, pos - last):
                    records = records.take(slice(0, len(records) - 1))
                    self.end = last
        return records


def locate_records(buf: np.ndarray, base: int, begin: int, end: int | None = None, *, synced: bool = True,
                   max_records: int | None = None) -> tuple[np.ndarray, int, str]:
    """Record starts (file positions) of the chain starting at `begin` (see :class:`ChainScan`).

    Returns (starts, next position, ChainEnd reason); `next position` is where the following record would start.
    """
    scan = ChainScan(buf, base, begin, end, synced=synced, max_records=max_records)
    starts = [r.pos for r in scan]
    return (np.concatenate(starts) if starts else np.empty(0, np.int64)), scan.end, scan.reason


def _record_complete(buf: np.ndarray, start: int, size: int) -> bool:
    p = np.array([start], np.int64)
    sysflag = int(be32(buf, p + 36)[0])
    body_pos = start + 72 + (20 if sysflag & BORN_V6 else 8) + (20 if sysflag & STORE_V6 else 8)
    body_len = int(be32(buf, np.array([body_pos - 4]))[0])
    if (zlib.crc32(buf[body_pos:body_pos + body_len]) & 0x7FFFFFFF) != int(be32(buf, p + 8)[0]):
        return False
    end = start + size
    v2 = int(be32(buf, p + 4)[0]) == MAGIC_V2
    tpos = body_pos + body_len
    topic_len = int(be_int(buf, np.array([tpos]), 2 if v2 else 1)[0])
    props_len = int(be_int(buf, np.array([tpos + (2 if v2 else 1) + topic_len]), 2)[0])
    return props_len == 0 or int(buf[end - 1]) != 0


def _reason_at(buf: np.ndarray, pos: int) -> str:
    if pos >= len(buf):
        return ChainEnd.EOF
    if pos + 8 <= len(buf) and int(be32(buf, np.array([pos + 4]))[0]) == BLANK_MAGIC:
        return ChainEnd.BLANK
    return ChainEnd.DATA


