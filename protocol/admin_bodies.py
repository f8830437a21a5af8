"""Bodies of admin requests (mqadmin <-> broker), in the reference broker's formats.

Several Java admin bodies are maps keyed by a ``MessageQueue`` object (TopicStatsTable, ConsumeStats).
fastjson writes such keys as JSON objects, e.g. ``{"offsetTable":{{"brokerName":"b","queueId":0,
"topic":"T"}:{"maxOffset":3,...}}}`` — not valid standard JSON. We write that shape (Java admin tools
parse it) and read it back with `loads_fastjson`, a small parser that accepts object and number keys.

Classes: TopicOffset, TopicStatsTable (GET_TOPIC_STATS_INFO 202), OffsetWrapper, ConsumeStats
(GET_CONSUME_STATS 208), Connection, ConsumerConnection (GET_CONSUMER_CONNECTION_LIST 203),
KVTable (GET_BROKER_RUNTIME_INFO 28). Plain-JSON bodies reuse protocol.config_bodies (TopicConfigSerializeWrapper,
SubscriptionGroupConfig) and protocol.bodies (ClusterInfo, TopicList).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from protocol.bodies import MessageQueue, SubscriptionData
from protocol.json_body import as_dict, as_enum_name, as_int, as_str
from protocol.bodies import CONSUME_FROM_WHERE, CONSUME_TYPES, MESSAGE_MODELS
from protocol.jsonlenient import dumps_compact

__all__ = [
    "loads_fastjson",
    "TopicOffset",
    "TopicStatsTable",
    "OffsetWrapper",
    "ConsumeStats",
    "Connection",
    "ConsumerConnection",
    "ProducerConnection",
    "ProducerTableInfo",
    "KVTable",
]

# ---------------------------------------------------------------------------------------------
# a JSON reader that accepts non-string object keys (fastjson maps keyed by beans or numbers)

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_LITERALS = {"true": True, "false": False, "null": None}


class FrozenObject(tuple):
    """A JSON object used as a map key: hashable, ``dict(key)`` gives the fields back."""

    __slots__ = ()


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenObject(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


class _Reader:
    __slots__ = ("text", "pos")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, what: str) -> ValueError:
        return ValueError(f"{what} at position {self.pos}")

    def skip(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()

    def value(self) -> Any:
        self.skip()
        text, pos = self.text, self.pos
        if pos >= len(text):
            raise self.fail("unexpected end of data")
        ch = text[pos]
        if ch == "{":
            return self.obj()
        if ch == "[":
            return self.array()
        if ch == '"':
            result, self.pos = json.decoder.scanstring(text, pos + 1)
            return result
        match = _NUMBER.match(text, pos)
        if match:
            self.pos = match.end()
            literal = match.group()
            return float(literal) if any(c in literal for c in ".eE") else int(literal)
        for word, result in _LITERALS.items():
            if text.startswith(word, pos):
                self.pos = pos + len(word)
                return result
        raise self.fail("unexpected character %r" % ch)

    def obj(self) -> dict:
        self.pos += 1
        out: dict = {}
        self.skip()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            key = _freeze(self.value())
            self.skip()
            if not self.text.startswith(":", self.pos):
                raise self.fail("expected ':'")
            self.pos += 1
            out[key] = self.value()
            self.skip()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("}", self.pos):
                self.pos += 1
                return out
            raise self.fail("expected ',' or '}'")

    def array(self) -> list:
        self.pos += 1
        out: list = []
        self.skip()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            self.skip()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("]", self.pos):
                self.pos += 1
                return out
            raise self.fail("expected ',' or ']'")


def loads_fastjson(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON that may use objects or numbers as object keys (keys become FrozenObject / int)."""
    text = bytes(data).decode("utf-8") if not isinstance(data, str) else data
    reader = _Reader(text)
    result = reader.value()
    reader.skip()
    if reader.pos != len(text):
        raise reader.fail("trailing data")
    return result


def _as_obj(obj: Any) -> dict:
    if isinstance(obj, (bytes, bytearray, memoryview, str)):
        obj = loads_fastjson(obj)
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _queue_from_key(key: Any) -> MessageQueue | None:
    if isinstance(key, FrozenObject):
        return MessageQueue.from_json(dict(key))
    if isinstance(key, dict):
        return MessageQueue.from_json(key)
    if isinstance(key, str) and key.startswith("{"):
        try:
            return MessageQueue.from_json(json.loads(key))
        except ValueError:
            return None
    return None


