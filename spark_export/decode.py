"""Vectorised decoding of RocketMQ store files (commit-log records, consume-queue units) into Arrow batches.

Records are found by spark_export.records (only complete ones); their fields are then gathered for all records of
a batch with numpy fancy indexing and Arrow `take` (spark_export.arrow_util), properties split by a compiled loop
(spark_export.kernels). No Python work per record on the hot path.
"""

from __future__ import annotations

import ipaddress
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_export.arrow_util import ARANGE, be32, be64, be_int, slices, take_or_null, with_nulls
from spark_export.kernels import find_property, split_properties
from spark_export.records import BORN_V6, DEFAULT_BATCH_ROWS, STORE_V6, ChainScan, Records, record_headers
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
    rows: Any = None  # a spark_export.pushdown.Pushdown: records outside its header ranges are not decoded
    broker: str = ""  # the `broker` column: the brokerName the records were read from


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
    if options.rows is not None and options.rows.row_bounds and len(rec):
        keep = _rows_kept(buf, base, rec, options.rows)
        if keep is not None:
            idx = np.flatnonzero(keep)
            rec = rec.take(idx)
            if topics is not None:
                topics = topics.take(pa.array(idx))
    n = len(rec)
    p, sysflag = rec.pos, rec.sysflag
    head = record_headers(buf, p) if wanted & _FROM_HEADER or base < 0 else None
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
        "broker": lambda: pa.repeat(pa.scalar(options.broker, pa.string()), n),
        "queue_id": lambda: _int32(head["queue_id"]),
        "queue_offset": lambda: _int64(head["queue_offset"]),
        "commitlog_offset": lambda: pa.array(base + p if base >= 0 else head["physical_offset"].astype(np.int64)),
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


def _rows_kept(buf: np.ndarray, base: int, rec: Records, push) -> np.ndarray | None:
    """Which records the pushed header ranges keep (None: all of them)."""
    head = record_headers(buf, rec.pos)
    keep = np.ones(len(rec), bool)
    queue_ids = head["queue_id"].astype(np.int64)
    if push.queue_ids is not None:
        keep &= np.isin(queue_ids, np.array(sorted(push.queue_ids), np.int64))
    if push.queue_id.bounded:
        keep &= push.queue_id.mask(queue_ids)
    if push.queue_offset.bounded:
        keep &= push.queue_offset.mask(head["queue_offset"].astype(np.int64))
    if push.commitlog_offset.bounded:
        keep &= push.commitlog_offset.mask(base + rec.pos if base >= 0 else head["physical_offset"].astype(np.int64))
    if push.store_timestamp_ms.bounded and rec.ipv4_only:  # other layouts: Spark's own filter does it
        keep &= push.store_timestamp_ms.mask(head["v4_store_timestamp"].astype(np.int64))
    return None if keep.all() else keep


def _store_hosts(buf: np.ndarray, rec: Records, head: np.ndarray, v4: bool) -> pa.Array:
    if v4:
        return _hosts(buf, rec.pos + 64, np.zeros(len(rec), bool), head["v4_store_host"])
    born_len = np.where(rec.sysflag & BORN_V6, 20, 8)
    return _hosts(buf, rec.pos + 56 + born_len, (rec.sysflag & STORE_V6) != 0)


def _property_columns(buf: np.ndarray, rec: Records, wanted: set[str]) -> dict[str, pa.Array]:
    """The properties map and/or the well-known single-value columns asked for."""
    n = len(rec)
    if "properties" in wanted:
        props, picked = _properties(buf, rec.props_pos, rec.props_len, n)
        return {"properties": props, **picked}
    return {column: _single_property(buf, rec, name) for name, column in _WANTED.items() if column in wanted}


_NAMES = {name: np.frombuffer(name.encode(), np.uint8) for name in _WANTED}


def _single_property(buf: np.ndarray, rec: Records, name: str) -> pa.Array:
    """One property of every record (null where absent), found by a compiled scan of the properties."""
    n = len(rec)
    value_pos = np.empty(n, np.int64)
    value_len = np.empty(n, np.int64)
    found = find_property(buf, rec.props_pos, rec.props_len, _NAMES[name], value_pos, value_len)
    if found == 0:
        return pa.nulls(n, pa.string())
    missing = value_pos < 0
    values = slices(buf, np.where(missing, rec.props_pos, value_pos), value_len, pa.string())
    return values if found == n else with_nulls(values, ~missing)


_NAME_TABLE = np.zeros((len(_WANTED), max(len(n) for n in _WANTED)), np.uint8)
for _k, _name in enumerate(_WANTED):
    _NAME_TABLE[_k, :len(_name)] = np.frombuffer(_name.encode(), np.uint8)
_NAME_LENS = np.array([len(n) for n in _WANTED], np.int64)


def _properties(buf: np.ndarray, pos: np.ndarray, length: np.ndarray, n: int) -> tuple[pa.Array, dict[str, pa.Array]]:
    """properties map column plus the well-known single-value columns, decoded with Java's rules.

    Segments are split on \\x02; a segment counts only when its first \\x01 has a non-empty name before it and a
    non-empty value after it; a later duplicate name replaces an earlier one (kernels.split_properties).
    """
    entries = np.empty((4, int(length.sum()) // 3 + 1), np.int64)
    counts = np.empty(n, np.int64)
    picked = np.empty((len(_WANTED), n), np.int64)
    total = split_properties(buf, pos, length, _NAME_TABLE, _NAME_LENS, entries, counts, picked)
    key_pos, key_len, value_pos, value_len = entries[:, :total]
    keys = slices(buf, key_pos, key_len, pa.string())
    values = slices(buf, value_pos, value_len, pa.string())
    map_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=map_offsets[1:])
    props = pa.MapArray.from_arrays(pa.array(map_offsets), keys, values, type=MESSAGES_ARROW.field("properties").type)
    return props, {column: take_or_null(values, picked[k]) for k, column in enumerate(_WANTED.values())}


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
                         synced: bool = True, batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """RecordBatches of the record chain in [begin, end) of one file, at most batch_rows records each."""
    for records in ChainScan(buf, base, begin, end, synced=synced, batch=batch_rows):
        batch = decode_messages(buf, base, records, options)
        if batch.num_rows:
            yield batch


# --- consume queue ----------------------------------------------------------------------------------------------

_CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])


def decode_consume_queue(buf: np.ndarray | bytes, base: int, topic: str, queue_id: int,
                         broker: str = "") -> pa.RecordBatch:
    """Units of one consume-queue file up to the first empty unit (fillers dropped); `broker`: the brokerName."""
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
        pa.repeat(pa.scalar(broker, pa.string()), n),
        pa.array(np.full(n, queue_id, np.int32)),
        pa.array(queue_offset),
        pa.array(offset[index]),
        pa.array(size[index]),
        pa.array(units["tags_code"][index].astype(np.int64)),
    ], schema=CONSUME_QUEUE_ARROW)
