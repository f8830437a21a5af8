"""Vectorised decoding of RocketMQ store files (commit-log records, consume-queue units) into Arrow batches.

Everything here works on a whole byte range at once with numpy: record starts are found by scanning for the
magic code and checking each candidate's own PHYSICALOFFSET field (a record stores its global offset, so a
candidate is real iff that field equals its position) and the chain of TOTALSIZEs; fields are then gathered
for all records of a batch with fancy indexing. No Python work per record on the hot path.

Only complete records are produced: the chain stops at a zero TOTALSIZE, a BLANK end-of-file marker, a size
whose recomputed length disagrees with TOTALSIZE (a record still being written), or a record that ends past
the end of the file (a truncated copy).
"""

from __future__ import annotations

import ipaddress
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_export.schema import CONSUME_QUEUE_ARROW, MESSAGES_ARROW

__all__ = [
    "MAGIC_V1", "MAGIC_V2", "BLANK_MAGIC", "CQ_UNIT_SIZE", "ChainEnd", "locate_records", "decode_messages",
    "decode_consume_queue", "iter_message_batches",
]

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB: two-byte topic length
BLANK_MAGIC = -875286124  # 0xCBD43194
_MAGIC_B0, _MAGIC_B1, _MAGIC_B2 = 0xDA, 0xA3, 0x20
_MAGIC_B3 = (0xA7, 0xAB)
MIN_RECORD_SIZE = 91  # IPv4 hosts, V1, empty body/topic/properties
CQ_UNIT_SIZE = 20
_CQ_FILLER_SIZE = 0x7FFFFFFF
_COMPRESSED = 0x1
_BORN_V6 = 0x10
_STORE_V6 = 0x20
_COMPRESSION_TYPE_SHIFT = 8
_TS_TYPE = pa.timestamp("us", tz="UTC")
_SCAN_CHUNK = 16 << 20
_RANGE = {w: np.arange(w, dtype=np.int64) for w in (1, 2, 4, 8, 20)}


class ChainEnd:
    """Why a record chain stopped (see :func:`locate_records`)."""

    LIMIT = "limit"  # reached the requested end position
    BLANK = "blank"  # BLANK end-of-file marker: the file is finished
    EOF = "eof"      # the last record ends exactly at the end of the file
    DATA = "data"    # zeros, garbage, a torn or truncated record: no more complete data (yet)


# --- big-endian gathers -----------------------------------------------------------------------------------------

