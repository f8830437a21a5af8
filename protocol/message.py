"""Commit-log record codec (§6.3) and SEND_BATCH_MESSAGE body codec (§4.3.4).

The same record bytes are written by the store, returned verbatim in pull responses and parsed by the client, so this
module is on every hot path: fixed parts go through precompiled structs, the common IPv4/IPv4 layout has its own
single-struct fast path, and ``iter_records`` inlines decoding with per-call caches for repeated topics and hosts.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from protocol.ids import _unpack_cached, offset_msg_id, pack_host
from protocol.names import record_names_problem
from protocol.properties import (
    MAX_PROPERTIES_BYTES,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_properties as _decode_props_str,
)

__all__ = [
    "MAGIC_V1", "MAGIC_V2", "BLANK_MAGIC", "COMPRESSED_FLAG", "MULTI_TAGS_FLAG", "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED_TYPE", "TRANSACTION_COMMIT_TYPE", "TRANSACTION_ROLLBACK_TYPE", "TRANSACTION_TYPE_MASK",
    "BORNHOST_V6_FLAG", "STOREHOST_V6_FLAG", "NEED_UNWRAP_FLAG", "INNER_BATCH_FLAG", "COMPRESSION_TYPE_MASK",
    "RecordError", "MessageRecord", "BatchEntry", "body_crc", "record_size", "pack_record_into", "encode_record",
    "decode_record", "iter_records", "check_record", "record_names_problem_at", "encode_batch_body", "decode_batch_body",
    "iter_batch_entries",
    "BLANK_MARKER_SIZE", "pack_blank_marker_into", "MIN_RECORD_SIZE",
]

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB: int16 topic length (topics > 127 bytes)
BLANK_MAGIC = -875286124  # 0xCBD43194: end-of-file marker

COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_TYPE_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700
_HOST_V6_FLAGS = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG

BLANK_MARKER_SIZE = 8
_V1_MAX_TOPIC = 127
_V2_MAX_TOPIC = 32767
_MASK31 = 0x7FFFFFFF

# --- fixed-part layouts --------------------------------------------------------------------------------------------
# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
_HEAD = struct.Struct(">iiiiiqqiq")  # 48 bytes, host-independent
_HEAD_SIZE = _HEAD.size
# After the born host: STORETIMESTAMP; after the store host: RECONSUMETIMES PREPARED_OFFSET BODYLENGTH.
_STORE_TS = struct.Struct(">q")
_MID = struct.Struct(">iqi")  # 16 bytes
# Whole fixed part for the packer, one struct per (born host len, store host len).
_PACK_FIXED = {
    (b, s): struct.Struct(f">iiiiiqqiq{b}sq{s}siqi") for b in (8, 20) for s in (8, 20)
}
# Decoder fast path for IPv4/IPv4: hosts as (uint32 ip, int32 port).
_V4V4 = struct.Struct(">iiiiiqqiqIiqIiiqi")  # 88 bytes
_FIXED_V4V4 = _V4V4.size
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_BYTE = struct.Struct(">b")
_SIZE_MAGIC = struct.Struct(">ii")

# Smallest possible record: IPv4 hosts, V1, empty body/topic/properties.
MIN_RECORD_SIZE = _FIXED_V4V4 + 1 + 2


class RecordError(ValueError):
    """A commit-log record or batch body is malformed (bad magic, inconsistent sizes, truncated)."""


def body_crc(body: bytes) -> int:
    """BODYCRC as stored: CRC32 of the body masked to 31 bits."""
    return zlib.crc32(body) & _MASK31


def record_size(body_len: int, topic_len_bytes: int, props_len_bytes: int, born_v6: bool, store_v6: bool) -> int:
    """TOTALSIZE of a record; V2 (2-byte topic length) iff the topic is longer than 127 bytes."""
    return (
        88
        + (12 if born_v6 else 0)
        + (12 if store_v6 else 0)
        + body_len
        + (2 if topic_len_bytes > _V1_MAX_TOPIC else 1)
        + topic_len_bytes
        + 2
        + props_len_bytes
    )


def pack_record_into(
    buf,
    pos: int,
    *,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    topic: bytes,
    properties: bytes,
    body_crc: int | None = None,
) -> int:
    """Write one record at buf[pos:] and return its size.

    The V6 sysflag bits are set from the packed host lengths (8 = IPv4, 20 = IPv6). Raises ValueError for an
    unsupported host length or a topic/properties too long for the record format, IndexError/struct.error if buf is
    too small (check space with :func:`record_size` first).
    """
    born_len = len(born_host)
    store_len = len(store_host)
    fixed = _PACK_FIXED.get((born_len, store_len))
    if fixed is None:
        raise ValueError(f"packed hosts must be 8 or 20 bytes, got born={born_len} store={store_len}")
    body_len = len(body)
    topic_len = len(topic)
    props_len = len(properties)
    if props_len > MAX_PROPERTIES_BYTES:
        raise ValueError(f"properties too long: {props_len} bytes > {MAX_PROPERTIES_BYTES}")
    if topic_len > _V1_MAX_TOPIC:
        if topic_len > _V2_MAX_TOPIC:
            raise ValueError(f"topic too long: {topic_len} bytes > {_V2_MAX_TOPIC}")
        magic = MAGIC_V2
        topic_len_width = 2
    else:
        magic = MAGIC_V1
        topic_len_width = 1
    sys_flag &= ~_HOST_V6_FLAGS
    if born_len == 20:
        sys_flag |= BORNHOST_V6_FLAG
    if store_len == 20:
        sys_flag |= STOREHOST_V6_FLAG
    fixed_size = fixed.size
    size = fixed_size + body_len + topic_len_width + topic_len + 2 + props_len
    if body_crc is None:
        body_crc = zlib.crc32(body) & _MASK31
    fixed.pack_into(
        buf, pos,
        size, magic, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_timestamp,
        born_host, store_timestamp, store_host, reconsume_times, prepared_transaction_offset, body_len,
    )
    p = pos + fixed_size
    end = p + body_len
    buf[p:end] = body
    if topic_len_width == 1:
        buf[end] = topic_len
        p = end + 1
    else:
        _SHORT.pack_into(buf, end, topic_len)
        p = end + 2
    end = p + topic_len
    buf[p:end] = topic
    _SHORT.pack_into(buf, end, props_len)
    p = end + 2
    buf[p : p + props_len] = properties
    return size


def encode_record(**fields) -> bytes:
    """Same keyword arguments as :func:`pack_record_into`; returns the record as bytes."""
    size = record_size(
        len(fields["body"]), len(fields["topic"]), len(fields["properties"]),
        len(fields["born_host"]) == 20, len(fields["store_host"]) == 20,
    )
    buf = bytearray(size)
    written = pack_record_into(buf, 0, **fields)
    assert written == size
    return bytes(buf)


def pack_blank_marker_into(buf, pos: int, remaining: int) -> None:
    """Write the 8-byte end-of-file marker: TOTALSIZE = bytes left in the file, MAGIC = BLANK."""
    _SIZE_MAGIC.pack_into(buf, pos, remaining, BLANK_MAGIC)


@dataclass(slots=True)
class MessageRecord:
    """One decoded commit-log record. Hosts are (ip, port); ``properties`` is {} when decoding was skipped."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]
    raw_properties: bytes = b""

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        value = self.properties.get(PROPERTY_KEYS)
        return value.split() if value else []

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def offset_msg_id(self) -> str:
        """The broker's id for this record: store host + physical offset."""
        return offset_msg_id(pack_host(*self.store_host), self.physical_offset)

    @property
    def msg_id(self) -> str:
        """What Java's MessageExt.getMsgId() returns for a consumed message: UNIQ_KEY, else the offset id."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & TRANSACTION_TYPE_MASK

    def decode_properties(self) -> dict[str, str]:
        """Decode ``raw_properties`` into ``properties`` (for records decoded with decode_properties=False)."""
        self.properties = _decode_props_bytes(self.raw_properties)
        return self.properties


def _decode_props_bytes(raw: bytes) -> dict[str, str]:
    if not raw:
        return {}
    return _decode_props_str(raw.decode("utf-8", "replace"))


def decode_record(buf, pos: int = 0, *, decode_properties: bool = True) -> MessageRecord:
    """Decode the record at buf[pos:]; RecordError on bad magic, inconsistent sizes or truncation."""
    if type(buf) is not bytes:
        # mmap / bytearray / memoryview: copy just this record (bounded by the buffer) and decode it from 0.
        if len(buf) - pos < 4:
            raise RecordError(f"truncated record at {pos}: {max(len(buf) - pos, 0)} bytes left")
        total = _INT.unpack_from(buf, pos)[0]
        buf = bytes(buf[pos : pos + max(total, MIN_RECORD_SIZE)])
        pos = 0
    for record in _iter_decode(buf, pos, pos + 1, decode_properties):
        return record
    raise RecordError(f"no record at position {pos}")  # pragma: no cover - _iter_decode always yields or raises


def iter_records(buf, *, decode_properties: bool = True, caches: tuple[dict, dict] | None = None
                 ) -> Iterator[MessageRecord]:
    """Decode concatenated records (a pull response body); RecordError if the data is malformed or truncated.
    ``caches`` (two dicts, e.g. ``({}, {})``) may be shared by the calls decoding the buffers of one read, so
    topics and hosts are decoded once per read rather than once per buffer (a read of scattered records has one
    buffer per record)."""
    return _iter_decode(buf, 0, len(buf), decode_properties, caches)


def _iter_decode(buf, pos: int, stop: int, decode_props: bool,
                 caches: tuple[dict, dict] | None = None) -> Iterator[MessageRecord]:
    """Decode records starting at pos while pos < stop (stop = pos + 1 decodes exactly one)."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    buf_len = len(buf)
    unpack_v4v4 = _V4V4.unpack_from
    unpack_int = _INT.unpack_from
    unpack_short = _SHORT.unpack_from
    topics: dict[bytes, str]
    hosts: dict[tuple[int, int], tuple[str, int]]
    topics, hosts = caches if caches is not None else ({}, {})
    decode_props_str = _decode_props_str
    while pos < stop:
        if buf_len - pos < MIN_RECORD_SIZE:
            raise RecordError(f"truncated record at {pos}: {buf_len - pos} bytes left")
        sys_flag = unpack_int(buf, pos + 36)[0]
        if not sys_flag & _HOST_V6_FLAGS:
            (total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts,
             born_ip, born_port, store_ts, store_ip, store_port, reconsume, prepared, body_len) = unpack_v4v4(buf, pos)
            born_host = hosts.get((born_ip, born_port))
            if born_host is None:
                born_host = hosts[(born_ip, born_port)] = (_ipv4_str(born_ip), born_port)
            store_host = hosts.get((store_ip, store_port))
            if store_host is None:
                store_host = hosts[(store_ip, store_port)] = (_ipv4_str(store_ip), store_port)
            p = pos + _FIXED_V4V4
        else:
            (total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
             born_ts) = _HEAD.unpack_from(buf, pos)
            p = pos + _HEAD_SIZE
            born_width = 20 if sys_flag & BORNHOST_V6_FLAG else 8
            store_width = 20 if sys_flag & STOREHOST_V6_FLAG else 8
            if buf_len - pos < MIN_RECORD_SIZE + born_width + store_width - 16:
                raise RecordError(f"truncated record at {pos}: {buf_len - pos} bytes left")
            born_host = _unpack_cached(bytes(buf[p : p + born_width]))
            p += born_width
            store_ts = _STORE_TS.unpack_from(buf, p)[0]
            p += 8
            store_host = _unpack_cached(bytes(buf[p : p + store_width]))
            p += store_width
            reconsume, prepared, body_len = _MID.unpack_from(buf, p)
            p += 16
        end = pos + total
        if magic == MAGIC_V1:
            topic_width = 1
        elif magic == MAGIC_V2:
            topic_width = 2
        else:
            raise RecordError(f"bad magic {magic & 0xFFFFFFFF:#010x} at {pos}")
        if total > buf_len - pos:
            raise RecordError(f"truncated record at {pos}: TOTALSIZE {total} > {buf_len - pos} bytes left")
        if body_len < 0 or p + body_len + topic_width + 2 > end:
            raise RecordError(f"bad body length {body_len} in record at {pos} (TOTALSIZE {total})")
        body = buf[p : p + body_len]
        p += body_len
        if topic_width == 1:
            topic_len = buf[p]
            if topic_len > 127:  # signed byte in Java
                raise RecordError(f"bad topic length {topic_len - 256} in record at {pos}")
            p += 1
        else:
            topic_len = unpack_short(buf, p)[0]
            p += 2
        topic_end = p + topic_len
        if topic_len < 0 or topic_end + 2 > end:
            raise RecordError(f"bad topic length {topic_len} in record at {pos}")
        topic_raw = buf[p:topic_end]
        topic = topics.get(topic_raw)
        if topic is None:
            topic = topics[topic_raw] = _decode_text(topic_raw)
        props_len = unpack_short(buf, topic_end)[0]
        p = topic_end + 2
        if props_len < 0 or p + props_len != end:
            raise RecordError(
                f"record at {pos}: TOTALSIZE {total} disagrees with its fields (properties length {props_len})"
            )
        raw_props = buf[p:end]
        if decode_props and props_len:
            properties = decode_props_str(raw_props.decode("utf-8", "replace"))
        else:
            properties = {}
        yield MessageRecord(
            total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, born_host,
            store_ts, store_host, reconsume, prepared, body, topic, properties, raw_props,
        )
        pos = end


