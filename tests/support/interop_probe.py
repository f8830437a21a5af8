"""A deliberately tiny, independent RocketMQ remoting probe for the interop tests.

It does not use the project's protocol/ or client/ code on purpose: the interop tests check what the
broker puts on the wire against a second, separately written reading of the protocol (JSON headers only,
v1 message records), so a bug shared by the project's encoder and decoder cannot hide.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
from dataclasses import dataclass, field

GET_ROUTEINFO_BY_TOPIC = 105
PULL_MESSAGE = 11
QUERY_CONSUMER_OFFSET = 14
GET_MAX_OFFSET = 30
SUCCESS = 0
PULL_NOT_FOUND = 19
PULL_RETRY_IMMEDIATELY = 20
QUERY_NOT_FOUND = 22

PULL_FLAG_SUBSCRIPTION = 4

_INT = struct.Struct(">i")
_RECORD_FIXED = struct.Struct(">iiiiiqqiq")  # size, magic, bodyCRC, queueId, flag, queueOffset, physOffset, sysFlag, bornTs
_MAGIC_V1 = -626843481
_MAGIC_V2 = -626843477
_BORN_V6 = 0x10
_STORE_V6 = 0x20
_opaques = itertools.count(1)


@dataclass
class Reply:
    code: int
    remark: str | None
    ext: dict
    body: bytes
    serialize_type: int


@dataclass
class StoredMessage:
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_host: str
    topic: str
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def offset_msg_id(self) -> str:
        """Store host + commit-log offset, upper-case hex: the id a client without UNIQ_KEY shows."""
        ip, port = self.store_host.rsplit(":", 1)
        packed = socket.inet_aton(ip) + _INT.pack(int(port)) + struct.pack(">q", self.physical_offset)
        return packed.hex().upper()


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def invoke(addr: str, code: int, ext: dict | None = None, body: bytes = b"", timeout: float = 10.0) -> Reply:
    """One JSON request/response on a fresh connection (as Java would encode it: every extField a string)."""
    host, port = addr.rsplit(":", 1)
    opaque = next(_opaques)
    header = {
        "code": code, "flag": 0, "language": "JAVA", "opaque": opaque, "version": 479,
        "serializeTypeCurrentRPC": "JSON",
        "extFields": {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in (ext or {}).items()},
    }
    raw_header = json.dumps(header, separators=(",", ":")).encode()
    frame = _INT.pack(4 + len(raw_header) + len(body)) + _INT.pack(len(raw_header)) + raw_header + body
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(frame)
        while True:
            length = _INT.unpack(_recv_exactly(sock, 4))[0]
            payload = _recv_exactly(sock, length)
            type_and_len = _INT.unpack_from(payload, 0)[0]
            serialize_type, header_len = (type_and_len >> 24) & 0xFF, type_and_len & 0xFFFFFF
            if serialize_type != 0:
                raise AssertionError(f"broker answered a JSON request with serialize type {serialize_type}")
            reply = json.loads(payload[4:4 + header_len])
            if reply.get("opaque") != opaque or not (reply.get("flag", 0) & 1):
                continue  # not our response (a broker-initiated request would be odd here, but skip it)
            return Reply(reply.get("code"), reply.get("remark"), reply.get("extFields") or {},
                         bytes(payload[4 + header_len:]), serialize_type)


def topic_route(namesrv: str, topic: str) -> dict | None:
    reply = invoke(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return json.loads(reply.body) if reply.code == SUCCESS else None


def max_offset(broker: str, topic: str, queue_id: int) -> int:
    reply = invoke(broker, GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
    assert reply.code == SUCCESS, f"GET_MAX_OFFSET {topic}/{queue_id}: code {reply.code} {reply.remark}"
    return int(reply.ext["offset"])


def consumer_offset(broker: str, topic: str, group: str, queue_id: int) -> int | None:
    """The committed offset, or None when the broker has none (QUERY_NOT_FOUND)."""
    reply = invoke(broker, QUERY_CONSUMER_OFFSET, {"topic": topic, "consumerGroup": group, "queueId": queue_id})
    if reply.code == QUERY_NOT_FOUND:
        return None
    assert reply.code == SUCCESS, f"QUERY_CONSUMER_OFFSET {topic}/{group}/{queue_id}: code {reply.code} {reply.remark}"
    return int(reply.ext["offset"])


def pull_all(broker: str, topic: str, group: str, queue_id: int, limit: int = 10_000) -> list[StoredMessage]:
    """Every message of one queue from offset 0, with subscription '*' and no long polling."""
    out: list[StoredMessage] = []
    offset = 0
    while len(out) < limit:
        reply = invoke(broker, PULL_MESSAGE, {
            "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
            "maxMsgNums": 32, "sysFlag": PULL_FLAG_SUBSCRIPTION, "commitOffset": 0,
            "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0, "expressionType": "TAG",
        })
        if reply.code in (PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY) and int(reply.ext.get("nextBeginOffset", offset)) == offset:
            return out
        assert reply.code in (SUCCESS, PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY), \
            f"PULL_MESSAGE {topic}/{queue_id}@{offset}: code {reply.code} {reply.remark}"
        if reply.code == SUCCESS:
            out.extend(decode_records(reply.body))
        next_offset = int(reply.ext["nextBeginOffset"])
        assert next_offset > offset, f"pull did not advance: {offset} -> {next_offset}"
        offset = next_offset
    return out


def _host(buf: bytes, pos: int, v6: bool) -> tuple[str, int]:
    if v6:
        return f"[{socket.inet_ntop(socket.AF_INET6, buf[pos:pos + 16])}]:{_INT.unpack_from(buf, pos + 16)[0]}", pos + 20
    return f"{socket.inet_ntoa(buf[pos:pos + 4])}:{_INT.unpack_from(buf, pos + 4)[0]}", pos + 8


def decode_records(buf: bytes) -> list[StoredMessage]:
    """Commit-log records as a pull returns them, concatenated."""
    out = []
    pos = 0
    while pos < len(buf):
        size, magic, _crc, queue_id, _flag, queue_offset, phys, sys_flag, _born_ts = _RECORD_FIXED.unpack_from(buf, pos)
        assert magic in (_MAGIC_V1, _MAGIC_V2), f"bad magic {magic:#x} at {pos}"
        p = pos + _RECORD_FIXED.size
        _born, p = _host(buf, p, bool(sys_flag & _BORN_V6))
        p += 8  # store timestamp
        store_host, p = _host(buf, p, bool(sys_flag & _STORE_V6))
        p += 4 + 8  # reconsume times, prepared transaction offset
        body_len = _INT.unpack_from(buf, p)[0]
        body = bytes(buf[p + 4:p + 4 + body_len])
        p += 4 + body_len
        if magic == _MAGIC_V1:
            topic_len = buf[p]
            p += 1
        else:
            topic_len = struct.unpack_from(">h", buf, p)[0]
            p += 2
        topic = bytes(buf[p:p + topic_len]).decode()
        p += topic_len
        props_len = struct.unpack_from(">h", buf, p)[0]
        props_raw = bytes(buf[p + 2:p + 2 + props_len]).decode()
        p += 2 + props_len
        assert p - pos == size, f"record at {pos}: fields end at {p - pos}, total size says {size}"
        props = dict(item.split("\x01", 1) for item in props_raw.split("\x02") if "\x01" in item)
        out.append(StoredMessage(queue_id, queue_offset, phys, store_host, topic, body, props))
        pos += size
    return out
