"""Vectorised decoding of RocketMQ store files (commit-log records, consume-queue units) into Arrow batches.

Records are found by spark_export.records (only complete ones); their fields are then gathered for all records of
a batch with numpy fancy indexing (spark_export.arrow_util). No Python work per record on the hot path.
"""

from __future__ import annotations

import ipaddress
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_export.arrow_util import ARANGE, be32, be64, be_int, binary_parts, slices, take_or_null
from spark_export.records import BORN_V6, STORE_V6, ChainScan, Records, record_headers
from spark_export.schema import CONSUME_QUEUE_ARROW, MESSAGES_ARROW

__all__ = ["CQ_UNIT_SIZE", "DecodeOptions", "decode_messages", "decode_consume_queue", "iter_message_batches"]

_CQ_FILLER_SIZE = 0x7FFFFFFF
CQ_UNIT_SIZE = 20
_COMPRESSED = 0x1
_COMPRESSION_TYPE_SHIFT = 8
_TS_TYPE = pa.timestamp("us", tz="UTC")


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
_FROM_HEADER = frozenset({"queue_id", "queue_offset", "magic", "body_crc", "flag", "born_timestamp", "born_host",
                          "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset"})


def _int32(values: np.ndarray) -> pa.Array:
    return pa.array(values.astype(np.int32))


def _int64(values: np.ndarray) -> pa.Array:
    return pa.array(values.astype(np.int64))


def _timestamps(ms: np.ndarray) -> pa.Array:
    return pa.array(ms.astype(np.int64) * 1000, _TS_TYPE)


def decode_messages(buf: np.ndarray, base: int, records: Records, options: DecodeOptions) -> pa.RecordBatch:
    """One RecordBatch (options.schema, a subset of MESSAGES_ARROW) for the given records of the file."""
    wanted = set(options.schema.names)
    rec = records
    topics = None
    if options.topics is not None or "topic" in wanted:
        topics = slices(buf, rec.topic_pos, rec.topic_len, pa.string())
    if options.topics is not None:
        keep = pc.is_in(topics, value_set=pa.array(sorted(options.topics), pa.string())).to_numpy(zero_copy_only=False)
        if not keep.all():
            idx = np.flatnonzero(keep)
            rec = rec.take(idx)
            topics = topics.take(pa.array(idx))
    n = len(rec)
    p, sysflag = rec.pos, rec.sysflag
    head = record_headers(buf, p) if wanted & _FROM_HEADER else None
    compressed = (sysflag & _COMPRESSED) != 0
    v4 = rec.ipv4_only
    columns: dict[str, pa.Array] = {}
    if wanted & _FROM_PROPERTIES:
        columns.update(_property_columns(buf, rec, wanted))
    if "body" in wanted:
        if options.include_body:
            body = slices(buf, rec.body_pos, rec.body_len, pa.binary())
            if options.decompress and compressed.any():
                body = _decompress(body, compressed, sysflag)
        else:
            body = pa.nulls(n, pa.binary())
        columns["body"] = body

    def after_hosts(v4_field: str, field: str) -> np.ndarray:
        """A field after the hosts: from the header when both hosts are IPv4, else read at its position."""
        if v4:
            return head[v4_field]
        store_ts = p + 48 + np.where(sysflag & BORN_V6, 20, 8)
        if field == "store_timestamp":
            return be64(buf, store_ts)
        reconsume = store_ts + 8 + np.where(sysflag & STORE_V6, 20, 8)
        return be32(buf, reconsume) if field == "reconsume_times" else be64(buf, reconsume + 4)

    makers = {
        "topic": lambda: topics,
        "queue_id": lambda: _int32(head["queue_id"]),
        "queue_offset": lambda: _int64(head["queue_offset"]),
        "commitlog_offset": lambda: pa.array(base + p),
        "size": lambda: _int32(rec.size),
        "magic": lambda: _int32(head["magic"]),
        "body_length": lambda: _int32(rec.body_len),
        "body_crc": lambda: _int32(head["body_crc"]),
        "compressed": lambda: pa.array(compressed),
        "flag": lambda: _int32(head["flag"]),
        "sysflag": lambda: _int32(sysflag),
        "born_timestamp": lambda: _timestamps(head["born_timestamp"]),
        "born_host": lambda: _hosts(buf, p + 48, (sysflag & BORN_V6) != 0, head["v4_born_host"] if v4 else None),
        "store_timestamp": lambda: _timestamps(after_hosts("v4_store_timestamp", "store_timestamp")),
        "store_host": lambda: _store_hosts(buf, rec, head, v4),
        "reconsume_times": lambda: _int32(after_hosts("v4_reconsume_times", "reconsume_times")),
        "prepared_transaction_offset": lambda: _int64(after_hosts("v4_prepared_offset", "prepared_transaction_offset")),
    }
    arrays = [columns[name] if name in columns else makers[name]() for name in options.schema.names]
    return pa.RecordBatch.from_arrays(arrays, schema=options.schema)


