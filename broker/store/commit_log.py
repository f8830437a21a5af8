"""CommitLog: append-only records (§6.3) in pre-allocated mapped files.

Records are packed straight into the mapping. The common case (IPv4 hosts, topic
≤ 127 bytes) uses one precompiled struct for the 88-byte fixed part plus slice copies;
everything else goes through ``protocol.message.pack_record_into``. A record never
spans two files: when record + 8 bytes do not fit, an 8-byte BLANK marker closes the
file and the record starts the next one.
"""

from __future__ import annotations

import logging
import struct
import zlib
from bisect import bisect_right

from protocol.message import (
    MAGIC_V1,
    MAGIC_V2,
    check_record,
    pack_blank_marker_into,
    pack_record_into,
)

from .mapped_file import MappedFile, MappedFileQueue

log = logging.getLogger(__name__)

BLANK_MARKER_SIZE = 8
WARM_AHEAD = 4 << 20  # bytes pre-written with zeros ahead of the write position (see MappedFile.warm)
FIXED_V4V4 = struct.Struct(">iiiiiqqiq8sq8siqi")  # TOTALSIZE .. BODYLENGTH with IPv4 hosts (88 bytes)
_SIZE_MAGIC = struct.Struct(">ii")
_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_MASK31 = 0x7FFFFFFF
_NOT_V6 = ~0x30
_BORN_V6 = 0x10
_MAX_OFFSET = 1 << 62


def store_timestamp_position(sys_flag: int) -> int:
    """Offset of STORETIMESTAMP inside a record (depends on the born-host width)."""
    return 48 + (20 if sys_flag & _BORN_V6 else 8)


