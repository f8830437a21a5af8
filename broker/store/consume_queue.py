"""ConsumeQueue: per topic/queue index of 20-byte units (§6.4).

Unit = commit-log offset (int64), record size (int32), tagsCode (int64, sign-extended).
Logical offset q lives at byte q*20; files are named by their first byte offset.
"""

from __future__ import annotations

import logging
import os
import struct

from .mapped_file import MappedFile, MappedFileQueue

log = logging.getLogger(__name__)

UNIT_SIZE = 20
CQ_UNIT = struct.Struct(">qiq")
FILLER_SIZE = 0x7FFFFFFF

_bulk_structs: dict[int, struct.Struct] = {}


def bulk_unit_struct(count: int) -> struct.Struct:
    """A Struct packing ``count`` consecutive units in one call (cached)."""
    st = _bulk_structs.get(count)
    if st is None:
        st = struct.Struct(">" + "qiq" * count)
        if len(_bulk_structs) < 1024:
            _bulk_structs[count] = st
    return st


def round_cq_file_size(size: int) -> int:
    """File size rounded up to a whole number of units."""
    return max(UNIT_SIZE, -(-size // UNIT_SIZE) * UNIT_SIZE)


class ConsumeQueue:
    """One topic/queue. ``max_offset`` = next logical offset; ``min_offset`` = first valid one."""

    def __init__(self, root_dir: str, topic: str, queue_id: int, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = round_cq_file_size(file_size)
        self.units_per_file = self.file_size // UNIT_SIZE
        self.root_dir = root_dir
        self.directory = os.path.join(root_dir, topic, str(queue_id))
        # Sparse files, blocks allocated ahead of the writer (reserve): an auto-created queue with a few messages
        # must not cost a whole pre-allocated file of disk. Mapped detached: a topic holds no descriptor, and
        # creating one does not zero-fill its whole file through read-ahead (mapped_file.map_detached).
        self.mfq = MappedFileQueue(self.directory, self.file_size, preallocate=False, detached=True)
        self.min_offset = 0
        self.max_offset = 0
        # Write cursor into the last file.
        self._cur: MappedFile | None = None
        self.damaged = False  # a file was cut short: recovery re-dispatches what it lost

    # -- loading / recovery -----------------------------------------------------
    def load(self) -> None:
        """Map the files and find the end of the written units (binary search, units are a prefix)."""
        cut_at = self.mfq.load("consume queue file", "mappedFileSizeConsumeQueue",
                               "delete %s to rebuild the consume queues from the commit log" % self.root_dir,
                               align=UNIT_SIZE)
        self.damaged = cut_at is not None
        files = self.mfq.files
        while files:
            last = files[-1]
            written = self._count_written_units(last)
            if written == 0 and len(files) > 1:
                log.info("removing empty trailing consume queue file %s", last.path)
                files.pop().destroy()
                continue
            last.wrote_position = last.flushed_position = written * UNIT_SIZE
            break
        self._reset_bounds()

    def _count_written_units(self, mf: MappedFile) -> int:
        lo, hi = 0, self.units_per_file
        view = mf.mm
        while lo < hi:
            mid = (lo + hi) // 2
            phys, size, _tags = CQ_UNIT.unpack_from(view, mid * UNIT_SIZE)
            if size > 0 and phys >= 0:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _reset_bounds(self) -> None:
        files = self.mfq.files
        if not files:
            self.min_offset = self.max_offset = 0
            self._cur = None
            return
        self._cur = files[-1]
        self.max_offset = self._cur.max_offset // UNIT_SIZE
        first_start = files[0].file_from_offset // UNIT_SIZE
        self.min_offset = max(self.min_offset, first_start)
        if self.min_offset > self.max_offset:
            self.min_offset = self.max_offset

    def newest_record(self, max_back: int = 64) -> tuple[int, int] | None:
        """(commit-log offset, size) of the newest record this queue points to, passing over at most
        ``max_back`` units that read as missing; None when there is none."""
        off = self.max_offset - 1
        low = max(self.min_offset, off - max_back)
        while off >= low:
            unit = self.get_unit(off)
            if unit is None:
                return None
            if unit[1] != FILLER_SIZE:
                return unit[0], unit[1]
            off -= 1
        return None

    def offsets_pointing_into(self, start: int, end: int) -> list[int]:
        """Logical offsets of the units whose record starts in commit-log [start, end) (binary search on the
        commit-log offsets, which grow along the queue)."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self.get_unit(mid)
            if unit is not None and unit[0] < start:
                lo = mid + 1
            else:
                hi = mid
        found = []
        while lo < self.max_offset:
            unit = self.get_unit(lo)
            if unit is None or unit[0] >= end:
                break
            if unit[0] >= start:
                found.append(lo)
            lo += 1
        return found

    def mark_missing(self, offset: int) -> None:
        """Make the unit read as missing (size FILLER, commit-log offset kept so offsets stay ordered): its
        record is unreadable."""
        mf = self.mfq.find(offset * UNIT_SIZE)
        if mf is None or offset >= self.max_offset:
            return
        pos = offset * UNIT_SIZE - mf.file_from_offset
        phys, _size, tags = CQ_UNIT.unpack_from(mf.mm, pos)
        CQ_UNIT.pack_into(mf.mm, pos, phys, FILLER_SIZE, tags)
        mf.flushed_position = min(mf.flushed_position, pos)  # let the flush service sync it

    def last_unit(self) -> tuple[int, int, int] | None:
        if self.max_offset <= self.min_offset:
            return None
        return self.get_unit(self.max_offset - 1)

    def truncate_beyond(self, phys_end: int) -> int:
        """Drop trailing units whose record ends after ``phys_end``; returns how many were dropped."""
        dropped = 0
        new_max = self.max_offset
        while new_max > self.min_offset:
            unit = self.get_unit(new_max - 1)
            if unit is None or unit[0] + unit[1] <= phys_end or unit[1] == FILLER_SIZE:
                break
            new_max -= 1
            dropped += 1
        if dropped:
            self.truncate_to(new_max)
        return dropped

    def truncate_to(self, offset: int) -> None:
        """Make ``offset`` the new max offset (zero units at/after it)."""
        self.mfq.truncate_to(offset * UNIT_SIZE)
        files = self.mfq.files
        if files and files[-1].wrote_position == 0 and len(files) > 1 and \
                files[-1].file_from_offset == offset * UNIT_SIZE:
            files.pop().destroy()
        self._reset_bounds()
        self.min_offset = min(self.min_offset, self.max_offset)

    def correct_min_offset(self, commit_log_min: int) -> None:
        """min_offset := first unit whose record is still in the commit log."""
        files = self.mfq.files
        if not files:
            self.min_offset = self.max_offset
            return
        for mf in files:
            start = mf.file_from_offset // UNIT_SIZE
            count = mf.wrote_position // UNIT_SIZE
            lo, hi = 0, count
            view = mf.mm
            while lo < hi:
                mid = (lo + hi) // 2
                phys, size, _t = CQ_UNIT.unpack_from(view, mid * UNIT_SIZE)
                if phys < commit_log_min or (size == FILLER_SIZE and phys == 0):  # head fillers
                    lo = mid + 1
                else:
                    hi = mid
            if lo < count:
                self.min_offset = start + lo
                return
        self.min_offset = self.max_offset

    # -- writing ----------------------------------------------------------------
    def _roll(self) -> MappedFile:
        start = self._cur.end_offset if self._cur is not None else self.max_offset * UNIT_SIZE
        self._cur = self.mfq.find(start) or self.mfq.create_file(start)
        return self._cur

    def reserve(self, count: int) -> None:
        """Create the files and disk blocks the next ``count`` units need, so that a full disk fails
        the put before anything is written (raises StoreDiskFullError)."""
        cur = self._cur
        if cur is None:
            cur = self._roll()
        pos = cur.wrote_position
        cur.ensure_allocated(min(self.file_size, pos + count * UNIT_SIZE))
        remaining = count - (self.file_size - pos) // UNIT_SIZE
        start = cur.end_offset
        while remaining > 0:
            mf = self.mfq.find(start) or self.mfq.create_file(start)
            mf.ensure_allocated(min(remaining, self.units_per_file) * UNIT_SIZE)
            remaining -= self.units_per_file
            start += self.file_size

    def has_room_for_one(self) -> bool:
        """The current file has disk space for one more unit (an append needs neither a new file nor blocks)."""
        cur = self._cur
        return cur is not None and cur.wrote_position + UNIT_SIZE <= cur.allocated_position

    def append(self, phys: int, size: int, tags_code: int) -> None:
        """Append one unit at max_offset."""
        cur = self._cur
        if cur is None or cur.wrote_position >= self.file_size:
            cur = self._roll()
        CQ_UNIT.pack_into(cur.mm, cur.wrote_position, phys, size, tags_code)
        cur.wrote_position += UNIT_SIZE
        self.max_offset += 1

    def append_many(self, phys_list: list[int], size_list: list[int], tags_list: list[int]) -> None:
        """Append consecutive units; one bulk pack per file touched."""
        total = len(phys_list)
        done = 0
        while done < total:
            cur = self._cur
            if cur is None or cur.wrote_position >= self.file_size:
                cur = self._roll()
            room = (self.file_size - cur.wrote_position) // UNIT_SIZE
            n = min(room, total - done)
            if n == 1:
                CQ_UNIT.pack_into(cur.mm, cur.wrote_position, phys_list[done], size_list[done], tags_list[done])
            else:
                end = done + n
                flat = [0] * (3 * n)
                flat[0::3] = phys_list[done:end]
                flat[1::3] = size_list[done:end]
                flat[2::3] = tags_list[done:end]
                bulk_unit_struct(n).pack_into(cur.mm, cur.wrote_position, *flat)
            cur.wrote_position += n * UNIT_SIZE
            self.max_offset += n
            done += n

    def put_at(self, queue_offset: int, phys: int, size: int, tags_code: int) -> None:
        """Write a unit at an explicit offset (recovery re-dispatch). Fills a gap at the start of
        a fresh queue with filler units, as RocketMQ does."""
        if queue_offset == self.max_offset and self._cur is not None:
            self.reserve(1)
            self.append(phys, size, tags_code)
            return
        if queue_offset < self.max_offset:
            return  # already present
        byte_pos = queue_offset * UNIT_SIZE
        if not self.mfq.files:
            file_start = byte_pos - byte_pos % self.file_size
            mf = self.mfq.create_file(file_start)
            mf.ensure_allocated(byte_pos - file_start + UNIT_SIZE)
            pos = 0
            while file_start + pos < byte_pos:  # filler units before the first real one
                CQ_UNIT.pack_into(mf.mm, pos, 0, FILLER_SIZE, 0)
                pos += UNIT_SIZE
            mf.wrote_position = pos
            self._cur = mf
            self.max_offset = self.min_offset = queue_offset
            self.append(phys, size, tags_code)
            return
        log.warning("consume queue %s/%d: gap before offset %d (max %d)", self.topic, self.queue_id,
                    queue_offset, self.max_offset)
        self.reserve(queue_offset - self.max_offset + 1)
        while self.max_offset < queue_offset:  # keep units contiguous so reads never stop early; the fillers
            self.append(phys, FILLER_SIZE, 0)  # carry this record's offset: phys 0 would read as a head filler
            # (correct_min_offset) and hide every unit before the gap
        self.append(phys, size, tags_code)

    # -- reading ----------------------------------------------------------------
    def file_for(self, offset: int) -> MappedFile | None:
        return self.mfq.find(offset * UNIT_SIZE)

    def get_unit(self, offset: int) -> tuple[int, int, int] | None:
        """(phys, size, tags_code) of one unit, None if not present."""
        if offset < 0 or offset >= self.max_offset:
            return None
        mf = self.mfq.find(offset * UNIT_SIZE)
        if mf is None:
            return None
        return CQ_UNIT.unpack_from(mf.mm, offset * UNIT_SIZE - mf.file_from_offset)

    def next_file_start(self, offset: int) -> int:
        """First logical offset of the file after the one holding ``offset``."""
        return offset + self.units_per_file - offset % self.units_per_file

    # -- deletion / flush -------------------------------------------------------
    def delete_expired(self, commit_log_min: int) -> int:
        """Delete leading files whose units all point below ``commit_log_min`` (never the last)."""
        files = self.mfq.files
        count = 0
        for mf in files[:-1]:
            last_pos = mf.wrote_position - UNIT_SIZE
            if last_pos < 0:
                break
            phys = CQ_UNIT.unpack_from(mf.mm, last_pos)[0]
            if phys < commit_log_min:  # the newest unit points below: all of them do
                count += 1
            else:
                break
        for mf in self.mfq.remove_first(count):
            mf.destroy()
        self.correct_min_offset(commit_log_min)
        return count

    def dirty_files(self) -> list[MappedFile]:
        return [mf for mf in self.mfq.files if mf.flushed_position < mf.wrote_position]

    def destroy(self) -> None:
        self.mfq.destroy_all()
        self._cur = None
        self.min_offset = self.max_offset = 0
        try:
            os.rmdir(os.path.dirname(self.directory))
        except OSError:
            pass

    def close(self) -> None:
        self.mfq.close()