def _store_hosts(buf: np.ndarray, rec: Records, head: np.ndarray, v4: bool) -> pa.Array:
    if v4:
        return _hosts(buf, rec.pos + 64, np.zeros(len(rec), bool), head["v4_store_host"])
    born_len = np.where(rec.sysflag & BORN_V6, 20, 8)
    return _hosts(buf, rec.pos + 56 + born_len, (rec.sysflag & STORE_V6) != 0)


def _property_columns(buf: np.ndarray, rec: Records, wanted: set[str]) -> dict[str, pa.Array]:
    """The properties map and/or the well-known single-value columns asked for."""
    n = len(rec)
    if "properties" in wanted:
        props, picked = _properties(buf, rec.props_pos, rec.props_len, n, wanted)
        return {"properties": props, **picked}
    out = {}
    if "tags" in wanted:
        out["tags"] = _tags(buf, rec)
    rest = (wanted & _FROM_PROPERTIES) - {"tags"}
    if rest:
        out.update(_properties(buf, rec.props_pos, rec.props_len, n, rest)[1])
    return out


_TAGS_WORD = int.from_bytes(b"TAGS", "big")


def _tags(buf: np.ndarray, rec: Records) -> pa.Array:
    """The TAGS property of every record, read directly where the layout allows it.

    Producers put TAGS first. When a record's properties start with "TAGS\x01" and no later segment starts
    with "TAGS\x01" (a later duplicate would win), the value is the rest of that first segment (null when
    empty: Java drops empty values). Every other record goes through the general decoder.
    """
    n = len(rec)
    if n == 0:
        return pa.array([], pa.string())
    offsets, data = binary_parts(slices(buf, rec.props_pos, rec.props_len, pa.binary()))
    total = len(data)
    starts, ends = offsets[:-1], offsets[1:]
    value = starts + 5
    fast = ends >= value
    if total >= 6:
        head = np.minimum(starts, total - 5)
        fast &= (be32(data, head) == _TAGS_WORD) & (data[head + 4] == 1)
        seps = np.flatnonzero(data == 2)
        # a later "\x02TAGS\x01" inside a record's properties: the general decoder decides (a \x02 ending a
        # record, usually followed by the next record's leading TAGS, is never inside one)
        tail = np.zeros(total + 1, bool)
        tail[ends - 1] = True
        later = seps[(seps + 6 <= total) & ~tail[seps]]
        later = later[(be32(data, later + 1) == _TAGS_WORD) & (data[later + 5] == 1)]
        if len(later):
            owner = np.searchsorted(offsets, later, side="right") - 1
            inside = later + 6 <= ends[owner]
            fast[owner[inside]] = False
        # the value ends at the first \x02 after it, or at the end of the record's properties
        k = np.searchsorted(seps, value)
        end = np.minimum(np.append(seps, total)[k], ends)
    else:
        fast[:] = False
        end = ends
    length = np.where(fast, end - value, 0)
    values = slices(data, np.where(fast, value, starts), length, pa.string())
    null = ~fast | (length == 0)
    slow = np.flatnonzero(~fast)
    if len(slow):
        other = _properties(buf, rec.props_pos[slow], rec.props_len[slow], len(slow), {"tags"})[1]["tags"]
        index = np.arange(n, dtype=np.int64)
        index[slow] = n + np.arange(len(slow))
        values = pa.concat_arrays([values, other]).take(pa.array(index))
        null[slow] = False
    if null.any():
        values = pc.if_else(pa.array(null), pa.nulls(n, pa.string()), values)
    return values