def _be(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Signed big-endian integers of `width` bytes at each position (int64 result).

    One gather through a byte-strided view of the buffer (element i = the `width` bytes at position i), so
    unaligned reads cost one fancy index instead of `width` of them.
    """
    if width == 1:
        return buf[pos].view(np.int8).astype(np.int64)
    if len(buf) < width or not buf.flags.c_contiguous:
        raw = buf[pos[:, None] + _RANGE[width]]
        return raw.view(f">i{width}").reshape(-1).astype(np.int64)
    view = np.ndarray((len(buf) - width + 1,), dtype=f">i{width}", buffer=buf, strides=(1,))
    return view[pos].astype(np.int64)


def _be32(buf, pos):
    return _be(buf, pos, 4)


def _be64(buf, pos):
    return _be(buf, pos, 8)


def _gather_ranges(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate buf[start:start+length] for every range: (int32 offsets of n+1, uint8 data)."""
    n = len(starts)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return offsets.astype(np.int32), np.empty(0, dtype=np.uint8)
    idx = np.repeat(starts - offsets[:-1], lengths)
    idx += np.arange(total, dtype=np.int64)
    return offsets.astype(np.int32), buf[idx]


def _binary_array(offsets: np.ndarray, data: np.ndarray, typ: pa.DataType) -> pa.Array:
    n = len(offsets) - 1
    arr = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return _as_string(arr) if typ == pa.string() else arr


def _as_string(arr: pa.Array) -> pa.Array:
    """A binary array as strings; invalid UTF-8 is decoded like Java does (replacement characters)."""
    text = arr.view(pa.string())
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        text = pa.array([None if v is None else v.decode("utf-8", "replace") for v in arr.to_pylist()], pa.string())
    return text


_EVEN_CACHE: dict[int, pa.Array] = {}


def _even(n: int) -> pa.Array:
    index = _EVEN_CACHE.get(n)
    if index is None:
        index = pa.array(np.arange(0, 2 * n, 2, dtype=np.int32))
        if len(_EVEN_CACHE) > 64:
            _EVEN_CACHE.clear()
        _EVEN_CACHE[n] = index
    return index


def _slices(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, typ: pa.DataType) -> pa.Array:
    """An Arrow binary/string array of buf[start:start+length] for every range, built by Arrow's `take`.

    The ranges (ascending and disjoint, as fields of consecutive records are) cut the spanned bytes into
    alternating wanted/unwanted pieces; a zero-copy binary array over those bytes then gives the wanted pieces
    with one `take` of the even elements: a memcpy per value instead of a per-byte index.
    """
    n = len(starts)
    if n == 0:
        return pa.array([], typ)
    starts = starts.astype(np.int64, copy=False)
    bounds = np.empty(2 * n, np.int64)
    bounds[0::2] = starts
    bounds[1::2] = starts + lengths
    lo, hi = int(bounds[0]), int(bounds[-1])
    if hi - lo >= (1 << 31) - 1 or (n > 1 and bool((bounds[1:] < bounds[:-1]).any())):
        return _binary_array(*_gather_ranges(buf, starts, lengths), typ)
    bounds -= lo
    pieces = pa.Array.from_buffers(pa.binary(), 2 * n - 1,
                                   [None, pa.py_buffer(bounds.astype(np.int32)), pa.py_buffer(buf[lo:hi])])
    out = pieces.take(_even(n))
    return _as_string(out) if typ == pa.string() else out


def _binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets of n+1 starting at 0, uint8 data) of a binary array without nulls (zero-copy views)."""
    n = len(arr)
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, np.int32, count=n + 1, offset=arr.offset * 4).astype(np.int64)
    if offsets[0]:
        offsets -= offsets[0]
    first = int(np.frombuffer(off_buf, np.int32, count=1, offset=arr.offset * 4)[0])
    total = int(offsets[-1])
    data = np.frombuffer(data_buf, np.uint8, count=total, offset=first) if total else np.empty(0, np.uint8)
    return offsets, data


def _take_or_null(values: pa.Array, index: np.ndarray) -> pa.Array:
    """values[index[i]] or null where index[i] < 0."""
    missing = index < 0
    if not missing.any():
        return values.take(pa.array(index))
    return values.take(pa.array(np.where(missing, 0, index), mask=missing)) if len(values) else pa.nulls(len(index), values.type)


# --- locating records -------------------------------------------------------------------------------------------

def _candidates(buf: np.ndarray, base: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Starts (sorted) and sizes of self-consistent records whose start lies in [lo, hi)."""
    n = len(buf)
    top = min(hi, n - MIN_RECORD_SIZE + 1)
    if top <= lo:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    p = np.flatnonzero(buf[lo + 4: top + 4] == _MAGIC_B0).astype(np.int64) + lo
    if len(p) == 0:
        return p, p
    magic = _be32(buf, p + 4)
    p = p[(magic == MAGIC_V1) | (magic == MAGIC_V2)]
    if len(p) == 0:
        return p, p
    p = p[_be64(buf, p + 28) == base + p]
    size = _be32(buf, p)
    keep = (size >= MIN_RECORD_SIZE) & (p + size <= n)
    if not keep.all():
        p, size = p[keep], size[keep]
    if len(p) == 0:
        return p, size
    sysflag = _be32(buf, p + 36)
    hosts = np.where(sysflag & _BORN_V6, 20, 8) + np.where(sysflag & _STORE_V6, 20, 8)
    body_len = _be32(buf, p + 68 + hosts)
    fixed = 72 + hosts
    v2 = buf[p + 7] == _MAGIC_B3[1]
    topic_width = np.where(v2, 2, 1)
    keep = (body_len >= 0) & (fixed + body_len + topic_width + 2 <= size)
    if not keep.all():
        p, size, fixed, body_len, v2, topic_width = (
            p[keep], size[keep], fixed[keep], body_len[keep], v2[keep], topic_width[keep])
    tpos = p + fixed + body_len
    topic_len = np.where(v2, _be(buf, np.minimum(tpos, n - 2), 2), _be(buf, tpos, 1)) if v2.any() else _be(buf, tpos, 1)
    keep = (topic_len >= 0) & (fixed + body_len + topic_width + topic_len + 2 <= size)
    if not keep.all():
        p, size, fixed, body_len, topic_width, topic_len = (
            p[keep], size[keep], fixed[keep], body_len[keep], topic_width[keep], topic_len[keep])
    props_len = _be(buf, p + fixed + body_len + topic_width + topic_len, 2)
    keep = (props_len >= 0) & (fixed + body_len + topic_width + topic_len + 2 + props_len == size)
    return p[keep], size[keep]


