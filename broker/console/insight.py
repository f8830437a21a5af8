"""The console's operator pages beyond topics and groups: a message's trace, producer connections, the broker's
configuration, and the resend audit of dead letters.

Each reads what the equivalent remoting request would answer, through the core's AdminService (``views.admin``,
the typed requests of broker/core/admin) or the store: traces are the trace topic's messages whose KEYS name the
msgId (QUERY_MESSAGE by key, the broker's index), decoded with protocol/trace.py; producers come from
GET_ALL_PRODUCER_INFO, the configuration from GET_BROKER_CONFIG with anything secret masked."""

from __future__ import annotations

import re
import zlib
from typing import Any

from broker.console.access import ConsoleError, Viewer, outcome_value
from broker.core.admin import AllProducersRequest, BrokerConfigRequest
from broker.core.outcome import Requester
from protocol.message import RecordError, decode_record
from protocol.trace import TRACE_TOPIC, decode_records, message_trace

__all__ = ["broker_config", "producer_list", "trace_of", "trace_topic_name", "SECRET_KEY_PATTERN", "MASK"]

TRACE_SCAN_LIMIT = 256  # trace messages one trace query decodes at most
MASK = "******"
# keys whose values are secrets (secretKey is never handed out at all; the pattern guards whatever else appears)
SECRET_KEY_PATTERN = re.compile(r"secret|password|passwd|token|credential|private", re.IGNORECASE)
_INNER_PRODUCER = "CLIENT_INNER_PRODUCER"
_COMPRESSED = 0x1


_CONSOLE = Requester("console", "console")


def _properties(views: Any, request: BrokerConfigRequest | None = None) -> dict[str, str]:
    """The broker's settings (GET_BROKER_CONFIG's), keys and values trimmed as that answer's lines are read."""
    props = outcome_value(views.admin.broker_config(request or BrokerConfigRequest(_CONSOLE)))
    return {key.strip(): str(value).strip() for key, value in props.items() if key.strip()}


async def broker_config(views: Any, viewer: Viewer) -> dict[str, Any]:
    """The effective configuration (GET_BROKER_CONFIG, admin only), secrets masked."""
    request = BrokerConfigRequest(_CONSOLE)
    viewer.require_request(request, "the broker's configuration (GET_BROKER_CONFIG)")
    props = _properties(views, request)
    entries = []
    for key in sorted(props, key=str.lower):
        secret = bool(SECRET_KEY_PATTERN.search(key))
        entries.append({"key": key, "value": MASK if secret and props[key] else props[key], "masked": secret})
    return {"entries": entries}


async def trace_topic_name(views: Any) -> str:
    """The broker's msgTraceTopicName (the topic its clients are told to write traces to)."""
    try:
        props = _properties(views)
    except ConsoleError:
        return TRACE_TOPIC
    return props.get("msgTraceTopicName") or TRACE_TOPIC


async def producer_list(views: Any, viewer: Viewer) -> dict[str, Any]:
    """Every producer group with its live connections (GET_ALL_PRODUCER_INFO, admin only: it lists addresses)."""
    request = AllProducersRequest(_CONSOLE)
    viewer.require_request(request, "the producer connections (GET_ALL_PRODUCER_INFO)")
    table = outcome_value(views.admin.all_producers(request)).data
    groups = []
    for group in sorted(g for g in table if g != _INNER_PRODUCER):
        clients = [{"clientId": c.get("clientId"), "addr": c.get("remoteIP"), "language": c.get("language"),
                    "version": c.get("version"), "lastUpdateTimestamp": c.get("lastUpdateTimestamp")}
                   for c in table[group]]
        clients.sort(key=lambda c: str(c["clientId"]))
        groups.append({"group": group, "clients": clients})
    return {"groups": groups}


def trace_of(views: Any, msg_id: str, trace_topic: str, viewer: Viewer) -> dict[str, Any]:
    """A message's trace: its sends, store host, and each consumer group's consumptions (reading the trace topic
    needs SUB on it, as QUERY_MESSAGE would)."""
    msg_id = msg_id.strip()
    if not msg_id:
        raise ConsoleError(400, "name the message by its id (the UNIQ_KEY a producer got back)")
    viewer.require_topic_read(trace_topic, f"reading the message traces in {trace_topic}")
    if views.topics.get(trace_topic) is None:
        raise ConsoleError(404, f"the trace topic {trace_topic} does not exist on this broker (set "
                                "traceTopicEnable=true, or let a client with tracing create it)")
    found = []
    result = views.store.query_message(trace_topic, msg_id, TRACE_SCAN_LIMIT, 0, 2 ** 62)
    for raw in result.records:
        try:
            record = decode_record(raw)
        except (RecordError, ValueError):
            continue
        if record.topic != trace_topic:
            continue
        host = "%s:%d" % record.born_host
        body = record.body
        if record.sys_flag & _COMPRESSED:  # a Java trace producer compresses bodies over 4 KiB
            try:
                body = zlib.decompressobj().decompress(body, 4 * 1024 * 1024)
            except zlib.error:
                continue
        found.extend((r, host) for r in decode_records(body))
    trace = message_trace(found, msg_id)
    trace["traceTopic"] = trace_topic
    return trace
