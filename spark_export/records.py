"""Locating complete commit-log records in a byte range, vectorised.

Record starts are found by scanning for the magic code and checking each candidate's own PHYSICALOFFSET field (a
record stores its global offset, so a candidate is real iff that field equals its position) and the chain of
TOTALSIZEs. The chain stops at a zero TOTALSIZE, a BLANK end-of-file marker, a size whose recomputed length disagrees
with TOTALSIZE (a record still being written), or a record that ends past the end of the file (a truncated copy).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from spark_export.arrow_util import be32, be_int

__all__ = ["MAGIC_V1", "MAGIC_V2", "BLANK_MAGIC", "BORN_V6", "STORE_V6", "ChainEnd", "ChainScan", "Records",
           "locate_records", "record_headers"]

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB: two-byte topic length
BLANK_MAGIC = -875286124  # 0xCBD43194
_MAGIC_B0, _MAGIC_B1, _MAGIC_B2 = 0xDA, 0xA3, 0x20
_MAGIC_B3 = (0xA7, 0xAB)
MIN_RECORD_SIZE = 91  # IPv4 hosts, V1, empty body/topic/properties
BORN_V6 = 0x10
STORE_V6 = 0x20
_SCAN_CHUNK = 4 << 20  # bytes of record starts per scan window (and per RecordBatch): small enough that a
# window's bytes and its temporaries stay in the CPU caches between the passes over it (16 MiB was ~25% slower)


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
_HEAD_SIZE = _HEAD.itemsize  # 88 < MIN_RECORD_SIZE: a candidate's header always lies inside the buffer


def record_headers(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The 88-byte headers at `pos` (each pos + 88 <= len(buf)) as a _HEAD array: one gather for all fields."""
    if not buf.flags.c_contiguous:
        buf = np.ascontiguousarray(buf)
    view = np.ndarray((len(buf) - _HEAD_SIZE + 1,), dtype=f"V{_HEAD_SIZE}", buffer=buf, strides=(1,))
    return view[pos].view(_HEAD)


_FIELDS = ("pos", "size", "sysflag", "body_pos", "body_len", "topic_pos", "topic_len", "props_pos", "props_len")


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

    @staticmethod
    def empty() -> "Records":
        e = np.empty(0, np.int64)
        return Records(e, e, e, e, e, e, e, e, e)


def _candidates(buf: np.ndarray, base: int, lo: int, hi: int) -> Records:
    """Self-consistent records whose start lies in [lo, hi), sorted by position.

    A candidate has the magic code, its own global offset in PHYSICALOFFSET, and lengths (body, topic,
    properties) that add up to its TOTALSIZE inside the buffer.
    """
    n = len(buf)
    top = min(hi, n - MIN_RECORD_SIZE + 1)
    if top <= lo:
        return Records.empty()
    p = np.flatnonzero(buf[lo + 4: top + 4] == _MAGIC_B0).astype(np.int64, copy=False)
    if len(p) == 0:
        return Records.empty()
    p += lo
    head = record_headers(buf, p)
    size = head["size"].astype(np.int64)
    magic = head["magic"]
    ok = ((magic == MAGIC_V1) | (magic == MAGIC_V2)) & (head["physical_offset"] == p + base)
    ok &= (size >= MIN_RECORD_SIZE) & (p + size <= n)
    sysflag = head["sysflag"].astype(np.int64)
    body_len = head["v4_body_length"].astype(np.int64)
    v2 = magic == MAGIC_V2
    if not ok.all():
        keep = np.flatnonzero(ok)
        p, size, sysflag, body_len, v2 = p[keep], size[keep], sysflag[keep], body_len[keep], v2[keep]
        if len(p) == 0:
            return Records.empty()
    v6 = (sysflag & (BORN_V6 | STORE_V6)) != 0
    if v6.any():
        hosts = np.where(sysflag & BORN_V6, 20, 8) + np.where(sysflag & STORE_V6, 20, 8)
        body_pos = p + 72 + hosts
        body_len[v6] = be32(buf, np.minimum(body_pos[v6] - 4, n - 4))
    else:
        body_pos = p + (72 + 16)
    topic_width = v2.astype(np.int64) + 1
    tpos = body_pos + body_len
    end = p + size
    ok = (body_len >= 0) & (tpos + topic_width + 2 <= end)
    if not ok.all():
        keep = np.flatnonzero(ok)
        p, size, sysflag, body_pos, body_len, v2, topic_width, tpos, end = (
            a[keep] for a in (p, size, sysflag, body_pos, body_len, v2, topic_width, tpos, end))
    if v2.any():
        topic_len = np.where(v2, be_int(buf, np.minimum(tpos, n - 2), 2), be_int(buf, tpos, 1))
    else:
        topic_len = be_int(buf, tpos, 1)
    topic_pos = tpos + topic_width
    props_pos = topic_pos + topic_len + 2
    props_len = be_int(buf, np.minimum(props_pos, end) - 2, 2)
    ok = (topic_len >= 0) & (props_pos + props_len == end) & (props_len >= 0)
    records = Records(p, size, sysflag, body_pos, body_len, topic_pos, topic_len, props_pos, props_len)
    return records if ok.all() else records.take(np.flatnonzero(ok))