def locate_records(buf: np.ndarray, base: int, begin: int, end: int | None = None, *, synced: bool = True,
                   max_records: int | None = None) -> tuple[np.ndarray, int, str]:
    """Record starts (file positions) of the chain starting at `begin`, for records that start before `end`.

    buf is the whole file (np.uint8, usually over an mmap), base its global offset (the file name).
    synced=True: `begin` is a record start (or the file start). synced=False: begin anywhere; the chain starts
    at the first real record at or after it (used for byte-range splits). Returns (starts, next position,
    ChainEnd reason); `next position` is where the following record would start.
    """
    n = len(buf)
    stop = n if end is None else min(end, n)
    parts: list[np.ndarray] = []
    count = 0
    pos: int | None = begin if synced else None
    lo = begin
    while lo < stop:
        hi = min(lo + _SCAN_CHUNK, stop)
        starts, sizes = _candidates(buf, base, lo, hi)
        if pos is None:
            if len(starts) == 0:
                lo = hi
                continue
            pos = int(starts[0])
        while pos < hi:
            i = int(np.searchsorted(starts, pos))
            if i == len(starts) or starts[i] != pos:
                return _end_of_data(buf, parts, pos)
            following = starts[i:] + sizes[i:]
            breaks = np.flatnonzero(following[:-1] != starts[i + 1:])
            j = int(breaks[0]) if len(breaks) else len(following) - 1
            run = starts[i:i + j + 1]
            if max_records is not None and count + len(run) >= max_records:
                run = run[: max_records - count]
                parts.append(run)
                return _finish(buf, base, parts, int(run[-1] + sizes[i + len(run) - 1]))
            parts.append(run)
            count += len(run)
            pos = int(following[j])
        lo = max(hi, pos)
    if pos is None:
        return _join(parts), stop, (ChainEnd.LIMIT if stop < n else ChainEnd.EOF)
    return _finish(buf, base, parts, pos)


def _finish(buf: np.ndarray, base: int, parts: list[np.ndarray], pos: int) -> tuple[np.ndarray, int, str]:
    """The chain stopped at a limit: is another record there, or did the written data end at `pos`?"""
    if pos >= len(buf):
        return _join(parts), pos, ChainEnd.EOF
    if len(_candidates(buf, base, pos, pos + 1)[0]):
        return _join(parts), pos, ChainEnd.LIMIT
    return _end_of_data(buf, parts, pos)


def _end_of_data(buf: np.ndarray, parts: list[np.ndarray], pos: int) -> tuple[np.ndarray, int, str]:
    """The chain reached the end of written data; on a live store its last record may be mid-append.

    A writer appends a record front to back, so a torn record has a zero tail: its lengths may already be
    consistent while the last properties bytes or the body are not written yet. The last record is kept
    only if its final byte is set (when it has properties) and its body CRC matches.
    """
    starts = _join(parts)
    reason = _reason_at(buf, pos)
    if reason != ChainEnd.DATA or len(starts) == 0:
        return starts, pos, reason
    last = int(starts[-1])
    if not _record_complete(buf, last, pos - last):
        return starts[:-1], last, ChainEnd.DATA
    return starts, pos, reason


def _record_complete(buf: np.ndarray, start: int, size: int) -> bool:
    p = np.array([start], np.int64)
    sysflag = int(_be32(buf, p + 36)[0])
    body_pos = start + 72 + (20 if sysflag & _BORN_V6 else 8) + (20 if sysflag & _STORE_V6 else 8)
    body_len = int(_be32(buf, np.array([body_pos - 4]))[0])
    if (zlib.crc32(buf[body_pos:body_pos + body_len]) & 0x7FFFFFFF) != int(_be32(buf, p + 8)[0]):
        return False
    end = start + size
    v2 = int(_be32(buf, p + 4)[0]) == MAGIC_V2
    tpos = body_pos + body_len
    topic_len = int(_be(buf, np.array([tpos]), 2 if v2 else 1)[0])
    props_len = int(_be(buf, np.array([tpos + (2 if v2 else 1) + topic_len]), 2)[0])
    return props_len == 0 or int(buf[end - 1]) != 0


