"""Index files (§6.5): hash index from ``topic#key`` to commit-log offsets.

Layout: 40-byte header, hashSlotNum int32 slots (newest entry number of the bucket),
indexNum 20-byte entries (keyHash, phyOffset, timeDiff seconds, previous entry).
Files are named by local creation time ``yyyyMMddHHmmssSSS``; a new one starts when
the current one is full.
"""

from __future__ import annotations

import logging
import mmap
import errno
import os
import struct
import time
from itertools import groupby
from operator import itemgetter

from protocol.hashing import index_key_hash, java_string_hash

from .mapped_file import _allocate, fdatasync_path, remove_file, unmap

log = logging.getLogger(__name__)

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = 40
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = 20
_INT_MAX = 0x7FFFFFFF
_MASK32 = 0xFFFFFFFF
_P4 = 31 ** 4
_CACHE_LIMIT = 200_000
_head_of = itemgetter(slice(None, -4))  # key -> all but its last 4 characters


class KeyHasher:
    """``index_key_hash(topic + "#" + key)`` computed incrementally.

    Keys (UNIQ_KEYs above all) share long prefixes: the hash of ``topic#`` + all but the
    last 4 characters is cached, the last 4 characters are a cached chunk hash. Exact for
    ASCII keys; other keys use the reference implementation.
    """

    def __init__(self) -> None:
        self._heads: dict[str, dict[str, int]] = {}
        self._chunks: dict[str, int] = {}

    def _head_cache(self, topic: str) -> dict[str, int]:
        heads = self._heads.get(topic)
        if heads is None:
            heads = self._heads[topic] = {}
        return heads

    def __call__(self, topic: str, key: str) -> int:
        """Index hash of one key (the single-message path): the head's hash from the cache, the last 4 characters'
        computed in place (for unique keys a cached tail mostly misses, and the cache is memory a cold call
        touches)."""
        heads = self._heads.get(topic)  # only ASCII topics get a head cache
        if heads is None or len(key) < 4 or not key.isascii():
            return self.hash_many(topic, (key,))[0]
        head = key[:-4]
        a, b, c, d = key[-4:].encode()
        h = ((heads.get(head) or self._head_hash(topic, head)) * _P4 + a * 29791 + b * 961 + c * 31 + d) & _MASK32
        return h if h < 0x80000000 else (0x100000000 - h) & _INT_MAX

    def hash_many(self, topic: str, keys) -> list[int]:
        """Index hashes of ``topic#key`` for every key (one call per batch).

        Keys are taken in runs that share a head (UNIQ_KEYs of one batch mostly do): the run's head hash is looked up
        once, then one comprehension adds the cached tail hashes (a miss, or a cached 0, computes the value).
        ``(2**32 - h) & INT_MAX`` is Java's ``Math.abs`` of a negative int32, including RocketMQ's
        Integer.MIN_VALUE -> 0 rule (2**31 masks to 0)."""
        if not keys:
            return []
        if not topic.isascii() or min(map(len, keys)) < 4 or not "".join(keys).isascii():
            return [index_key_hash(topic + "#" + key) for key in keys]
        heads = self._heads.get(topic)
        if heads is None:
            heads = self._head_cache(topic)
        cached_tail = self._chunks.get
        tail_hash = self._tail_hash
        out: list[int] = []
        for head, run in groupby(keys, _head_of):
            head_part = heads.get(head)
            if head_part is None:
                head_part = self._head_hash(topic, head)
            head_part *= _P4
            out += [h if (h := (head_part + (cached_tail(key[-4:]) or tail_hash(key[-4:]))) & _MASK32) < 0x80000000
                    else (0x100000000 - h) & _INT_MAX for key in run]
        return out

    def _head_hash(self, topic: str, head: str) -> int:
        heads = self._heads[topic]
        if len(heads) >= _CACHE_LIMIT:
            heads.clear()
        value = heads[head] = java_string_hash(topic + "#" + head) & _MASK32
        return value

    def _tail_hash(self, tail: str) -> int:
        chunks = self._chunks
        if len(chunks) >= _CACHE_LIMIT:
            chunks.clear()
        value = chunks[tail] = java_string_hash(tail) & _MASK32
        return value


def index_file_name(now_ms: int | None = None) -> str:
    """Local time ``yyyyMMddHHmmssSSS``."""
    if now_ms is None:
        now_ms = time.time_ns() // 1_000_000
    secs, ms = divmod(now_ms, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(secs)) + "%03d" % ms


_ENTRY_CHUNK = 1 << 20  # entries region allocated a MiB at a time


def _allocate_range(path: str, start: int, end: int) -> None:
    """fallocate [start, end) of an existing file; file systems without fallocate keep it sparse."""
    if end <= start:
        return
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, start, end - start)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
    finally:
        os.close(fd)