def _ipv4_str(ip: int) -> str:
    return f"{ip >> 24}.{(ip >> 16) & 255}.{(ip >> 8) & 255}.{ip & 255}"


def _decode_text(raw) -> str:
    return bytes(raw).decode("utf-8", "replace")


def check_record(buf, pos: int, limit: int, verify_crc: bool = True, check_names: bool = True) -> int:
    """Validate the record at buf[pos:limit] for recovery.

    Returns its TOTALSIZE if magic, sizes (TOTALSIZE equals the size recomputed from the parsed lengths), topic
    and queue id (``protocol.names``: they become store paths; ``check_names=False`` for a reader that makes no
    path of them, such as the Spark reader) and, when verify_crc, BODYCRC are all consistent; -1 for a BLANK
    end-of-file marker; 0 for end of valid data (zero fill, garbage, an illegal topic or queue id, or a record
    truncated by ``limit``). ``record_names_problem_at`` says which name was wrong.
    """
    left = limit - pos
    if left < BLANK_MARKER_SIZE:
        return 0
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return -1
    if magic == MAGIC_V1:
        topic_width = 1
    elif magic == MAGIC_V2:
        topic_width = 2
    else:
        return 0
    if total < MIN_RECORD_SIZE or total > left:
        return 0
    end = pos + total
    sys_flag = _INT.unpack_from(buf, pos + 36)[0]
    p = pos + 88 + (12 if sys_flag & BORNHOST_V6_FLAG else 0) + (12 if sys_flag & STOREHOST_V6_FLAG else 0)
    if p > end:
        return 0
    body_len = _INT.unpack_from(buf, p - 4)[0]
    if body_len < 0 or p + body_len + topic_width + 2 > end:
        return 0
    body_start = p
    p += body_len
    if topic_width == 1:
        topic_len = _BYTE.unpack_from(buf, p)[0]
    else:
        topic_len = _SHORT.unpack_from(buf, p)[0]
    p += topic_width
    if topic_len < 0 or p + topic_len + 2 > end:
        return 0
    if check_names and record_names_problem(buf[p:p + topic_len], _INT.unpack_from(buf, pos + 12)[0]) is not None:
        return 0  # the topic bytes are not CRC-covered: a name that is no topic would become a path
    p += topic_len
    props_len = _SHORT.unpack_from(buf, p)[0]
    if props_len < 0 or p + 2 + props_len != end:
        return 0
    if verify_crc:
        stored_crc = _INT.unpack_from(buf, pos + 8)[0]
        if zlib.crc32(buf[body_start : body_start + body_len]) & _MASK31 != stored_crc:
            return 0
    return total