def _join(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def _reason_at(buf: np.ndarray, pos: int) -> str:
    if pos >= len(buf):
        return ChainEnd.EOF
    if pos + 8 <= len(buf) and int(_be32(buf, np.array([pos + 4]))[0]) == BLANK_MAGIC:
        return ChainEnd.BLANK
    return ChainEnd.DATA


# --- decoding messages ------------------------------------------------------------------------------------------

@dataclass(slots=True)
class DecodeOptions:
    include_body: bool = True
    decompress: bool = True
    topics: frozenset[str] | None = None
    schema: pa.Schema = MESSAGES_ARROW  # the columns to produce (a user-given schema prunes the work)


_WANTED = {"TAGS": "tags", "KEYS": "keys", "UNIQ_KEY": "uniq_key", "RETRY_TOPIC": "retry_topic",
           "REAL_TOPIC": "real_topic"}
_FROM_PROPERTIES = frozenset(_WANTED.values()) | {"properties"}
_HEADER_ONLY = {  # columns at fixed positions of the record header (before the variable-length hosts)
    "commitlog_offset": lambda buf, base, p: pa.array(base + p),
    "size": lambda buf, base, p: pa.array(_be32(buf, p).astype(np.int32)),
    "magic": lambda buf, base, p: pa.array(_be32(buf, p + 4).astype(np.int32)),
    "body_crc": lambda buf, base, p: pa.array(_be32(buf, p + 8).astype(np.int32)),
    "queue_id": lambda buf, base, p: pa.array(_be32(buf, p + 12).astype(np.int32)),
    "flag": lambda buf, base, p: pa.array(_be32(buf, p + 16).astype(np.int32)),
    "queue_offset": lambda buf, base, p: pa.array(_be64(buf, p + 20)),
    "sysflag": lambda buf, base, p: pa.array(_be32(buf, p + 36).astype(np.int32)),
    "compressed": lambda buf, base, p: pa.array((_be32(buf, p + 36) & _COMPRESSED) != 0),
    "born_timestamp": lambda buf, base, p: pa.array(_be64(buf, p + 40) * 1000, _TS_TYPE),
}


def decode_messages(buf: np.ndarray, base: int, starts: np.ndarray, options: DecodeOptions) -> pa.RecordBatch:
    """One RecordBatch (options.schema, a subset of MESSAGES_ARROW) for the records at the given positions."""
    wanted = set(options.schema.names)
    p = starts.astype(np.int64, copy=False)
    if options.topics is None and wanted <= _HEADER_ONLY.keys():  # fixed-position fields only: no lengths needed
        return pa.RecordBatch.from_arrays([_HEADER_ONLY[name](buf, base, p) for name in options.schema.names],
                                          schema=options.schema)
    sysflag = _be32(buf, p + 36)
    born_len = np.where(sysflag & _BORN_V6, 20, 8)
    store_len = np.where(sysflag & _STORE_V6, 20, 8)
    body_pos = p + 72 + born_len + store_len
    body_len = _be32(buf, body_pos - 4)
    magic = _be32(buf, p + 4)
    v2 = magic == MAGIC_V2
    tpos = body_pos + body_len
    topic_len = np.where(v2, _be(buf, tpos, 2), _be(buf, tpos, 1)) if v2.any() else _be(buf, tpos, 1)
    topic_pos = tpos + np.where(v2, 2, 1)
    topics = None
    if options.topics is not None or "topic" in wanted:
        topics = _slices(buf, topic_pos, topic_len, pa.string())
    if options.topics is not None:
        keep = pc.is_in(topics, value_set=pa.array(sorted(options.topics), pa.string())).to_numpy(zero_copy_only=False)
        if not keep.all():
            idx = np.flatnonzero(keep)
            p, sysflag, born_len, store_len, body_pos, body_len, magic = (
                a[idx] for a in (p, sysflag, born_len, store_len, body_pos, body_len, magic))
            topic_pos, topic_len = topic_pos[idx], topic_len[idx]
            topics = topics.take(pa.array(idx))
    n = len(p)
    host_pos = p + 48
    store_ts_pos = host_pos + born_len
    compressed = (sysflag & _COMPRESSED) != 0
    columns: dict[str, pa.Array] = {}
    if wanted & _FROM_PROPERTIES:
        props_pos = topic_pos + topic_len + 2
        props, picked = _properties(buf, props_pos, _be(buf, props_pos - 2, 2), n, wanted)
        if props is not None:
            columns["properties"] = props
        columns.update(picked)
    if "body" in wanted:
        if options.include_body:
            body = _slices(buf, body_pos, body_len, pa.binary())
            if options.decompress and compressed.any():
                body = _decompress(body, compressed, sysflag)
        else:
            body = pa.nulls(n, pa.binary())
        columns["body"] = body
    makers = {
        "topic": lambda: topics,
        "queue_id": lambda: pa.array(_be32(buf, p + 12).astype(np.int32)),
        "queue_offset": lambda: pa.array(_be64(buf, p + 20)),
        "commitlog_offset": lambda: pa.array(base + p),
        "size": lambda: pa.array(_be32(buf, p).astype(np.int32)),
        "magic": lambda: pa.array(magic.astype(np.int32)),
        "body_length": lambda: pa.array(body_len.astype(np.int32)),
        "body_crc": lambda: pa.array(_be32(buf, p + 8).astype(np.int32)),
        "compressed": lambda: pa.array(compressed),
        "flag": lambda: pa.array(_be32(buf, p + 16).astype(np.int32)),
        "sysflag": lambda: pa.array(sysflag.astype(np.int32)),
        "born_timestamp": lambda: pa.array(_be64(buf, p + 40) * 1000, _TS_TYPE),
        "born_host": lambda: _hosts(buf, host_pos, born_len == 20),
        "store_timestamp": lambda: pa.array(_be64(buf, store_ts_pos) * 1000, _TS_TYPE),
        "store_host": lambda: _hosts(buf, store_ts_pos + 8, store_len == 20),
        "reconsume_times": lambda: pa.array(_be32(buf, store_ts_pos + 8 + store_len).astype(np.int32)),
        "prepared_transaction_offset": lambda: pa.array(_be64(buf, store_ts_pos + 12 + store_len)),
    }
    arrays = [columns[name] if name in columns else makers[name]() for name in options.schema.names]
    return pa.RecordBatch.from_arrays(arrays, schema=options.schema)


def _properties(buf: np.ndarray, pos: np.ndarray, length: np.ndarray, n: int,
                wanted: set[str] | frozenset[str] = _FROM_PROPERTIES) -> tuple[pa.Array | None, dict[str, pa.Array]]:
    """properties map column plus the well-known single-value columns, decoded with Java's rules.

    Segments are split on \\x02; a segment counts only when its first \\x01 has a non-empty name before it and a
    non-empty value after it; a later duplicate name replaces an earlier one. Without "properties" in `wanted`
    only the well-known columns asked for are built (names matched on their bytes, no map).
    """
    rec_offsets, data = _binary_parts(_slices(buf, pos, length, pa.binary()))
    seps = np.flatnonzero(data == 2)
    rec_end = rec_offsets[1:]
    open_tail = (length > 0) & (data[np.maximum(rec_end - 1, 0)] != 2) if len(data) else np.zeros(n, bool)
    seg_end = seps
    seg_rec = np.searchsorted(rec_offsets, seps, side="right") - 1
    if open_tail.any():  # a last segment without its trailing \x02 still counts (Java splits the string)
        seg_end = np.concatenate([seg_end, rec_end[open_tail]])
        seg_rec = np.concatenate([seg_rec, np.flatnonzero(open_tail)])
        order = np.lexsort((seg_end, seg_rec))
        seg_end, seg_rec = seg_end[order], seg_rec[order]
    first = np.ones(len(seg_rec), bool)
    first[1:] = seg_rec[1:] != seg_rec[:-1]
    seg_start = np.empty_like(seg_end)
    if len(seg_end):
        seg_start[0] = 0
        seg_start[1:] = seg_end[:-1] + 1
    seg_start = np.where(first, rec_offsets[seg_rec], seg_start)
    ones = np.flatnonzero(data == 1)
    if len(ones):
        k = np.searchsorted(ones, seg_start)
        sep = ones[np.minimum(k, len(ones) - 1)]
        valid = (k < len(ones)) & (sep > seg_start) & (sep < seg_end - 1)
    else:
        sep = seg_start
        valid = np.zeros(len(seg_start), bool)
    key_start, key_end = seg_start[valid], sep[valid]
    val_start, val_end, ent_rec = sep[valid] + 1, seg_end[valid], seg_rec[valid]
    if "properties" not in wanted:
        return None, _picked_only(data, key_start, key_end, val_start, val_end, ent_rec, n, wanted)
    keys = _slices(data, key_start, key_end - key_start, pa.string())
    encoded = keys.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    if len(codes) > 1:  # keep the last of duplicate names within a record
        width = int(codes.max()) + 1
        combined = ent_rec * width + codes
        if np.bincount(combined, minlength=1).max() > 1:
            _, last_rev = np.unique(combined[::-1], return_index=True)
            kept = np.sort(len(combined) - 1 - last_rev)
            keys = keys.take(pa.array(kept))
            codes, val_start, val_end, ent_rec = (a[kept] for a in (codes, val_start, val_end, ent_rec))
    values = _slices(data, val_start, val_end - val_start, pa.string())
    map_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(ent_rec, minlength=n), out=map_offsets[1:])
    props = pa.MapArray.from_arrays(pa.array(map_offsets), keys, values, type=MESSAGES_ARROW.field("properties").type)
    dictionary = {name: i for i, name in enumerate(encoded.dictionary.to_pylist())}
    picked = {}
    for name, column in _WANTED.items():
        index = np.full(n, -1, dtype=np.int64)
        code = dictionary.get(name)
        if code is not None:
            cand = np.flatnonzero(codes == code)
            index[ent_rec[cand]] = cand
        picked[column] = _take_or_null(values, index)
    return props, picked