def _queue_key(mq: MessageQueue) -> str:
    return dumps_compact(mq.to_json()).decode("utf-8")


def _queue_table_json(table: dict[MessageQueue, Any], extra: dict[str, Any]) -> bytes:
    """fastjson shape: ``{"offsetTable":{<MessageQueue object>:<value object>,...}, ...extra}``."""
    entries = ",".join(f"{_queue_key(mq)}:{dumps_compact(v.to_json()).decode('utf-8')}"
                       for mq, v in sorted(table.items()))
    parts = [f'"{k}":{dumps_compact(v).decode("utf-8")}' for k, v in sorted(extra.items())]
    parts.append('"offsetTable":{' + entries + "}")
    return ("{" + ",".join(sorted(parts)) + "}").encode("utf-8")


def _parse_queue_table(raw: Any, value_type: Any) -> dict[MessageQueue, Any]:
    table: dict[MessageQueue, Any] = {}
    if isinstance(raw, dict):
        for key, value in raw.items():
            mq = _queue_from_key(key)
            if mq is not None and isinstance(value, dict):
                table[mq] = value_type.from_json(value)
    elif isinstance(raw, list):  # tolerated alternative: [{"messageQueue": {...}, ...}, ...]
        for entry in raw:
            if isinstance(entry, dict) and isinstance(entry.get("messageQueue"), dict):
                table[MessageQueue.from_json(entry["messageQueue"])] = value_type.from_json(entry)
    return table


# ---------------------------------------------------------------------------------------------
# GET_TOPIC_STATS_INFO (202)


@dataclass(slots=True)
class TopicOffset:
    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0

    @classmethod
    def from_json(cls, obj: Any) -> "TopicOffset":
        d = _as_obj(obj)
        return cls(as_int(d.get("minOffset")), as_int(d.get("maxOffset")), as_int(d.get("lastUpdateTimestamp")))

    def to_json(self) -> dict:
        return {"lastUpdateTimestamp": self.last_update_timestamp, "maxOffset": self.max_offset,
                "minOffset": self.min_offset}


@dataclass(slots=True)
class TopicStatsTable:
    offset_table: dict[MessageQueue, TopicOffset] = field(default_factory=dict)

    @classmethod
    def decode(cls, data: Any) -> "TopicStatsTable":
        return cls(_parse_queue_table(_as_obj(data).get("offsetTable"), TopicOffset))

    def encode(self) -> bytes:
        return _queue_table_json(self.offset_table, {})


# ---------------------------------------------------------------------------------------------
# INVOKE_BROKER_TO_RESET_OFFSET (222) answer and RESET_CONSUMER_CLIENT_OFFSET (220) body


@dataclass(slots=True)
class ResetOffsetBody:
    """``{"offsetTable":{<MessageQueue object>:<offset>,...}}`` (fastjson map with object keys)."""

    offset_table: dict[MessageQueue, int] = field(default_factory=dict)

    @classmethod
    def decode(cls, data: Any) -> "ResetOffsetBody":
        raw = _as_obj(data).get("offsetTable")
        table: dict[MessageQueue, int] = {}
        if isinstance(raw, dict):
            for key, value in raw.items():
                mq = _queue_from_key(key)
                if mq is not None:
                    table[mq] = as_int(value)
        return cls(table)

    def encode(self) -> bytes:
        entries = ",".join(f"{_queue_key(mq)}:{int(offset)}" for mq, offset in sorted(self.offset_table.items()))
        return ('{"offsetTable":{' + entries + "}}").encode("utf-8")


# ---------------------------------------------------------------------------------------------
# GET_CONSUME_STATS (208)


@dataclass(slots=True)
class OffsetWrapper:
    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)

    @classmethod
    def from_json(cls, obj: Any) -> "OffsetWrapper":
        d = _as_obj(obj)
        return cls(as_int(d.get("brokerOffset")), as_int(d.get("consumerOffset")), as_int(d.get("lastTimestamp")))

    def to_json(self) -> dict:
        return {"brokerOffset": self.broker_offset, "consumerOffset": self.consumer_offset,
                "lastTimestamp": self.last_timestamp}


