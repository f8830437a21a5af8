"""An atomic batch send in the messaging core (reference §4.3.4): every message to one queue with one append, one
answer for all; a message that breaks a limit refuses the whole batch (MESSAGE_ILLEGAL).

Each message is stored with its own properties only (HEAD behaviour). Properties that arrived encoded in the
producers' usual layout (``[TAGS][KEYS]UNIQ_KEY``, ASCII) are kept as the bytes that arrived, their tagsCode
remembered per tag; anything else is decoded and completed (UNIQ_KEY added when missing)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.core.outcome import Outcome
from broker.core.send_types import (utf8_len, PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, REASON_BODY_TOO_LARGE,
                              REASON_PROPERTIES_TOO_LARGE, Message, SendRequest, SendResult, stored_outcome)
from broker.managers.topic_config import RETRY_GROUP_TOPIC_PREFIX
from broker.schedule.delay import delay_level_of
from broker.store.types import MessageToStore
from protocol.codes import ResponseCode
from protocol.hashing import tags_code
from protocol.message import MULTI_TAGS_FLAG, TRANSACTION_TYPE_MASK
from protocol.properties import MAX_PROPERTIES_BYTES, decode_properties, encode_properties, match_producer_layout

if TYPE_CHECKING:
    from broker.core.send import SendService

__all__ = ["BatchSender"]


class _Rejected(ValueError):
    """One message of the batch breaks a limit: the whole batch is refused with MESSAGE_ILLEGAL."""

    def __init__(self, text: str, reason: str = "") -> None:
        super().__init__(text)
        self.reason = reason


class BatchSender:
    """The batch path of a SendService (its checks, limits, store and replication)."""

    def __init__(self, service: "SendService") -> None:
        self.service = service

    def send(self, request: SendRequest) -> Any:
        service = self.service
        topic = request.topic
        if topic and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return Outcome.refused(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group")
        if topic and len(topic) > 127:
            return Outcome.refused(ResponseCode.MESSAGE_ILLEGAL, f"message topic length too long {len(topic)}, max 127")
        topic_config, refusal = service.check_topic(request)
        if refusal is not None:
            return refusal
        queue_id = service.pick_queue(request.queue_id, topic_config)
        if request.batch_sys_flag & TRANSACTION_TYPE_MASK:
            return Outcome.refused(ResponseCode.MESSAGE_ILLEGAL, "batch messages cannot be transactional")
        multi_tags = MULTI_TAGS_FLAG if topic_config.topic_filter_type == "MULTI_TAG" else 0
        try:
            messages = self._store_messages(request.messages, topic, queue_id, multi_tags)
        except _Rejected as exc:
            return Outcome.refused(ResponseCode.MESSAGE_ILLEGAL, str(exc), exc.reason)
        if not messages:
            return Outcome.refused(ResponseCode.MESSAGE_ILLEGAL, "batch body holds no message")
        batch_props = request.batch_properties
        refusal_text = service.limits.properties_refusal(batch_props, "the batch")
        if refusal_text is not None:
            return Outcome.refused(ResponseCode.MESSAGE_ILLEGAL, refusal_text, REASON_PROPERTIES_TOO_LARGE)
        decoded = decode_properties(batch_props) if batch_props else {}
        if service.type_check:
            refusal = service.type_problem(request, topic_config, decoded)
            if refusal is not None:
                return refusal
        return self._put(messages, queue_id, decoded.get(PROP_UNIQ_KEY))

    def _store_messages(self, batch: list[Message], topic: str, queue_id: int,
                        multi_tags: int) -> list[MessageToStore]:
        """The batch as store messages, in one loop. Raises _Rejected."""
        service = self.service
        max_body = service.max_body
        match_layout = match_producer_layout
        tag_codes = service.tag_codes
        limits = service.limits
        check_props_from = limits.check_from
        messages: list[MessageToStore] = []
        append = messages.append
        for message in batch:
            body = message.body
            sys_flag = message.sys_flag
            if sys_flag & TRANSACTION_TYPE_MASK:
                raise _Rejected("batch messages cannot be transactional")
            if len(body) > max_body:
                raise _Rejected(f"batch message {len(messages)}: body size {len(body)} exceeds the maximum {max_body}",
                                REASON_BODY_TOO_LARGE)
            raw_props = message.raw_properties
            if raw_props is None:  # came as text or decoded: the general path
                append(self._general(message, topic, queue_id, sys_flag | multi_tags, len(messages)))
                continue
            if len(raw_props) > check_props_from:
                refusal = limits.raw_properties_refusal(raw_props, f"batch message {len(messages)}")
                if refusal is not None:
                    raise _Rejected(refusal, REASON_PROPERTIES_TOO_LARGE)
            layout = raw_props.isascii() and match_layout(raw_props)
            if not layout:
                append(self._general(message, topic, queue_id, sys_flag | multi_tags, len(messages)))
                continue
            tags, keys, uniq = layout.groups()
            code = tag_codes.get(tags)
            if code is None:
                code = self._tag_code(tags)
            append(MessageToStore(topic, queue_id, message.flag, sys_flag | multi_tags, message.born_timestamp,
                                  message.born_host, message.reconsume_times, body, "", code,
                                  None if keys is None else keys.decode("ascii"), uniq.decode("ascii"), 0, raw_props))
        return messages

    def _tag_code(self, tags: bytes) -> int:
        """tagsCode of an ASCII tag, remembered per tag (tags repeat across messages)."""
        tag_codes = self.service.tag_codes
        if len(tag_codes) > 4096:
            tag_codes.clear()
            tag_codes[None] = 0
        code = tag_codes[tags] = tags_code(tags.decode("ascii"))
        return code

    def _general(self, message: Message, topic: str, queue_id: int, sys_flag: int, index: int) -> MessageToStore:
        """Any properties layout: decode (invalid UTF-8 replaced, as Java's new String(bytes, UTF_8) does) and add
        UNIQ_KEY if missing."""
        if message.raw_properties is not None:
            props_text = message.raw_properties.decode("utf-8", "replace")
            props = decode_properties(props_text)
        elif message.properties is not None:
            props = message.properties
            props_text = message.properties_text or encode_properties(props)
        else:
            props_text = message.properties_text or ""
            props = decode_properties(props_text)
        if message.raw_properties is None:
            refusal = self.service.limits.properties_refusal(props_text, f"batch message {index}")
            if refusal is not None:
                raise _Rejected(refusal, REASON_PROPERTIES_TOO_LARGE)
        if "DELAY" in props and delay_level_of(props) > 0:  # §4.3.4: no delay level in a batch
            raise _Rejected(f"batch message {index}: delay level not supported in a batch")
        uniq_key = props.get(PROP_UNIQ_KEY)
        if not uniq_key:
            uniq_key = self.service.uniq.next()
            if props_text and not props_text.endswith("\x02"):
                props_text += "\x02"
            props_text += f"{PROP_UNIQ_KEY}\x01{uniq_key}\x02"
            if utf8_len(props_text) > MAX_PROPERTIES_BYTES:
                raise _Rejected(f"batch message {index}: properties exceed {MAX_PROPERTIES_BYTES} bytes")
        return MessageToStore(topic, queue_id, message.flag, sys_flag, message.born_timestamp, message.born_host,
                              message.reconsume_times, message.body, props_text, tags_code(props.get(PROP_TAGS)),
                              props.get(PROP_KEYS), uniq_key)

    async def _put(self, messages: list[MessageToStore], queue_id: int, batch_uniq: str | None) -> Outcome[SendResult]:
        service = self.service
        refusal = service.replication.in_sync_refusal()
        if refusal is not None:
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, refusal)
        result = await service.store.put_messages(messages)
        await service.replication.wait(result)
        return stored_outcome(result, queue_id, batch_uniq, batch=True)
