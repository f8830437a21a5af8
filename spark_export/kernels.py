"""Compiled loops (numba) for the two sequential parts of decoding a commit log.

Walking the record chain (each record's TOTALSIZE says where the next one starts) and finding a property in
a record's properties string (segments split on \\x02, a later duplicate wins) are inherently sequential, so
numpy can only do them by scanning every byte several times. These kernels do each in one pass over the bytes
they need, writing into numpy arrays that the caller turns into Arrow columns; no Python objects per record.

Compiled on first use in each process and cached on disk. Executors may run where neither this package's
directory nor a home directory is writable, and numba refuses to compile a cached function it has nowhere to
cache: so unless NUMBA_CACHE_DIR is already set, the cache goes to a per-user directory under the system's
temporary directory.
"""

from __future__ import annotations

import gc
import os
import tempfile

_USER = getattr(os, "getuid", lambda: "user")()
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"numba-cache-{_USER}"))

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

__all__ = ["RECORD_FIELDS", "MIN_RECORD_SIZE", "WALK_STOP", "WALK_FULL", "WALK_BROKEN", "check_record",
           "walk_chain", "records_at", "find_first_record", "find_property", "split_properties", "ensure_loaded"]

MIN_RECORD_SIZE = 91  # IPv4 hosts, V1, empty body/topic/properties
_MAGIC_V1 = -626843481  # 0xDAA320A7
_MAGIC_V2 = -626843477  # 0xDAA320AB: two-byte topic length
_BORN_V6 = 0x10
_STORE_V6 = 0x20

# rows of the array walk_chain fills, one column per record
RECORD_FIELDS = ("pos", "size", "sysflag", "body_pos", "body_len", "topic_pos", "topic_len", "props_pos",
                 "props_len")
WALK_STOP = 0    # the next record would start at or after `stop`
WALK_FULL = 1    # the output is full; call again from the returned position
WALK_BROKEN = 2  # no complete, self-consistent record where the chain continues

_CACHE = True


@njit(cache=_CACHE, inline="always")
def _be(buf, p, width):
    v = np.int64(0)
    for i in range(width):
        v = (v << 8) | np.int64(buf[p + i])
    if v >= np.int64(1) << (8 * width - 1):
        v -= np.int64(1) << (8 * width)
    return v


@njit(cache=_CACHE, inline="always")
def _be64(buf, p):
    hi = _be(buf, p, 4)
    lo = _be(buf, p + 4, 4) & 0xFFFFFFFF
    return (hi << 32) | lo


@njit(cache=_CACHE)
def check_record(buf, base, p, out, k):
    """True if a complete, self-consistent record starts at p; its lengths then go to out[:, k].

    Self-consistent: the magic code, its own global offset (base + p) in PHYSICALOFFSET, and body, topic and
    properties lengths that add up to TOTALSIZE inside the buffer. base < 0: the buffer is not a slice of a
    commit-log file (records a broker returned to a pull), so PHYSICALOFFSET is not checked against the position.
    """
    n = len(buf)
    if p < 0 or p + MIN_RECORD_SIZE > n:
        return False
    if buf[p + 4] != 0xDA:
        return False
    magic = _be(buf, p + 4, 4)
    if magic != _MAGIC_V1 and magic != _MAGIC_V2:
        return False
    size = _be(buf, p, 4)
    if size < MIN_RECORD_SIZE or p + size > n or (base >= 0 and _be64(buf, p + 28) != base + p):
        return False
    sysflag = _be(buf, p + 36, 4)
    hosts = (20 if sysflag & _BORN_V6 else 8) + (20 if sysflag & _STORE_V6 else 8)
    body_pos = p + 72 + hosts
    end = p + size
    if body_pos > end:
        return False
    body_len = _be(buf, body_pos - 4, 4)
    width = 2 if magic == _MAGIC_V2 else 1
    tpos = body_pos + body_len
    if body_len < 0 or tpos + width + 2 > end:
        return False
    topic_len = _be(buf, tpos, width)
    topic_pos = tpos + width
    props_pos = topic_pos + topic_len + 2
    if topic_len < 0 or props_pos > end:
        return False
    props_len = _be(buf, props_pos - 2, 2)
    if props_len < 0 or props_pos + props_len != end:
        return False
    out[0, k] = p
    out[1, k] = size
    out[2, k] = sysflag
    out[3, k] = body_pos
    out[4, k] = body_len
    out[5, k] = topic_pos
    out[6, k] = topic_len
    out[7, k] = props_pos
    out[8, k] = props_len
    return True


@njit(cache=_CACHE)
def walk_chain(buf, base, pos, stop, out):
    """Follow the chain from the record start `pos` while records start before `stop`, filling out[:, :count].

    Returns (count, next position, WALK_* status).
    """
    cap = out.shape[1]
    count = 0
    while pos < stop:
        if count == cap:
            return count, pos, WALK_FULL
        if not check_record(buf, base, pos, out, count):
            return count, pos, WALK_BROKEN
        pos += out[1, count]
        count += 1
    return count, pos, WALK_STOP


@njit(cache=_CACHE)
def records_at(buf, base, positions, out):
    """Check the records at the given file positions (e.g. from a consume queue or an index); the complete ones go
    to out[:, :count] in the order given. Returns count."""
    count = 0
    for i in range(len(positions)):
        if check_record(buf, base, positions[i], out, count):
            count += 1
    return count