class IndexFile:
    """One index file. Header fields are written through to the mapping after each put."""

    def __init__(self, path: str, slot_num: int, index_num: int, *, create: bool) -> None:
        self.path = path
        size = HEADER_SIZE + slot_num * 4 + index_num * ENTRY_SIZE
        if create:
            # Sparse: the header and hash slots get their blocks now (they are written anywhere), the entries
            # region just ahead of the entries written (a few MB instead of ~400 MB for an idle broker).
            _allocate(path, size, preallocate=False)
            _allocate_range(path, 0, HEADER_SIZE + slot_num * 4)
        elif os.path.getsize(path) < HEADER_SIZE:
            raise ValueError("index file %s is too short" % path)
        else:
            size = os.path.getsize(path)
        fd = os.open(path, os.O_RDWR)
        try:
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.size = size
        if create:
            self.slot_num = slot_num
            self.index_num = index_num
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
            self.hash_slot_count = 0
            self.index_count = 1
            self.write_header()
        else:
            (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
             self.hash_slot_count, self.index_count) = HEADER.unpack_from(self.mm, 0)
            self.slot_num = slot_num
            self.index_num = (size - HEADER_SIZE - slot_num * 4) // ENTRY_SIZE
            if self.index_num <= 0 or (size - HEADER_SIZE - slot_num * 4) % ENTRY_SIZE:
                raise ValueError("index file %s does not match hash slot count %d" % (path, slot_num))
            if self.index_count < 1:
                self.index_count = 1
            self.index_count = min(self.index_count, self.index_num)
        self.entries_base = HEADER_SIZE + self.slot_num * 4
        self.flushed_count = self.index_count
        # Bytes known to have disk blocks (a loaded file: assume all of what is written plus one chunk).
        self.allocated = self.entries_base if create else min(
            self.size, self.entries_base + (self.index_count + 1) * ENTRY_SIZE)

    def _ensure_entries(self, count: int) -> None:
        """Disk blocks for entries [0, count) before they are written (OSError ENOSPC on a full disk)."""
        end = self.entries_base + count * ENTRY_SIZE
        if end <= self.allocated:
            return
        end = min(self.size, max(end, self.allocated + _ENTRY_CHUNK))
        _allocate_range(self.path, self.allocated, end)
        self.allocated = end

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def write_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                         self.end_phy_offset, self.hash_slot_count, self.index_count)

    def _time_diff(self, store_timestamp: int) -> int:
        """Seconds since the file's first entry, clamped to [0, INT_MAX] (0 while the file is empty)."""
        begin = self.begin_timestamp
        if begin <= 0:
            return 0
        diff = (store_timestamp - begin) // 1000
        return diff if 0 <= diff <= _INT_MAX else (0 if diff < 0 else _INT_MAX)

    def _entries_written(self, old_count: int, new_count: int, new_slots: int, first_phys: int, last_phys: int,
                         store_timestamp: int) -> None:
        """Header bookkeeping after entries ``old_count .. new_count-1`` were written (a file's first entry sets
        the begin fields)."""
        if old_count <= 1:
            self.begin_phy_offset = first_phys
            self.begin_timestamp = store_timestamp
        self.index_count = new_count
        self.hash_slot_count += new_slots
        self.end_phy_offset = last_phys
        self.end_timestamp = store_timestamp
        self.write_header()

    def put_many(self, hashes: list[int], phys: list[int], store_timestamp: int, start: int = 0) -> int:
        """Add entries ``hashes[start:]`` (parallel ``phys``) stored at ``store_timestamp``.

        Returns the index one past the last entry written (stops when the file is full)."""
        mm = self.mm
        old_count = count = self.index_count
        limit = self.index_num
        slot_num = self.slot_num
        base = self.entries_base
        slot_unpack = SLOT.unpack_from
        slot_pack = SLOT.pack_into
        entry_pack = ENTRY.pack_into
        time_diff = self._time_diff(store_timestamp)
        new_slots = 0
        i = start
        n = len(hashes)
        self._ensure_entries(min(limit, count + n - start))
        while i < n and count < limit:
            key_hash = hashes[i]
            slot_pos = HEADER_SIZE + (key_hash % slot_num) * 4
            prev = slot_unpack(mm, slot_pos)[0]
            if prev <= 0 or prev > count:
                prev = 0
                new_slots += 1
            entry_pack(mm, base + count * ENTRY_SIZE, key_hash, phys[i], time_diff, prev)
            slot_pack(mm, slot_pos, count)
            count += 1
            i += 1
        if i > start:
            self._entries_written(old_count, count, new_slots, phys[start], phys[i - 1], store_timestamp)
        return i

    def put_one(self, key_hash: int, phys: int, store_timestamp: int) -> None:
        """put_many for one entry (the caller checked the file is not full), its time diff and header bookkeeping
        (``_time_diff``, ``_entries_written``) written out in place: this runs once per message stored."""
        mm = self.mm
        count = self.index_count
        if self.entries_base + (count + 1) * ENTRY_SIZE > self.allocated:
            self._ensure_entries(count + 1)
        slot_pos = HEADER_SIZE + (key_hash % self.slot_num) * 4
        prev = SLOT.unpack_from(mm, slot_pos)[0]
        new_slot = prev <= 0 or prev > count
        begin = self.begin_timestamp
        if begin <= 0:
            diff = 0
        else:
            diff = (store_timestamp - begin) // 1000
            if not 0 <= diff <= _INT_MAX:
                diff = 0 if diff < 0 else _INT_MAX
        ENTRY.pack_into(mm, self.entries_base + count * ENTRY_SIZE, key_hash, phys, diff, 0 if new_slot else prev)
        SLOT.pack_into(mm, slot_pos, count)
        if count <= 1:
            self.begin_phy_offset = phys
            self.begin_timestamp = store_timestamp
        self.index_count = count = count + 1
        if new_slot:
            self.hash_slot_count += 1
        self.end_phy_offset = phys
        self.end_timestamp = store_timestamp
        HEADER.pack_into(mm, 0, self.begin_timestamp, store_timestamp, self.begin_phy_offset, phys,
                         self.hash_slot_count, count)

    def time_matched(self, begin: int, end: int) -> bool:
        return begin <= self.end_timestamp and end >= self.begin_timestamp

    def select(self, key_hash: int, max_num: int, begin: int, end: int, out: list[int]) -> None:
        """Append matching phys offsets (newest first) to ``out`` until it holds ``max_num``."""
        count = self.index_count
        if count <= 1:
            return
        mm = self.mm
        nxt = SLOT.unpack_from(mm, HEADER_SIZE + (key_hash % self.slot_num) * 4)[0]
        if nxt <= 0 or nxt > count:
            return
        base = self.entries_base
        begin_ts = self.begin_timestamp
        steps = 0
        while len(out) < max_num and steps < count:
            steps += 1
            h, phy, diff, prev = ENTRY.unpack_from(mm, base + nxt * ENTRY_SIZE)
            if diff < 0:
                break
            time_read = begin_ts + diff * 1000
            if h == key_hash and begin <= time_read <= end:
                out.append(phy)
            if prev <= 0 or prev > count or prev == nxt or time_read < begin:
                break
            nxt = prev

    def sync_to_disk(self) -> None:
        fdatasync_path(self.path)

    def close(self) -> None:
        unmap(self.mm)

    def destroy(self) -> None:
        self.close()
        remove_file(self.path)


