"""Turning Messages into what goes on the wire: validation, properties string, compression, UNIQ_KEY, batch body.

Done once per send so that every retry reuses the same bytes and the same message id.
"""

from __future__ import annotations

import re
import zlib

from client.errors import MessageValidationError
from client.message import Message, validate_property_text
from protocol.ids import UniqKeyGenerator
from protocol.message import BatchEntry, encode_batch_body
from protocol.properties import MAX_PROPERTIES_BYTES, SYSTEM_PROPERTY_NAMES, encode_properties

__all__ = ["DEFAULT_TOPIC", "MessageEncoder", "PreparedSend"]

DEFAULT_TOPIC = "TBW102"
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_MAX_TOPIC_LEN = 127


class PreparedSend:
    """A message encoded once for all attempts (UNIQ_KEY stays stable across retries)."""

    __slots__ = ("topic", "body", "sys_flag", "flag", "props", "msg_id", "batch")

    def __init__(self, topic: str, body: bytes, sys_flag: int, flag: int, props: str, msg_id: str, batch: bool):
        self.topic = topic
        self.body = body
        self.sys_flag = sys_flag
        self.flag = flag
        self.props = props
        self.msg_id = msg_id
        self.batch = batch


class MessageEncoder:
    """Validates and encodes messages for one producer (its size limit, compression threshold and id generator)."""

    def __init__(self, uniq: UniqKeyGenerator, max_message_size: int, compress_msg_body_over_howmuch: int) -> None:
        self._uniq = uniq
        self.max_message_size = max_message_size
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self._valid_topics: set[str] = set()

    def check_topic(self, topic: str) -> None:
        if topic in self._valid_topics:
            return
        if not isinstance(topic, str) or not topic.strip():
            raise MessageValidationError("message topic is empty")
        if len(topic) > _MAX_TOPIC_LEN:
            raise MessageValidationError(f"topic {topic[:40]!r}... is longer than {_MAX_TOPIC_LEN} characters")
        if not _TOPIC_RE.match(topic):
            raise MessageValidationError(f"topic {topic!r} contains characters outside [%|a-zA-Z0-9_-]")
        if topic == DEFAULT_TOPIC:
            raise MessageValidationError(f"topic {topic!r} is the auto-create key topic and cannot be sent to")
        self._valid_topics.add(topic)

    def check_body(self, body: object) -> bytes:
        if type(body) is not bytes:
            if isinstance(body, (bytearray, memoryview)):
                body = bytes(body)
            else:
                raise MessageValidationError(f"message body must be bytes, got {type(body).__name__}")
        size = len(body)
        if size == 0:
            raise MessageValidationError("message body is empty")
        if size > self.max_message_size:
            raise MessageValidationError(
                f"message body of {size} bytes exceeds max_message_size ({self.max_message_size} bytes)"
            )
        return body  # type: ignore[return-value]

    def encode_properties(self, msg: Message, delay_level: int, uniq: str) -> str:
        tags = msg.tags
        keys = msg.keys
        user = msg.properties
        if not keys and not user and not delay_level and msg.deliver_time_ms is None:  # the common case: one f-string
            if tags:
                if "\x01" in tags or "\x02" in tags:
                    validate_property_text("TAGS", tags)
                props = f"TAGS\x01{tags}\x02UNIQ_KEY\x01{uniq}\x02"
            else:
                props = f"UNIQ_KEY\x01{uniq}\x02"
            return props
        parts = []
        if user:
            reserved = SYSTEM_PROPERTY_NAMES.intersection(user)
            if reserved:
                raise MessageValidationError(
                    f"property {sorted(reserved)[0]!r} is reserved by RocketMQ (used by the system); choose another "
                    f"name (tags, keys and delay_level are Message fields)")
            for name, value in user.items():
                if not isinstance(name, str) or not isinstance(value, str):
                    raise MessageValidationError(
                        f"property {name!r}: names and values must be str, got {type(value).__name__}"
                    )
                validate_property_text(name, value)
            parts.append(encode_properties(user))
        if tags:
            validate_property_text("TAGS", tags)
            parts.append(f"TAGS\x01{tags}\x02")
        if keys:
            joined = " ".join(keys)
            validate_property_text("KEYS", joined)
            parts.append(f"KEYS\x01{joined}\x02")
        if delay_level:
            parts.append(f"DELAY\x01{delay_level}\x02")
        elif msg.deliver_time_ms is not None:
            if not isinstance(msg.deliver_time_ms, int) or msg.deliver_time_ms < 0:
                raise MessageValidationError(f"deliver_time_ms must be epoch milliseconds, got {msg.deliver_time_ms!r}")
            parts.append(f"TIMER_DELIVER_MS\x01{msg.deliver_time_ms}\x02")
        parts.append(f"UNIQ_KEY\x01{uniq}\x02")
        props = "".join(parts)
        if len(props) > MAX_PROPERTIES_BYTES // 4 and len(props.encode("utf-8", "replace")) > MAX_PROPERTIES_BYTES:
            raise MessageValidationError(f"message properties exceed {MAX_PROPERTIES_BYTES} bytes once encoded")
        return props

    def prepare(self, msg: Message, delay_level: int | None) -> PreparedSend:
        topic = msg.topic
        if topic not in self._valid_topics:
            self.check_topic(topic)
        body = msg.body
        if type(body) is not bytes or not 0 < len(body) <= self.max_message_size:
            body = self.check_body(body)
        level = msg.delay_level if delay_level is None else delay_level
        if level and (not isinstance(level, int) or level < 0):
            raise MessageValidationError(f"delay_level must be a non-negative int, got {level!r}")
        sys_flag = 0
        if len(body) > self.compress_msg_body_over_howmuch:
            compressed = zlib.compress(body, 5)
            if len(compressed) < len(body):
                body = compressed
                sys_flag = 1
        uniq = self._uniq.next()
        return PreparedSend(topic, body, sys_flag, msg.flag, self.encode_properties(msg, level, uniq), uniq, False)

    def prepare_batch(self, messages: list[Message]) -> PreparedSend:
        if not messages:
            raise MessageValidationError("send_batch needs at least one message")
        topic = messages[0].topic
        self.check_topic(topic)
        if topic.startswith("%RETRY%"):
            raise MessageValidationError("batch sends do not support retry topics")
        entries = []
        ids = []
        next_id = self._uniq.next
        for index, msg in enumerate(messages):
            if not isinstance(msg, Message):
                raise MessageValidationError(f"batch item {index} is not a Message")
            if msg.topic != topic:
                raise MessageValidationError(
                    f"all messages of a batch must share one topic: item {index} has {msg.topic!r}, not {topic!r}"
                )
            if msg.delay_level or msg.deliver_time_ms is not None:
                raise MessageValidationError(f"batch item {index}: delayed messages cannot be batched")
            body = self.check_body(msg.body)
            uniq = next_id()
            ids.append(uniq)
            entries.append(BatchEntry(msg.flag, body, self.encode_properties(msg, 0, uniq)))
        try:
            body = encode_batch_body(entries)
        except ValueError as exc:
            raise MessageValidationError(str(exc)) from None
        if len(body) > self.max_message_size:
            raise MessageValidationError(
                f"batch of {len(messages)} messages encodes to {len(body)} bytes, over max_message_size "
                f"({self.max_message_size} bytes); split it into smaller batches"
            )
        # Batch-level properties: deliberately without a batch UNIQ_KEY (released brokers would copy it onto every
        # message, clobbering the per-message ids).
        return PreparedSend(topic, body, 0, 0, "WAIT\x01true\x02", ",".join(ids), True)