def record_names_problem_at(buf, pos: int, limit: int) -> str | None:
    """The reason a record whose sizes are consistent has an illegal topic or queue id; None when its names are
    legal or it is not such a record (then ``check_record`` rejected it for its sizes or magic)."""
    if limit - pos < MIN_RECORD_SIZE:
        return None
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2) or total < MIN_RECORD_SIZE or total > limit - pos:
        return None
    sys_flag = _INT.unpack_from(buf, pos + 36)[0]
    p = pos + 88 + (12 if sys_flag & BORNHOST_V6_FLAG else 0) + (12 if sys_flag & STOREHOST_V6_FLAG else 0)
    end = pos + total
    if p > end:
        return None
    body_len = _INT.unpack_from(buf, p - 4)[0]
    width = 1 if magic == MAGIC_V1 else 2
    if body_len < 0 or p + body_len + width + 2 > end:
        return None
    p += body_len
    topic_len = (_BYTE if width == 1 else _SHORT).unpack_from(buf, p)[0]
    p += width
    if topic_len < 0 or p + topic_len + 2 > end:
        return None
    props_len = _SHORT.unpack_from(buf, p + topic_len)[0]
    if props_len < 0 or p + topic_len + 2 + props_len != end:
        return None
    return record_names_problem(buf[p:p + topic_len], _INT.unpack_from(buf, pos + 12)[0])