class ChainScan:
    """The chain of records starting at `begin`, for records that start before `end`, window by window.

    Iterating yields :class:`Records` (one per scan window of about 4 MiB, in order); afterwards `end` is the
    position where the following record would start and `reason` a :class:`ChainEnd` value.
    buf is the whole file (np.uint8, usually over an mmap), base its global offset (the file name).
    synced=True: `begin` is a record start (or the file start). synced=False: begin anywhere; the chain starts
    at the first real record at or after it (used for byte-range splits).
    """

    def __init__(self, buf: np.ndarray, base: int, begin: int, end: int | None = None, *, synced: bool = True,
                 max_records: int | None = None, window: int = _SCAN_CHUNK) -> None:
        self.buf, self.base, self.begin = buf, base, begin
        self.stop = len(buf) if end is None else min(end, len(buf))
        self.synced, self.max_records, self.window = synced, max_records, window
        self.end: int | None = None
        self.reason: str | None = None

    def __iter__(self) -> Iterator[Records]:
        buf, base, stop = self.buf, self.base, self.stop
        pos: int | None = self.begin if self.synced else None
        lo = self.begin
        count = 0
        while lo < stop:
            hi = min(lo + self.window, stop)
            cand = _candidates(buf, base, lo, hi)
            if pos is None:
                if len(cand) == 0:
                    lo = hi
                    continue
                pos = int(cand.pos[0])
            starts, sizes = cand.pos, cand.size
            picks: list[np.ndarray] = []
            done = False
            while pos < hi:
                i = int(np.searchsorted(starts, pos))
                if i == len(starts) or starts[i] != pos:
                    done = True  # no record where the chain continues
                    break
                following = starts[i:] + sizes[i:]
                breaks = np.flatnonzero(following[:-1] != starts[i + 1:])
                k = int(breaks[0]) + 1 if len(breaks) else len(following)
                if self.max_records is not None and count + k >= self.max_records:
                    k = self.max_records - count
                    done = True
                picks.append(np.arange(i, i + k))
                count += k
                pos = int(following[k - 1])
                if done:
                    break
            if len(picks) == 1 and len(picks[0]) == len(cand):
                records = cand
            else:
                records = cand.take(np.concatenate(picks)) if picks else Records.empty()
            if done or pos >= stop or not self._record_at(pos):
                records = self._finish(records, pos)
                if len(records):
                    yield records
                return
            if len(records):
                yield records
            lo = max(hi, pos)
        if pos is None:  # no record starts in [begin, stop)
            self.end, self.reason = stop, (ChainEnd.LIMIT if stop < len(buf) else ChainEnd.EOF)
        else:
            self._finish(Records.empty(), pos)

    def _record_at(self, pos: int) -> bool:
        return pos < len(self.buf) and len(_candidates(self.buf, self.base, pos, pos + 1)) > 0

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


