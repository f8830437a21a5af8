"""Message-trace records in the reference clients' format (sans-I/O): encode, decode, and assemble one message's trace.

A trace message is an ordinary message on the trace topic (``RMQ_SYS_TRACE_TOPIC`` unless the broker's
``msgTraceTopicName`` says otherwise). Its body is UTF-8 text holding one or more records; each record is its fields
joined by char 1 and ended by char 2. The first field names the record's type:

  Pub            type, time, region, producer group, topic, msgId, tags, keys, store host, body length, cost ms,
                 message type (0 normal, 1 transaction half, 2 transaction commit, 3 delay, 4 order), offset msgId,
                 success (old writers: 13 fields without the offset msgId; some add the client host as a 15th)
  SubBefore      type, time, region, consumer group, request id, msgId, retry times, keys
  SubAfter       type, request id, msgId, cost ms, success, keys, context code, time, consumer group
                 (the last two are missing from old writers: the matching SubBefore, same request id, has them)
  EndTransaction type, time, region, group, topic, msgId, tags, keys, store host, message type, transaction id,
                 transaction state, from a transaction check
  Recall         type, time, region, group, topic, msgId, success

The trace message's KEYS are the traced msgIds and their keys (space separated), so the broker's index finds the
trace messages of a msgId with QUERY_MESSAGE by key. A Java writer prints a missing value as ``null``; the decoder
reads that as empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CONTENT_SEP", "FIELD_SEP", "TRACE_TOPIC", "TraceRecord", "MessageType", "ContextCode",
           "encode_records", "decode_records", "trace_keys", "message_trace", "MAX_TRACE_BODY"]

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
CONTENT_SEP = "\x01"
FIELD_SEP = "\x02"
MAX_TRACE_BODY = 128_000  # the reference clients' trace producers cap a trace message here


class MessageType:
    """The reference's MessageType ordinals, as written in Pub records."""

    NORMAL = 0
    TRANS_HALF = 1
    TRANS_COMMIT = 2
    DELAY = 3
    ORDER = 4
    NAMES = ("Normal", "Trans", "TransCommit", "Delay", "Order")