class IndexService:
    """All index files of the store, oldest first; the last one takes new entries."""

    def __init__(self, directory: str, slot_num: int, index_num: int) -> None:
        self.directory = directory
        self.slot_num = slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        self.hasher = KeyHasher()

    def load(self) -> None:
        if not os.path.isdir(self.directory):
            return
        for name in sorted(os.listdir(self.directory)):
            if not (name.isdigit() and len(name) == 17):
                continue
            path = os.path.join(self.directory, name)
            try:
                self.files.append(IndexFile(path, self.slot_num, self.index_num, create=False))
            except ValueError as exc:
                log.error("ignoring index file %s: %s", path, exc)

    @property
    def last_phy_offset(self) -> int:
        """endPhyOffset of the newest file: records below it are already indexed."""
        return self.files[-1].end_phy_offset if self.files else 0

    def _new_file(self) -> IndexFile:
        os.makedirs(self.directory, exist_ok=True)
        now_ms = time.time_ns() // 1_000_000
        if self.files:  # names must sort after the previous file
            last_name = os.path.basename(self.files[-1].path)
            while index_file_name(now_ms) <= last_name:
                now_ms += 1
        name = index_file_name(now_ms)
        while os.path.exists(os.path.join(self.directory, name)):
            now_ms += 1
            name = index_file_name(now_ms)
        f = IndexFile(os.path.join(self.directory, name), self.slot_num, self.index_num, create=True)
        self.files.append(f)
        return f

    def put(self, hashes: list[int], phys: list[int], store_timestamp: int) -> None:
        """Index entries (parallel lists), rolling to new files as they fill up."""
        done = 0
        n = len(hashes)
        while done < n:
            f = self.files[-1] if self.files else None
            if f is None or f.is_full:
                f = self._new_file()
            done = f.put_many(hashes, phys, store_timestamp, done)

    def put_one(self, key_hash: int, phys: int, store_timestamp: int) -> None:
        files = self.files
        f = files[-1] if files else None
        if f is None or f.index_count >= f.index_num:  # full
            f = self._new_file()
        f.put_one(key_hash, phys, store_timestamp)

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commit-log offsets of records indexed under ``topic#key`` within [begin, end] (ms)."""
        key_hash = self.hasher(topic, key)
        out: list[int] = []
        for f in reversed(self.files):
            if len(out) >= max_num:
                break
            if f.time_matched(begin, end):
                f.select(key_hash, max_num, begin, end, out)
            if f.begin_timestamp < begin:
                break
        return out

    @property
    def last_update_timestamp(self) -> int:
        return self.files[-1].end_timestamp if self.files else 0

    def dirty_files(self) -> list[IndexFile]:
        return [f for f in self.files if f.flushed_count != f.index_count]

    def delete_below(self, commit_log_min: int) -> int:
        """Delete files whose entries all point below ``commit_log_min`` (never the newest)."""
        count = 0
        while len(self.files) > 1 and self.files[0].end_phy_offset < commit_log_min:
            self.files.pop(0).destroy()
            count += 1
        return count

    def close(self) -> None:
        for f in self.files:
            f.close()