@dataclass(slots=True)
class ConsumeStats:
    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def total_diff(self) -> int:
        return sum(w.broker_offset - w.consumer_offset for w in self.offset_table.values())

    @classmethod
    def decode(cls, data: Any) -> "ConsumeStats":
        d = _as_obj(data)
        try:
            tps = float(d.get("consumeTps") or 0.0)
        except (TypeError, ValueError):
            tps = 0.0
        return cls(_parse_queue_table(d.get("offsetTable"), OffsetWrapper), tps)

    def encode(self) -> bytes:
        return _queue_table_json(self.offset_table, {"consumeTps": float(self.consume_tps)})


# ---------------------------------------------------------------------------------------------
# GET_CONSUMER_CONNECTION_LIST (203)


@dataclass(slots=True)
class Connection:
    client_id: str = ""
    client_addr: str = ""
    language: str = "JAVA"
    version: int = 0

    @classmethod
    def from_json(cls, obj: Any) -> "Connection":
        d = _as_obj(obj)
        language = d.get("language")
        if isinstance(language, int) and not isinstance(language, bool):
            from protocol.codes import LanguageCode

            try:
                language = LanguageCode(language).name
            except ValueError:
                language = str(language)
        return cls(as_str(d.get("clientId")), as_str(d.get("clientAddr")), as_str(language, "JAVA"), as_int(d.get("version")))

    def to_json(self) -> dict:
        return {"clientAddr": self.client_addr, "clientId": self.client_id, "language": self.language,
                "version": self.version}


@dataclass(slots=True)
class ConsumerConnection:
    connection_set: list[Connection] = field(default_factory=list)
    subscription_table: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None

    @classmethod
    def decode(cls, data: Any) -> "ConsumerConnection":
        d = _as_obj(data)
        connections = d.get("connectionSet") or []
        subs = as_dict(d.get("subscriptionTable"))
        return cls(
            connection_set=[Connection.from_json(c) for c in connections if isinstance(c, dict)],
            subscription_table={str(t): SubscriptionData.from_json(s) for t, s in subs.items() if isinstance(s, dict)},
            consume_type=as_enum_name(d.get("consumeType"), CONSUME_TYPES, "") or None,
            message_model=as_enum_name(d.get("messageModel"), MESSAGE_MODELS, "") or None,
            consume_from_where=as_enum_name(d.get("consumeFromWhere"), CONSUME_FROM_WHERE, "") or None,
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "connectionSet": [c.to_json() for c in self.connection_set],
            "subscriptionTable": {t: s.to_json() for t, s in sorted(self.subscription_table.items())},
        }
        for key, value in (("consumeFromWhere", self.consume_from_where), ("consumeType", self.consume_type),
                           ("messageModel", self.message_model)):
            if value:
                out[key] = value
        return out

    def encode(self) -> bytes:
        return dumps_compact(self.to_json())


@dataclass(slots=True)
class ProducerConnection:
    """GET_PRODUCER_CONNECTION_LIST (204): ``{"connectionSet": [Connection, ...]}``."""

    connection_set: list[Connection] = field(default_factory=list)

    @classmethod
    def decode(cls, data: Any) -> "ProducerConnection":
        d = _as_obj(data)
        return cls([Connection.from_json(c) for c in d.get("connectionSet") or [] if isinstance(c, dict)])

    def encode(self) -> bytes:
        return dumps_compact({"connectionSet": [c.to_json() for c in self.connection_set]})


@dataclass(slots=True)
class ProducerTableInfo:
    """GET_ALL_PRODUCER_INFO (328): ``{"data": {group: [{"clientId", "remoteIP", "language", "version",
    "lastUpdateTimestamp"}, ...]}}``; read back as plain dicts."""

    data: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def decode(cls, data: Any) -> "ProducerTableInfo":
        table = as_dict(_as_obj(data).get("data"))
        return cls({str(g): [dict(p) for p in v if isinstance(p, dict)] for g, v in table.items() if isinstance(v, list)})

    def encode(self) -> bytes:
        return dumps_compact({"data": self.data})


# ---------------------------------------------------------------------------------------------
# GET_BROKER_RUNTIME_INFO (28)


@dataclass(slots=True)
class KVTable:
    table: dict[str, str] = field(default_factory=dict)

    @classmethod
    def decode(cls, data: Any) -> "KVTable":
        raw = as_dict(_as_obj(data).get("table"))
        return cls({str(k): as_str(v) for k, v in raw.items()})

    @classmethod
    def of(cls, items: Iterable[tuple[str, Any]]) -> "KVTable":
        return cls({k: as_str(v) for k, v in items})

    def encode(self) -> bytes:
        return dumps_compact({"table": dict(sorted(self.table.items()))})