def _picked_only(data: np.ndarray, key_start: np.ndarray, key_end: np.ndarray, val_start: np.ndarray,
                 val_end: np.ndarray, ent_rec: np.ndarray, n: int, wanted) -> dict[str, pa.Array]:
    """The well-known single-value columns in `wanted`: the last entry of each record whose name matches."""
    key_len = key_end - key_start
    picked = {}
    for name, column in _WANTED.items():
        if column not in wanted:
            continue
        raw = name.encode()
        cand = np.flatnonzero(key_len == len(raw))
        for j, byte in enumerate(raw):
            if len(cand) == 0:
                break
            cand = cand[data[key_start[cand] + j] == byte]
        if len(cand) > 1:  # entries are in record order: keep the last of each record's matches
            rec = ent_rec[cand]
            cand = cand[np.append(rec[1:] != rec[:-1], True)]
        values = _slices(data, val_start[cand], val_end[cand] - val_start[cand], pa.string())
        if len(cand) == n:  # every record has it (then ent_rec[cand] is 0..n-1 in order)
            picked[column] = values
        else:
            index = np.full(n, -1, dtype=np.int64)
            index[ent_rec[cand]] = np.arange(len(cand))
            picked[column] = _take_or_null(values, index)
    return picked


def _hosts(buf: np.ndarray, pos: np.ndarray, is_v6: np.ndarray) -> pa.Array:
    """'ip:port' strings ('[v6]:port' for IPv6), formatted once per distinct host."""
    n = len(pos)
    if n == 0:
        return pa.array([], pa.string())
    if not is_v6.any():  # IPv4 only: each host is one 8-byte integer
        keys = _be(buf, pos, 8)
        if bool((keys == keys[0]).all()):
            unique, inverse = keys[:1], np.zeros(n, np.int32)
        else:
            unique, inverse = np.unique(keys, return_inverse=True)
        texts = [f"{(k >> 56) & 255}.{(k >> 48) & 255}.{(k >> 40) & 255}.{(k >> 32) & 255}:"
                 f"{int(np.int32(np.uint32(k & 0xFFFFFFFF)))}" for k in (int(k) for k in unique)]
        return pa.array(texts, pa.string()).take(pa.array(inverse.reshape(-1).astype(np.int32)))
    width = 20
    raw = buf[np.minimum(pos[:, None] + _RANGE[width], len(buf) - 1)]
    if width == 20:
        raw[~is_v6, 8:] = 0
        raw = np.concatenate([raw, is_v6[:, None].astype(np.uint8)], axis=1)
    raw = np.ascontiguousarray(raw)
    keys = raw.view(f"V{raw.shape[1]}").reshape(-1)
    unique, inverse = np.unique(keys, return_inverse=True)
    texts = []
    for key in unique:
        b = bytes(key)
        if len(b) == 21 and b[20]:
            texts.append(f"[{ipaddress.IPv6Address(b[:16])}]:{int.from_bytes(b[16:20], 'big', signed=True)}")
        else:
            texts.append(f"{b[0]}.{b[1]}.{b[2]}.{b[3]}:{int.from_bytes(b[4:8], 'big', signed=True)}")
    return pa.array(texts, pa.string()).take(pa.array(inverse.reshape(-1)))


