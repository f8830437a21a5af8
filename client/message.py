"""User-facing value types of the client: messages, queues, results, selectors.

These are plain objects with __slots__ so that creating thousands per second stays cheap; the wire encoding lives in
the producer / consumer modules.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from client.errors import MessageValidationError, MQClientError
from protocol.hashing import java_string_hash

__all__ = [
    "Message",
    "MessageQueue",
    "SendStatus",
    "SendResult",
    "PullStatus",
    "PullResult",
    "MessageSelector",
    "ConsumeResult",
    "ConsumeOrderlyResult",
    "MessageExt",
]

_SEPARATORS = ("\x01", "\x02")


class Message:
    """A message to send. `keys` may be one string or a list; `properties` are user properties (str -> str).
    `delay_level` picks a classic delay level; `deliver_time_ms` (epoch ms) asks for delivery at that time (a 5.x
    timed message, as Java's `setDeliverTimeMs`)."""

    __slots__ = ("topic", "body", "tags", "keys", "properties", "flag", "delay_level", "deliver_time_ms")

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        flag: int = 0,
        delay_level: int = 0,
        deliver_time_ms: int | None = None,
    ) -> None:
        self.topic = topic
        if isinstance(body, str):
            body = body.encode("utf-8")
        self.body = body
        self.tags = tags
        if keys is None:
            self.keys: list[str] = []
        elif isinstance(keys, str):
            self.keys = [keys]
        else:
            self.keys = list(keys)
        self.properties: dict[str, str] = dict(properties) if properties else {}
        self.flag = flag
        self.delay_level = delay_level
        self.deliver_time_ms = deliver_time_ms

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, body=<{len(self.body)} bytes>, tags={self.tags!r}, keys={self.keys!r}, "
            f"properties={self.properties!r}, flag={self.flag}, delay_level={self.delay_level})"
        )


def validate_property_text(name: str, value: str) -> None:
    """Property names/values must not contain the \\x01/\\x02 separators (they would corrupt the encoding)."""
    for sep in _SEPARATORS:
        if sep in name or sep in value:
            raise MessageValidationError(f"property {name!r} contains a reserved separator character (\\x01/\\x02)")


