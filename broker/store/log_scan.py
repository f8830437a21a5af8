"""Walking the commit log for recovery: record chains, resynchronisation after damage, unreadable regions.

A record start is recognised by its magic and by PHYSICALOFFSET equal to its own position. After a damaged
record the walk searches forward for the next such start (a C-speed ``find`` of the magic on the mapping), so
damage in the middle of the log costs the damaged bytes only, never the acknowledged records after them: the
damaged range becomes an *unreadable region* that is reported, and only damage with nothing valid after it (a
torn tail) ends the log.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from protocol.message import BLANK_MAGIC, MAGIC_V1, MAGIC_V2, check_record, record_names_problem_at

from .mapped_file import data_ranges

if TYPE_CHECKING:  # pragma: no cover
    from .commit_log import CommitLog

_LONG = struct.Struct(">q")
_SIZE_MAGIC = struct.Struct(">ii")
_MAGIC_PREFIX = struct.pack(">i", MAGIC_V1)[:3]  # V1 and V2 differ in their last byte only
_MAGIC_LAST = frozenset({MAGIC_V1 & 0xFF, MAGIC_V2 & 0xFF})
_CHUNK = 1 << 20
_ZEROS = bytes(_CHUNK)


@dataclass(frozen=True)
class Region:
    """Unreadable commit-log bytes [start, end) followed by valid records."""

    start: int
    end: int
    reason: str

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass
class ScanResult:
    end: int  # where the valid data ends (the next record goes there)
    regions: list[Region] = field(default_factory=list)
    records: int = 0


def record_size_at(cl: CommitLog, offset: int, verify_crc: bool) -> int:
    """TOTALSIZE of the valid record starting at global ``offset`` (its PHYSICALOFFSET must match), else 0."""
    mf = cl.mfq.find(offset)
    if mf is None:
        return 0
    pos = offset - mf.file_from_offset
    r = check_record(mf.mm, pos, cl.file_size, verify_crc)
    if r <= 0 or _LONG.unpack_from(mf.mm, pos + 28)[0] != offset:
        return 0
    return r


def _non_zero_chunks(mm, start: int, stop: int):
    """[a, b) chunks of [start, stop) that hold a non-zero byte (comparing 1 MiB at a time is far cheaper than
    searching zeros for the magic)."""
    pos = start
    while pos < stop:
        end = min(stop, (pos // _CHUNK + 1) * _CHUNK)
        if mm[pos:end] != _ZEROS[:end - pos]:
            yield pos, end
        pos = end


def find_record_start(cl: CommitLog, first: int, limit: int, verify_crc: bool) -> int | None:
    """The lowest global offset in [first, limit) where a valid record starts, None if there is none."""
    fsize = cl.file_size
    for mf in list(cl.mfq.files):
        base = mf.file_from_offset
        if base + fsize <= first:
            continue
        if base >= limit:
            return None
        mm = mf.mm
        lowest = max(0, first - base)
        for data_start, data_stop in data_ranges(mf.path, lowest, min(fsize, limit - base)):
            for chunk_start, stop in _non_zero_chunks(mm, data_start, data_stop):
                pos = max(lowest, chunk_start - 8)  # a record's size field may begin with zero bytes
                while pos < stop:
                    i = mm.find(_MAGIC_PREFIX, pos + 4, stop + 4)
                    if i < 0:
                        break
                    q = i - 4
                    if (q + 36 <= fsize and mm[i + 3] in _MAGIC_LAST
                            and _LONG.unpack_from(mm, q + 28)[0] == base + q
                            and check_record(mm, q, fsize, verify_crc) > 0):
                        return base + q
                    pos = q + 1
    return None


def describe_damage(cl: CommitLog, offset: int, verify_crc: bool) -> str:
    """Why the record at ``offset`` does not check out (for the log line)."""
    mf = cl.mfq.find(offset)
    if mf is None:
        return "missing commit log file"
    pos = offset - mf.file_from_offset
    head = mf.mm[pos:pos + 8]
    if not any(head):
        return "zero bytes where a record should start"
    if len(head) < 8:
        return "truncated record"
    total, magic = _SIZE_MAGIC.unpack(head)
    if magic not in (MAGIC_V1, MAGIC_V2, BLANK_MAGIC):
        return "bad magic code"
    names = record_names_problem_at(mf.mm, pos, cl.file_size)
    if names is not None:
        return f"a record that is no message of this store: {names}"
    if verify_crc and check_record(mf.mm, pos, cl.file_size, False) > 0:
        if _LONG.unpack_from(mf.mm, pos + 28)[0] != offset:
            return "record claims another position"
        return "body CRC mismatch"
    return "inconsistent record sizes (%d bytes claimed)" % total


def scan(cl: CommitLog, start: int, verify_crc: bool, stop: int | None = None,
         trusted_end: int | None = None) -> ScanResult:
    """Walk records from ``start`` (a record boundary) up to ``stop`` (default: the end of the last file).

    Damage followed by a valid record becomes a Region and the walk goes on after it. Damage with nothing valid
    after it ends the log there (a torn tail), unless ``trusted_end`` says the data up to it was complete (a
    clean shutdown recorded it): then the damage up to ``trusted_end`` is a Region too and the end stays.
    """
    files = cl.mfq.files
    result = ScanResult(start)
    if not files:
        return result
    fsize = cl.file_size
    limit = stop if stop is not None else files[-1].end_offset
    cur = start
    records = 0
    while cur < limit:
        mf = cl.mfq.find(cur)
        if mf is not None:
            base = mf.file_from_offset
            mm = mf.mm
            pos = cur - base
            flimit = min(fsize, limit - base)
            r = 0
            while pos < flimit:
                r = check_record(mm, pos, fsize, verify_crc)
                if r > 0 and _LONG.unpack_from(mm, pos + 28)[0] == base + pos:
                    pos += r
                    records += 1
                    continue
                break
            else:
                cur = base + pos
                continue
            if r < 0:  # BLANK marker: the file is complete
                cur = base + fsize
                continue
            cur = base + pos
        reason = describe_damage(cl, cur, verify_crc)
        nxt = find_record_start(cl, cur + 1, limit, verify_crc)
        if nxt is None:
            if trusted_end is not None and cur < trusted_end:
                result.regions.append(Region(cur, trusted_end, reason))
                cur = trusted_end
            break
        result.regions.append(Region(cur, nxt, reason))
        cur = nxt
    result.end = cur
    result.records = records
    return result