def _properties(buf: np.ndarray, pos: np.ndarray, length: np.ndarray, n: int,
                wanted: set[str] | frozenset[str] = _FROM_PROPERTIES) -> tuple[pa.Array | None, dict[str, pa.Array]]:
    """properties map column plus the well-known single-value columns, decoded with Java's rules.

    Segments are split on \\x02; a segment counts only when its first \\x01 has a non-empty name before it and a
    non-empty value after it; a later duplicate name replaces an earlier one. Without "properties" in `wanted`
    only the well-known columns asked for are built (names matched on their bytes, no map).
    """
    rec_offsets, data = binary_parts(slices(buf, pos, length, pa.binary()))
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
    keys = slices(data, key_start, key_end - key_start, pa.string())
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
    values = slices(data, val_start, val_end - val_start, pa.string())
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
        picked[column] = take_or_null(values, index)
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
        values = slices(data, val_start[cand], val_end[cand] - val_start[cand], pa.string())
        if len(cand) == n:  # every record has it (then ent_rec[cand] is 0..n-1 in order)
            picked[column] = values
        else:
            index = np.full(n, -1, dtype=np.int64)
            index[ent_rec[cand]] = np.arange(len(cand))
            picked[column] = take_or_null(values, index)
    return picked


def _hosts(buf: np.ndarray, pos: np.ndarray, is_v6: np.ndarray, v4_keys: np.ndarray | None = None) -> pa.Array:
    """'ip:port' strings ('[v6]:port' for IPv6), formatted once per distinct host.

    v4_keys: the 8 host bytes as big-endian integers when every host is IPv4 (already read with the header).
    """
    n = len(pos)
    if n == 0:
        return pa.array([], pa.string())
    if not is_v6.any():  # IPv4 only: each host is one 8-byte integer
        keys = be_int(buf, pos, 8) if v4_keys is None else v4_keys.astype(np.int64)
        if bool((keys == keys[0]).all()):
            unique, inverse = keys[:1], np.zeros(n, np.int32)
        else:
            unique, inverse = np.unique(keys, return_inverse=True)
        texts = [f"{(k >> 56) & 255}.{(k >> 48) & 255}.{(k >> 40) & 255}.{(k >> 32) & 255}:"
                 f"{int(np.int32(np.uint32(k & 0xFFFFFFFF)))}" for k in (int(k) for k in unique)]
        return pa.array(texts, pa.string()).take(pa.array(inverse.reshape(-1).astype(np.int32)))
    width = 20
    raw = buf[np.minimum(pos[:, None] + ARANGE[width], len(buf) - 1)]
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


def iter_message_batches(buf: np.ndarray, base: int, begin: int, end: int | None, options: DecodeOptions, *,
                         synced: bool = True, batch_rows: int = 1 << 17) -> Iterator[pa.RecordBatch]:
    """RecordBatches of the record chain in [begin, end) of one file: one per scan window (at most batch_rows)."""
    for records in ChainScan(buf, base, begin, end, synced=synced):
        for i in range(0, len(records), batch_rows):
            part = records if len(records) <= batch_rows else records.take(slice(i, i + batch_rows))
            batch = decode_messages(buf, base, part, options)
            if batch.num_rows:
                yield batch


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