@dataclass(frozen=True, slots=True)
class MessageQueue:
    """One queue of a topic on one broker; hashable so it can key offset tables."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"MessageQueue[topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


# Response code -> send status for the codes that still mean "stored" (§4.3.2).
SEND_STATUS_BY_CODE = {
    0: SendStatus.SEND_OK,
    10: SendStatus.FLUSH_DISK_TIMEOUT,
    12: SendStatus.FLUSH_SLAVE_TIMEOUT,
    11: SendStatus.SLAVE_NOT_AVAILABLE,
}


class SendResult:
    """Outcome of a send. `msg_id` is the client UNIQ_KEY (comma-joined for batches); `offset_msg_id` is the broker's.
    `region_id` and `trace_on` are the broker's answer's MSG_REGION and TRACE_ON (its `regionId` and `traceOn`):
    message traces record the region and are not written for a broker that answers TRACE_ON=false. `recall_handle`:
    for a timed message, what `Producer.recall_message` takes to cancel it before its time (None otherwise)."""

    __slots__ = ("status", "msg_id", "offset_msg_id", "queue_id", "queue_offset", "message_queue", "transaction_id",
                 "region_id", "trace_on", "recall_handle")

    def __init__(
        self,
        status: SendStatus,
        msg_id: str,
        offset_msg_id: str | None,
        queue_id: int,
        queue_offset: int,
        message_queue: MessageQueue,
        transaction_id: str | None = None,
        region_id: str = "",
        trace_on: bool = True,
        recall_handle: str | None = None,
    ) -> None:
        self.status = status
        self.msg_id = msg_id
        self.offset_msg_id = offset_msg_id
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.message_queue = message_queue
        self.transaction_id = transaction_id
        self.region_id = region_id
        self.trace_on = trace_on
        self.recall_handle = recall_handle

    def __repr__(self) -> str:
        return (
            f"SendResult(status={self.status.name}, msg_id={self.msg_id!r}, offset_msg_id={self.offset_msg_id!r}, "
            f"queue_id={self.queue_id}, queue_offset={self.queue_offset}, message_queue={self.message_queue})"
        )


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


# PULL_MESSAGE response code -> status (§4.4.3).
PULL_STATUS_BY_CODE = {
    0: PullStatus.FOUND,
    19: PullStatus.NO_NEW_MSG,
    20: PullStatus.NO_MATCHED_MSG,
    21: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(slots=True)
class PullResult:
    """Result of one pull. `next_offset` is an alias of `next_begin_offset`."""

    status: PullStatus
    messages: list = field(default_factory=list)
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0

    @property
    def next_offset(self) -> int:
        return self.next_begin_offset


class MessageSelector:
    """A subscription filter: a tag expression (`"TagA || TagB"`, `"*"`) or a SQL92 expression."""

    __slots__ = ("expression_type", "expression", "tags_set", "code_set")

    def __init__(self, expression_type: str, expression: str) -> None:
        if expression_type not in ("TAG", "SQL92"):
            raise ValueError(f"unknown expression type {expression_type!r}; use 'TAG' or 'SQL92'")
        self.expression_type = expression_type
        if expression_type == "TAG":
            expression = (expression or "*").strip() or "*"
            tags = [] if expression == "*" else [t.strip() for t in expression.split("||") if t.strip()]
            if expression != "*" and not tags:
                expression = "*"
            self.tags_set: frozenset[str] = frozenset(tags)
            # Ordered, de-duplicated list (the wire form is a JSON array).
            self.code_set: list[int] = sorted({java_string_hash(t) for t in tags})
        else:
            if not expression or not expression.strip():
                raise ValueError("empty SQL92 expression")
            self.tags_set = frozenset()
            self.code_set = []
        self.expression = expression

    @classmethod
    def tag(cls, expression: str | None) -> MessageSelector:
        return cls("TAG", expression or "*")

    @classmethod
    def sql(cls, expression: str) -> MessageSelector:
        return cls("SQL92", expression)

    @classmethod
    def of(cls, selector: MessageSelector | str | None) -> MessageSelector:
        """Accept a selector, a tag expression string, or None (= all)."""
        if isinstance(selector, MessageSelector):
            return selector
        return cls.tag(selector)

    @property
    def matches_all(self) -> bool:
        return self.expression_type == "TAG" and not self.tags_set

    def matches_tag(self, tag: str | None) -> bool:
        """Client-side exact re-check (the broker only filters by hash)."""
        if self.expression_type != "TAG" or not self.tags_set:
            return True
        return tag in self.tags_set

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MessageSelector)
            and other.expression_type == self.expression_type
            and other.expression == self.expression
        )

    def __hash__(self) -> int:
        return hash((self.expression_type, self.expression))

    def __repr__(self) -> str:
        return f"MessageSelector.{'tag' if self.expression_type == 'TAG' else 'sql'}({self.expression!r})"


class ConsumeResult(enum.Enum):
    """What a push-consumer listener returns for a list of messages."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyResult(enum.Enum):
    """What an orderly listener returns: SUSPEND_CURRENT_QUEUE_A_MOMENT retries the same messages later, in place.

    COMMIT and ROLLBACK matter only when the listener set ``context.auto_commit = False``: COMMIT commits the offset
    past everything consumed so far, ROLLBACK consumes everything since the last commit again."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


# --------------------------------------------------------------------------------------------------------------------
# Received messages

_COMPRESSION_NAMES = {0: "zlib", 1: "lz4", 2: "zstd", 3: "zlib"}


def decompress_body(body: bytes, sys_flag: int) -> bytes:
    """Undo producer compression (sysflag bit 0; algorithm in bits 8-10: 0/3 zlib, 1 lz4, 2 zstd)."""
    kind = (sys_flag >> 8) & 0x7
    if kind in (0, 3):
        return zlib.decompress(body)
    if kind == 1:
        try:
            import lz4.frame  # type: ignore[import-not-found]
        except ImportError:
            raise MQClientError("message body is LZ4-compressed but the 'lz4' package is not installed") from None
        return lz4.frame.decompress(body)
    if kind == 2:
        try:
            import zstandard  # type: ignore[import-not-found]
        except ImportError:
            raise MQClientError("message body is zstd-compressed but the 'zstandard' package is not installed") from None
        return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    raise MQClientError(f"message body uses unknown compression type {kind}")


class MessageExt:
    """A received message, a thin view over a decoded commit-log record.

    Properties are decoded on first use and compressed bodies are inflated on first access, so pulling a batch
    costs little more than splitting the records. `msg_id` is the UNIQ_KEY (else the offset id), as in Java.
    """

    __slots__ = ("_rec", "_props", "_body", "_reconsume", "topic", "broker_name")

    def __init__(self, record, broker_name: str | None = None) -> None:
        self._rec = record
        self._props = None
        self._body = None
        self._reconsume = -1
        self.topic: str = record.topic
        self.broker_name = broker_name

    # --- fields straight from the record
    @property
    def body(self) -> bytes:
        body = self._body
        if body is None:
            rec = self._rec
            body = rec.body
            if rec.sys_flag & 1:
                body = decompress_body(body, rec.sys_flag)
            self._body = body
        return body

    @property
    def flag(self) -> int:
        return self._rec.flag

    @property
    def queue_id(self) -> int:
        return self._rec.queue_id

    @property
    def queue_offset(self) -> int:
        return self._rec.queue_offset

    @property
    def commit_log_offset(self) -> int:
        return self._rec.physical_offset

    @property
    def sys_flag(self) -> int:
        return self._rec.sys_flag

    @property
    def body_crc(self) -> int:
        return self._rec.body_crc

    @property
    def store_size(self) -> int:
        return self._rec.total_size

    @property
    def born_timestamp(self) -> int:
        return self._rec.born_timestamp

    @property
    def store_timestamp(self) -> int:
        return self._rec.store_timestamp

    @property
    def born_host(self) -> str:
        ip, port = self._rec.born_host
        return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"

    @property
    def store_host(self) -> str:
        ip, port = self._rec.store_host
        return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"

    @property
    def reconsume_times(self) -> int:
        """Times consumed before: the record's count, raised locally while a message is retried in the client
        (orderly suspends, send-backs the broker refused)."""
        local = self._reconsume
        return local if local >= 0 else self._rec.reconsume_times

    @reconsume_times.setter
    def reconsume_times(self, value: int) -> None:
        self._reconsume = int(value)

    @property
    def prepared_transaction_offset(self) -> int:
        return self._rec.prepared_transaction_offset

    # --- derived from properties
    @property
    def properties(self) -> dict[str, str]:
        props = self._props
        if props is None:
            rec = self._rec
            props = rec.properties
            if not props and rec.raw_properties:
                props = rec.decode_properties()
            self._props = props
        return props

    def get_property(self, name: str, default: str | None = None) -> str | None:
        return self.properties.get(name, default)

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        value = self.properties.get("KEYS")
        return value.split() if value else []

    @property
    def offset_msg_id(self) -> str:
        return self._rec.offset_msg_id

    @property
    def msg_id(self) -> str:
        return self.properties.get("UNIQ_KEY") or self._rec.offset_msg_id

    @property
    def delay_level(self) -> int:
        value = self.properties.get("DELAY")
        try:
            return int(value) if value else 0
        except ValueError:
            return 0

    @property
    def record(self):
        """The underlying protocol.message.MessageRecord."""
        return self._rec

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
            f"msg_id={self.msg_id!r}, tags={self.tags!r}, body=<{len(self._rec.body)} bytes>)"
        )