# --- batch body (§4.3.4) -------------------------------------------------------------------------------------------

_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE MAGIC(0) BODYCRC(0) FLAG BODYLEN
_BATCH_OVERHEAD = _BATCH_HEAD.size + 2


@dataclass(slots=True)
class BatchEntry:
    """One message of a SEND_BATCH_MESSAGE body."""

    flag: int
    body: bytes
    properties: str


def encode_batch_body(entries: Iterable[BatchEntry]) -> bytes:
    """Client-side batch encoding: TOTALSIZE, MAGIC 0, BODYCRC 0, FLAG, BODYLEN, BODY, PROPLEN (int16), PROPERTIES."""
    parts: list[bytes] = []
    pack_head = _BATCH_HEAD.pack
    pack_short = _SHORT.pack
    for entry in entries:
        props = entry.properties.encode("utf-8")
        if len(props) > MAX_PROPERTIES_BYTES:
            raise ValueError(f"batch entry properties too long: {len(props)} bytes > {MAX_PROPERTIES_BYTES}")
        body = entry.body
        parts.append(pack_head(_BATCH_OVERHEAD + len(body) + len(props), 0, 0, entry.flag, len(body)))
        parts.append(body)
        parts.append(pack_short(len(props)))
        parts.append(props)
    return b"".join(parts)