def _decompress(body: pa.Array, compressed: np.ndarray, sysflag: np.ndarray) -> pa.Array:
    """Decompressed bodies for the COMPRESSED_FLAG rows (zlib; lz4/zstd when their modules are installed)."""
    values = body.to_pylist()
    for i in np.flatnonzero(compressed):
        kind = (int(sysflag[i]) >> _COMPRESSION_TYPE_SHIFT) & 0x7
        values[i] = _decompress_one(values[i], kind)
    return pa.array(values, pa.binary())


def _decompress_one(data: bytes, kind: int) -> bytes:
    try:
        if kind in (0, 3):
            return zlib.decompress(data)
        if kind == 1:
            import lz4.frame  # optional
            return lz4.frame.decompress(data)
        if kind == 2:
            import zstandard  # optional
            return zstandard.ZstdDecompressor().decompress(data)
    except ImportError as exc:
        raise RuntimeError(f"body compressed with type {kind} needs the {exc.name} module; "
                           "or read with option decompress=false") from None
    except zlib.error:
        return data  # flag set but the body is not zlib: keep the stored bytes
    return data


def iter_message_batches(buf: np.ndarray, base: int, starts: np.ndarray, options: DecodeOptions,
                         batch_rows: int = 16384, batch_bytes: int = 64 << 20):
    """RecordBatches of at most batch_rows records / ~batch_bytes record bytes each."""
    if len(starts) == 0:
        return
    sizes = _be32(buf, starts)
    cumulative = np.cumsum(sizes)
    i = 0
    while i < len(starts):
        limit = int(cumulative[i - 1]) + batch_bytes if i else batch_bytes
        j = min(i + batch_rows, max(i + 1, int(np.searchsorted(cumulative, limit, side="right"))))
        batch = decode_messages(buf, base, starts[i:j], options)
        if batch.num_rows:
            yield batch
        i = j