@njit(cache=_CACHE)
def find_first_record(buf, base, begin, stop, scratch):
    """The first position in [begin, stop) where a complete, self-consistent record starts, or -1."""
    top = min(stop, len(buf) - MIN_RECORD_SIZE + 1)
    for p in range(max(begin, 0), top):
        if buf[p + 4] == 0xDA and check_record(buf, base, p, scratch, 0):
            return p
    return -1


@njit(cache=_CACHE)
def find_property(buf, props_pos, props_len, name, value_pos, value_len):
    """The value of property `name` in each record's properties (Java's rules), as positions into buf.

    Segments are split on \\x02 (a last segment without one still counts); a segment counts only when its first
    \\x01 has a non-empty name before it and a non-empty value after it; a later duplicate replaces an earlier
    one. value_pos[i] = -1 where the record has no such property. Returns how many records have it.
    """
    found = 0
    m = len(name)
    for i in range(len(props_pos)):
        seg = props_pos[i]
        end = seg + props_len[i]
        hit = -1
        hit_len = 0
        while seg < end:
            # a segment that starts with the name and \x01 (names hold neither \x01 nor \x02) is a candidate
            sep = seg + m
            same = sep < end and buf[sep] == 1
            j = 0
            while same and j < m:
                same = buf[seg + j] == name[j]
                j += 1
            seg_end = sep + 1 if same else seg
            while seg_end < end and buf[seg_end] != 2:
                seg_end += 1
            if same and seg_end - sep > 1:
                hit = sep + 1
                hit_len = seg_end - sep - 1
            seg = seg_end + 1
        value_pos[i] = hit
        value_len[i] = hit_len
        if hit >= 0:
            found += 1
    return found


@njit(cache=_CACHE, inline="always")
def _same_bytes(buf, a, b, length):
    for j in range(length):
        if buf[a + j] != buf[b + j]:
            return False
    return True


@njit(cache=_CACHE)
def split_properties(buf, props_pos, props_len, names, name_lens, entries, counts, picked):
    """Every record's properties as (key, value) entries with Java's rules (see find_property).

    entries[0..3, e] = key position, key length, value position, value length of entry e, records in order;
    a later duplicate name replaces the earlier entry (entries stay in order of last occurrence, so positions
    ascend). counts[i] = entries of record i. picked[k, i] = the entry of names[k] (first name_lens[k] bytes)
    in record i, or -1. entries needs a column per 3 bytes of properties. Returns the number of entries.
    """
    e = 0
    for i in range(len(props_pos)):
        seg = props_pos[i]
        end = seg + props_len[i]
        first = e
        while seg < end:
            seg_end = seg
            while seg_end < end and buf[seg_end] != 2:
                seg_end += 1
            sep = seg
            while sep < seg_end and buf[sep] != 1:
                sep += 1
            if sep > seg and seg_end - sep > 1:
                key_len = sep - seg
                for d in range(first, e):  # a duplicate name: drop the earlier entry
                    if entries[1, d] == key_len and _same_bytes(buf, entries[0, d], seg, key_len):
                        for m in range(d, e - 1):
                            for f in range(4):
                                entries[f, m] = entries[f, m + 1]
                        e -= 1
                        break
                entries[0, e] = seg
                entries[1, e] = key_len
                entries[2, e] = sep + 1
                entries[3, e] = seg_end - sep - 1
                e += 1
            seg = seg_end + 1
        counts[i] = e - first
        for k in range(len(name_lens)):
            picked[k, i] = -1
        for d in range(first, e):
            key_len = entries[1, d]
            for k in range(len(name_lens)):
                if key_len == name_lens[k]:
                    same = True
                    for j in range(key_len):
                        if buf[entries[0, d] + j] != names[k, j]:
                            same = False
                            break
                    if same:
                        picked[k, i] = d
    return e


_ready = False


def ensure_loaded() -> None:
    """Load (or compile) every kernel for the read-only byte buffers the reader passes, once per process, then
    move the objects that created out of the garbage collector's sight.

    Loading numba's compiler leaves ~100k long-lived objects, and a reused PySpark worker runs gc.collect()
    after every task: ~35 ms of CPU per task while the JVM needs those cores. Frozen objects are never
    scanned (nor freed; the garbage of the moment is collected first).
    """
    global _ready
    if _ready:
        return
    buf = np.frombuffer(bytes(MIN_RECORD_SIZE + 8), np.uint8)  # read-only, like an mmap
    out = np.empty((len(RECORD_FIELDS), 1), np.int64)
    positions = np.zeros(1, np.int64)
    check_record(buf, 0, 0, out, 0)
    walk_chain(buf, 0, 0, 0, out)
    records_at(buf, 0, positions, out)
    find_first_record(buf, 0, 0, 1, out)
    find_property(buf, positions, positions, np.frombuffer(b"TAGS", np.uint8), np.empty(1, np.int64),
                  np.empty(1, np.int64))
    split_properties(buf, positions, positions, np.zeros((1, 4), np.uint8), np.ones(1, np.int64),
                     np.empty((4, 1), np.int64), np.empty(1, np.int64), np.empty((1, 1), np.int64))
    gc.collect()
    gc.freeze()
    _ready = True