def iter_batch_entries(body: bytes) -> Iterator[tuple[int, bytes, bytes]]:
    """(FLAG, BODY, raw PROPERTIES bytes) of each batch entry, for the broker's send path: nothing is decoded to
    text, so the caller can keep well-formed properties as bytes. RecordError names the entry and field at fault."""
    if isinstance(body, memoryview):
        body = body.tobytes()
    pos = 0
    index = 0
    size = len(body)
    unpack_head = _BATCH_HEAD.unpack_from
    unpack_short = _SHORT.unpack_from
    head_size = _BATCH_HEAD.size
    while pos < size:
        if size - pos < _BATCH_OVERHEAD:
            raise RecordError(f"batch entry {index} at byte {pos}: truncated header ({size - pos} bytes left)")
        total, _magic, _crc, flag, body_len = unpack_head(body, pos)
        end = pos + total
        if total < _BATCH_OVERHEAD or total > size - pos:
            raise RecordError(f"batch entry {index} at byte {pos}: bad TOTALSIZE {total} ({size - pos} bytes left)")
        p = pos + head_size
        body_end = p + body_len
        if body_len < 0 or body_end + 2 > end:
            raise RecordError(f"batch entry {index} at byte {pos}: bad BODYLEN {body_len} for TOTALSIZE {total}")
        props_len = unpack_short(body, body_end)[0]
        if props_len < 0 or body_end + 2 + props_len != end:
            raise RecordError(
                f"batch entry {index} at byte {pos}: PROPLEN {props_len} disagrees with TOTALSIZE {total}"
            )
        yield flag, body[p:body_end], body[body_end + 2 : end]
        pos = end
        index += 1


def decode_batch_body(body: bytes) -> list[BatchEntry]:
    """Broker-side batch decoding; RecordError naming the entry and field if anything is inconsistent."""
    # Invalid UTF-8 is replaced, not rejected, as Java's new String(bytes, UTF_8) does.
    return [BatchEntry(flag, entry_body, props.decode("utf-8", "replace"))
            for flag, entry_body, props in iter_batch_entries(body)]