# --- consume queue ----------------------------------------------------------------------------------------------

_CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])


def decode_consume_queue(buf: np.ndarray | bytes, base: int, topic: str, queue_id: int) -> pa.RecordBatch:
    """Units of one consume-queue file up to the first empty unit (fillers dropped)."""
    data = np.frombuffer(buf, np.uint8) if not isinstance(buf, np.ndarray) else buf
    usable = len(data) - len(data) % CQ_UNIT_SIZE
    units = data[:usable].view(_CQ_DTYPE)
    bad = np.flatnonzero((units["offset"] < 0) | (units["size"] <= 0))
    count = int(bad[0]) if len(bad) else len(units)
    units = units[:count]
    offset = units["offset"].astype(np.int64)
    size = units["size"].astype(np.int32)
    real = ~((offset == 0) & (size == _CQ_FILLER_SIZE))
    index = np.flatnonzero(real)
    queue_offset = base // CQ_UNIT_SIZE + index.astype(np.int64)
    n = len(index)
    return pa.RecordBatch.from_arrays([
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.array(np.full(n, queue_id, np.int32)),
        pa.array(queue_offset),
        pa.array(offset[index]),
        pa.array(size[index]),
        pa.array(units["tags_code"][index].astype(np.int64)),
    ], schema=CONSUME_QUEUE_ARROW)