class CommitLog:
    """The commit-log files plus the write cursor."""

    def __init__(self, directory: str, file_size: int, store_host: bytes, preallocate: bool = False) -> None:
        # Files are sparse and get disk blocks just ahead of the writer (preallocate=True, warmMapedFileEnable:
        # the whole file at creation); either way a full disk refuses a put before any byte is written.
        self.mfq = MappedFileQueue(directory, file_size, preallocate=preallocate)
        self.file_size = file_size
        self.store_host = store_host
        self._cur: MappedFile | None = None
        self._empty_start = 0  # where the first file starts when none exists yet
        # Unreadable [start, end) ranges found by recovery, sorted; records there are never served.
        self.corrupt_regions: list[tuple[int, int]] = []
        self.cut_at: int | None = None  # where a last file cut short ended (it was extended with zeros)

    # -- state ------------------------------------------------------------------
    def load(self) -> None:
        """Map the files (StoreFileError for a file of the wrong size that cannot be recovered)."""
        self.cut_at = self.mfq.load(
            "commit log file", "mappedFileSizeCommitLog",
            "restore it from a backup, or move it and the files after it out of %s to start without their "
            "messages" % self.mfq.directory)

    def in_corrupt_region(self, phys: int) -> bool:
        """Whether ``phys`` lies in a region recovery found unreadable."""
        idx = bisect_right(self.corrupt_regions, (phys, _MAX_OFFSET)) - 1
        return idx >= 0 and phys < self.corrupt_regions[idx][1]

    @property
    def min_offset(self) -> int:
        first = self.mfq.first
        return first.file_from_offset if first is not None else self._empty_start

    @property
    def max_offset(self) -> int:
        """Global offset where the next record goes (end of valid data)."""
        cur = self._cur
        if cur is not None:
            return cur.max_offset
        last = self.mfq.last
        return last.max_offset if last is not None else self._empty_start

    def set_end(self, end_offset: int) -> None:
        """Cut everything from ``end_offset`` on (recovery) and place the write cursor there."""
        self.mfq.truncate_to(end_offset)
        files = self.mfq.files
        if files:
            for mf in files[:-1]:
                mf.wrote_position = mf.flushed_position = self.file_size
            last = files[-1]
            last.wrote_position = last.flushed_position = end_offset - last.file_from_offset
            self._cur = last
        else:
            self._cur = None
            self._empty_start = end_offset - end_offset % self.file_size

    # -- replication ------------------------------------------------------------
    def append_raw(self, offset: int, data: bytes) -> None:
        """A slave writes bytes of its master's log at the same offset (same files, same positions). Raises
        ValueError when offset is not this log's end (a non-empty log) or the data would cross a file end."""
        fsize = self.file_size
        empty = not self.mfq.files
        if not empty and offset != self.max_offset:
            raise ValueError(f"replicated data at offset {offset}, but this log ends at {self.max_offset}")
        start = offset - offset % fsize
        if offset - start + len(data) > fsize:
            raise ValueError(f"replicated data at {offset} ({len(data)} bytes) crosses the end of a file")
        mf = self.mfq.find(offset)
        if mf is None:
            if empty:
                self._empty_start = start
            mf = self.mfq.create_file(start)
        pos = offset - mf.file_from_offset
        if data:
            mf.ensure_allocated(pos + len(data))
            mf.mm[pos:pos + len(data)] = data
        if pos + len(data) > mf.wrote_position:
            mf.wrote_position = pos + len(data)
        self._cur = mf

    def cut_tail(self, offset: int) -> None:
        """A slave drops replicated bytes from ``offset`` on (a record it refused): zeroed, the next frame is written
        there. Unlike ``set_end`` nothing before ``offset`` is marked flushed."""
        self.mfq.truncate_to(offset)
        self._cur = self.mfq.find(offset) or (self.mfq.files[-1] if self.mfq.files else None)

    # -- writing ----------------------------------------------------------------
    def _next_file(self) -> MappedFile:
        """Switch to the file after the current one, creating it if needed."""
        files = self.mfq.files
        cur = self._cur
        if cur is None:
            start = self._empty_start if not files else files[-1].end_offset
        else:
            start = cur.end_offset
        for mf in files:
            if mf.file_from_offset == start:
                self._cur = mf
                return mf
        self._cur = self.mfq.create_file(start)
        return self._cur

    def _ensure_space(self, sizes: list[int]) -> None:
        """Create every file the batch will roll into, with disk blocks for every byte it will write, before
        writing anything (all-or-nothing)."""
        cur = self._cur
        if cur is None:
            cur = self._next_file()
        pos = cur.wrote_position
        start = cur.file_from_offset
        fsize = self.file_size
        needed: dict[int, int] = {}
        for size in sizes:
            if pos + size + BLANK_MARKER_SIZE > fsize:
                needed[start] = fsize
                start += fsize
                pos = 0
                if self.mfq.find(start) is None:
                    self.mfq.create_file(start)
            pos += size
        needed[start] = max(needed.get(start, 0), pos)
        for file_start, end in needed.items():
            mf = self.mfq.find(file_start)
            if mf is not None:
                mf.ensure_allocated(end)

    def append_batch(self, msgs, props_list: list[bytes], sizes: list[int], total: int, topic: str,
                     topic_bytes: bytes, queue_id: int, first_queue_offset: int, queue_offset_step: int,
                     store_timestamp: int, fast: bool) -> list[int]:
        """Write the records; returns their physical offsets. Raises StoreDiskFullError before writing
        anything if a needed file cannot be created."""
        cur = self._cur
        fsize = self.file_size
        if cur is None or cur.wrote_position + total + BLANK_MARKER_SIZE > fsize:
            self._ensure_space(sizes)
            return self._append_rolling(msgs, props_list, sizes, topic_bytes, queue_id, first_queue_offset,
                                        queue_offset_step, store_timestamp, fast)
        if not fast:
            if cur.wrote_position + total > cur.allocated_position:
                cur.ensure_allocated(cur.wrote_position + total)
            return self._append_rolling(msgs, props_list, sizes, topic_bytes, queue_id, first_queue_offset,
                                        queue_offset_step, store_timestamp, fast)
        # Fast path: the whole batch fits the current file and uses the IPv4/V1 layout.
        pos = cur.wrote_position
        if pos + total > cur.warm_position:
            cur.ensure_allocated(pos + total)  # StoreDiskFullError before anything is written
            cur.warm(pos + total + WARM_AHEAD)
        mm = cur.mm
        base = cur.file_from_offset
        pack_fixed = FIXED_V4V4.pack_into
        pack_short = _SHORT.pack_into
        crc32 = zlib.crc32
        store_host = self.store_host
        topic_part = bytes((len(topic_bytes),)) + topic_bytes
        tp_len = len(topic_part)
        qoff = first_queue_offset
        phys_list = [0] * len(sizes)
        i = 0
        for m in msgs:
            body = m.body
            props = props_list[i]
            size = sizes[i]
            body_len = len(body)
            phys = base + pos
            phys_list[i] = phys
            pack_fixed(mm, pos, size, MAGIC_V1, crc32(body) & _MASK31, queue_id, m.flag, qoff, phys,
                       m.sys_flag & _NOT_V6, m.born_timestamp, m.born_host, store_timestamp, store_host,
                       m.reconsume_times, m.prepared_transaction_offset, body_len)
            p = pos + 88
            e = p + body_len
            mm[p:e] = body
            p = e + tp_len
            mm[e:p] = topic_part
            pack_short(mm, p, len(props))
            pos += size
            mm[p + 2:pos] = props
            qoff += queue_offset_step
            i += 1
        cur.wrote_position = pos
        return phys_list

    def append_one(self, m, props: bytes, size: int, topic_bytes: bytes, queue_id: int, queue_offset: int,
                   store_timestamp: int) -> int:
        """One IPv4/V1 record written to the current file; its physical offset, or -1 (nothing written) when the
        record and the end-of-file marker after it do not fit there (no current file: -1 too)."""
        cur = self._cur
        if cur is None:
            return -1
        pos = cur.wrote_position
        if pos + size + BLANK_MARKER_SIZE > self.file_size:
            return -1
        if pos + size > cur.warm_position:
            cur.ensure_allocated(pos + size)  # StoreDiskFullError before anything is written
            cur.warm(pos + size + WARM_AHEAD)
        mm = cur.mm
        body = m.body
        body_len = len(body)
        phys = cur.file_from_offset + pos
        FIXED_V4V4.pack_into(mm, pos, size, MAGIC_V1, zlib.crc32(body) & _MASK31, queue_id, m.flag, queue_offset,
                             phys, m.sys_flag & _NOT_V6, m.born_timestamp, m.born_host, store_timestamp,
                             self.store_host, m.reconsume_times, m.prepared_transaction_offset, body_len)
        p = pos + 88
        e = p + body_len
        mm[p:e] = body
        p = e + 1 + len(topic_bytes)
        mm[e] = len(topic_bytes)
        mm[e + 1:p] = topic_bytes
        end = pos + size
        _SHORT.pack_into(mm, p, len(props))
        mm[p + 2:end] = props
        cur.wrote_position = end
        return phys

    def _append_rolling(self, msgs, props_list, sizes, topic_bytes, queue_id, first_queue_offset,
                        queue_offset_step, store_timestamp, fast) -> list[int]:
        """General path: per-record space check with BLANK marker + roll, any host/topic layout."""
        fsize = self.file_size
        store_host = self.store_host
        cur = self._cur if self._cur is not None else self._next_file()
        phys_list = [0] * len(sizes)
        qoff = first_queue_offset
        for i, m in enumerate(msgs):
            size = sizes[i]
            if cur.wrote_position + size + BLANK_MARKER_SIZE > fsize:
                remaining = fsize - cur.wrote_position
                if remaining >= BLANK_MARKER_SIZE:
                    pack_blank_marker_into(cur.mm, cur.wrote_position, remaining)
                cur.wrote_position = fsize
                cur = self._next_file()
            pos = cur.wrote_position
            if pos + size > cur.warm_position:
                cur.warm(pos + size + WARM_AHEAD)
            phys = cur.file_from_offset + pos
            written = pack_record_into(
                cur.mm, pos, queue_id=queue_id, flag=m.flag, queue_offset=qoff, physical_offset=phys,
                sys_flag=m.sys_flag, born_timestamp=m.born_timestamp, born_host=m.born_host,
                store_timestamp=store_timestamp, store_host=store_host, reconsume_times=m.reconsume_times,
                prepared_transaction_offset=m.prepared_transaction_offset, body=m.body, topic=topic_bytes,
                properties=props_list[i])
            if written != size:  # pragma: no cover - size computation and packer disagree
                raise AssertionError("record size mismatch %d != %d" % (written, size))
            cur.wrote_position = pos + size
            phys_list[i] = phys
            qoff += queue_offset_step
        return phys_list

    # -- reading ----------------------------------------------------------------
    def view(self, phys: int, size: int) -> memoryview | None:
        """Zero-copy view of ``size`` bytes at ``phys`` (None if the file is gone or the range is invalid)."""
        mf = self.mfq.find(phys)
        if mf is None:
            return None
        pos = phys - mf.file_from_offset
        if pos + size > mf.wrote_position or size <= 0:
            return None
        return mf.view[pos:pos + size]

    def read_record(self, phys: int, size: int | None = None) -> bytes | None:
        """The raw record at ``phys`` (validated by magic and size, not in an unreadable region), or None."""
        mf = self.mfq.find(phys)
        if mf is None or (self.corrupt_regions and self.in_corrupt_region(phys)):
            return None
        pos = phys - mf.file_from_offset
        if pos + 8 > mf.wrote_position:
            return None
        total, magic = _SIZE_MAGIC.unpack_from(mf.mm, pos)
        if magic != MAGIC_V1 and magic != MAGIC_V2:
            return None
        if size is not None and size != total:
            return None
        if total <= 0 or pos + total > mf.wrote_position:
            return None
        return mf.mm[pos:pos + total]

    def store_timestamp_at(self, phys: int) -> int:
        """STORETIMESTAMP of the record at ``phys`` (-1 if unavailable)."""
        mf = self.mfq.find(phys)
        if mf is None:
            return -1
        pos = phys - mf.file_from_offset
        if pos + 88 > mf.wrote_position:
            return -1
        sys_flag = _INT.unpack_from(mf.mm, pos + 36)[0]
        return _LONG.unpack_from(mf.mm, pos + store_timestamp_position(sys_flag))[0]

    def first_store_timestamp(self, mf: MappedFile) -> int:
        """Store time of a file's first record (0 if it has no valid first record)."""
        if check_record(mf.mm, 0, self.file_size, False) <= 0:
            return 0
        sys_flag = _INT.unpack_from(mf.mm, 36)[0]
        return _LONG.unpack_from(mf.mm, store_timestamp_position(sys_flag))[0]

    # -- recovery ---------------------------------------------------------------
    def find_recover_start(self, timestamp: int) -> int:
        """Index of the newest file whose first record is older than ``timestamp`` (0 if none)."""
        files = self.mfq.files
        if timestamp <= 0:
            return 0
        for idx in range(len(files) - 1, -1, -1):
            ts = self.first_store_timestamp(files[idx])
            if 0 < ts <= timestamp:
                return idx
        return 0

    def iter_record_positions(self, start_offset: int, end_offset: int, verified_from: int | None = None):
        """Yield (file, position, size) of every record in [start_offset, end_offset), stepping over the
        unreadable regions recovery found. Records at or after ``verified_from`` were just checked by a scan of the
        log (recovery): there the chain is followed by TOTALSIZE and magic alone."""
        fsize = self.file_size
        regions = dict(self.corrupt_regions)
        mf = self.mfq.find(start_offset)
        if mf is None and regions.get(start_offset):
            start_offset = regions[start_offset]
            mf = self.mfq.find(start_offset)
        while mf is not None:
            pos = max(0, start_offset - mf.file_from_offset)
            limit = min(fsize, end_offset - mf.file_from_offset)
            mm = mf.mm
            next_start = mf.end_offset
            while pos < limit:
                if verified_from is not None and mf.file_from_offset + pos >= verified_from \
                        and pos + 8 <= limit and (not regions or mf.file_from_offset + pos not in regions):
                    r, magic = _SIZE_MAGIC.unpack_from(mm, pos)
                    if (magic == MAGIC_V1 or magic == MAGIC_V2) and 0 < r <= limit - pos:
                        yield mf, pos, r
                        pos += r
                        continue
                r = check_record(mm, pos, limit, False)
                if r <= 0:
                    skip_to = regions.get(mf.file_from_offset + pos) if r == 0 else None
                    if skip_to is not None and skip_to > mf.end_offset:
                        next_start = skip_to
                    elif skip_to is not None:
                        pos = skip_to - mf.file_from_offset
                        continue
                    break
                yield mf, pos, r
                pos += r
            if next_start >= end_offset:
                return
            start_offset = next_start
            mf = self.mfq.find(next_start)
            if mf is None:  # a missing file: go on with the next one that exists
                mf = next((f for f in self.mfq.files if f.file_from_offset > next_start), None)

    # -- deletion / flush -------------------------------------------------------
    def dirty_files(self) -> list[MappedFile]:
        return [mf for mf in self.mfq.files if mf.flushed_position < mf.wrote_position]

    def close(self) -> None:
        self.mfq.close()