class ContextCode:
    """The reference's ConsumeReturnType ordinals, as written in SubAfter records."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURN_NULL = 3
    FAILED = 4
    NAMES = ("SUCCESS", "TIME_OUT", "EXCEPTION", "RETURNNULL", "FAILED")


@dataclass(slots=True)
class TraceRecord:
    """One record of any type; fields a type does not carry keep their defaults."""

    type: str
    timestamp: int = 0
    region_id: str = ""
    group: str = ""
    topic: str = ""
    msg_id: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    body_length: int = 0
    cost_ms: int = 0
    msg_type: int = MessageType.NORMAL
    offset_msg_id: str = ""
    success: bool = True
    client_host: str = ""
    request_id: str = ""
    retry_times: int = 0
    context_code: int = ContextCode.SUCCESS
    transaction_id: str = ""
    transaction_state: str = ""
    from_check: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return text.replace(CONTENT_SEP, " ").replace(FIELD_SEP, " ")


def _encode_one(r: TraceRecord) -> str:
    t = r.type
    if t == "Pub":
        parts = [t, r.timestamp, r.region_id, r.group, r.topic, r.msg_id, r.tags, r.keys, r.store_host,
                 r.body_length, r.cost_ms, r.msg_type, r.offset_msg_id, r.success]
    elif t == "SubBefore":
        parts = [t, r.timestamp, r.region_id, r.group, r.request_id, r.msg_id, r.retry_times, r.keys]
    elif t == "SubAfter":
        parts = [t, r.request_id, r.msg_id, r.cost_ms, r.success, r.keys, r.context_code, r.timestamp, r.group]
    elif t == "EndTransaction":
        parts = [t, r.timestamp, r.region_id, r.group, r.topic, r.msg_id, r.tags, r.keys, r.store_host, r.msg_type,
                 r.transaction_id, r.transaction_state, r.from_check]
    elif t == "Recall":
        parts = [t, r.timestamp, r.region_id, r.group, r.topic, r.msg_id, r.success]
    else:
        raise ValueError(f"unknown trace record type {t!r}")
    return CONTENT_SEP.join(_text(p) for p in parts) + FIELD_SEP


def encode_records(records: Iterable[TraceRecord]) -> bytes:
    """The body of one trace message holding ``records``, in order."""
    return "".join(_encode_one(r) for r in records).encode("utf-8")


def trace_keys(records: Iterable[TraceRecord]) -> list[str]:
    """The KEYS of a trace message: each traced msgId and its keys, once each, in first-seen order."""
    seen: dict[str, None] = {}
    for r in records:
        if r.msg_id:
            seen.setdefault(r.msg_id, None)
        for key in r.keys.split():
            seen.setdefault(key, None)
    return list(seen)


def _s(value: str) -> str:
    return "" if value == "null" else value


def _i(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0


def _b(value: str) -> bool:
    return value.strip().lower() == "true"


def _decode_one(line: list[str]) -> TraceRecord | None:
    kind = line[0]
    n = len(line)
    if kind == "Pub" and n >= 13:
        r = TraceRecord("Pub", _i(line[1]), _s(line[2]), _s(line[3]), _s(line[4]), _s(line[5]), _s(line[6]),
                        _s(line[7]), _s(line[8]), _i(line[9]), _i(line[10]), _i(line[11]))
        if n == 13:
            r.success = _b(line[12])
        else:
            r.offset_msg_id, r.success = _s(line[12]), _b(line[13])
            if n >= 15:
                r.client_host = _s(line[14])
        return r
    if kind == "SubBefore" and n >= 8:
        return TraceRecord("SubBefore", _i(line[1]), _s(line[2]), _s(line[3]), request_id=_s(line[4]),
                           msg_id=_s(line[5]), retry_times=_i(line[6]), keys=_s(line[7]))
    if kind == "SubAfter" and n >= 6:
        r = TraceRecord("SubAfter", request_id=_s(line[1]), msg_id=_s(line[2]), cost_ms=_i(line[3]),
                        success=_b(line[4]), keys=_s(line[5]))
        if n >= 7 and line[6]:
            r.context_code = _i(line[6])
        if n >= 9:
            r.timestamp, r.group = _i(line[7]), _s(line[8])
        return r
    if kind == "EndTransaction" and n >= 13:
        return TraceRecord("EndTransaction", _i(line[1]), _s(line[2]), _s(line[3]), _s(line[4]), _s(line[5]),
                           _s(line[6]), _s(line[7]), _s(line[8]), msg_type=_i(line[9]), transaction_id=_s(line[10]),
                           transaction_state=_s(line[11]), from_check=_b(line[12]))
    if kind == "Recall" and n >= 7:
        return TraceRecord("Recall", _i(line[1]), _s(line[2]), _s(line[3]), _s(line[4]), _s(line[5]),
                           success=_b(line[6]))
    return None


def decode_records(body: bytes | str) -> list[TraceRecord]:
    """Every well-formed record of a trace message body; unknown or short records are skipped (a newer writer's
    record types, a torn write), never an error."""
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else body
    out = []
    for chunk in text.split(FIELD_SEP):
        if not chunk:
            continue
        record = _decode_one(chunk.split(CONTENT_SEP))
        if record is not None:
            out.append(record)
    return out


def message_trace(found: Iterable[tuple[TraceRecord, str]], msg_id: str) -> dict[str, Any]:
    """One message's trace from the records of its trace messages, each with the host the trace message was sent
    from: its sends (Pub), each consumer group's consumptions (a SubAfter with its SubBefore, matched by request
    id), and transaction ends. Times are ms since the epoch; cost in ms."""
    sends: list[dict[str, Any]] = []
    ends: list[dict[str, Any]] = []
    befores: dict[str, tuple[TraceRecord, str]] = {}
    afters: list[tuple[TraceRecord, str]] = []
    for record, client_host in found:
        if record.msg_id != msg_id:
            continue
        if record.type == "Pub":
            sends.append({"producerGroup": record.group, "topic": record.topic, "tags": record.tags,
                          "keys": record.keys, "time": record.timestamp, "costMs": record.cost_ms,
                          "storeHost": record.store_host, "offsetMsgId": record.offset_msg_id,
                          "bodyLength": record.body_length,
                          "msgType": MessageType.NAMES[record.msg_type]
                          if 0 <= record.msg_type < len(MessageType.NAMES) else str(record.msg_type),
                          "status": "success" if record.success else "failed",
                          "clientHost": record.client_host or client_host, "region": record.region_id})
        elif record.type == "SubBefore":
            befores[record.request_id] = (record, client_host)
        elif record.type == "SubAfter":
            afters.append((record, client_host))
        elif record.type == "EndTransaction":
            ends.append({"producerGroup": record.group, "time": record.timestamp, "state": record.transaction_state,
                         "fromCheck": record.from_check, "transactionId": record.transaction_id,
                         "clientHost": client_host})
    groups: dict[str, list[dict[str, Any]]] = {}
    matched: set[str] = set()
    for after, client_host in afters:
        before = befores.get(after.request_id)
        if before is not None:
            matched.add(after.request_id)
        group = after.group or (before[0].group if before else "")
        begin = before[0].timestamp if before else 0
        groups.setdefault(group, []).append({
            "consumerGroup": group, "time": begin or after.timestamp, "endTime": after.timestamp or None,
            "costMs": after.cost_ms, "status": "success" if after.success else "failed",
            "result": ContextCode.NAMES[after.context_code]
            if 0 <= after.context_code < len(ContextCode.NAMES) else str(after.context_code),
            "retryTimes": before[0].retry_times if before else 0, "clientHost": client_host,
            "requestId": after.request_id})
    for request_id, (before, client_host) in befores.items():
        if request_id not in matched:  # consumption began and no end was recorded (yet)
            groups.setdefault(before.group, []).append({
                "consumerGroup": before.group, "time": before.timestamp, "endTime": None, "costMs": None,
                "status": "in progress", "result": None, "retryTimes": before.retry_times,
                "clientHost": client_host, "requestId": request_id})
    for entries in groups.values():
        entries.sort(key=lambda e: e["time"] or 0)
    sends.sort(key=lambda s: s["time"])
    return {"msgId": msg_id, "sends": sends, "transactions": ends,
            "consumers": [{"consumerGroup": g, "consumptions": groups[g]} for g in sorted(groups)]}
