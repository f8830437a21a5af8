"""Small pieces the gRPC service modules share: status frames, time conversions, the system property names."""

from __future__ import annotations

import hashlib

from google.protobuf import duration_pb2, timestamp_pb2

from protocol.grpc import definition_pb2 as pb
from protocol.message import MessageRecord
from broker.managers import topic_message_type as types
from broker.managers.topic_config import no_route_remark  # noqa: F401  (the gRPC front end's import)
from protocol.properties import MESSAGE_CONST_SYSTEM_SET

# Stored properties that are not the application's: never accepted from a 5.x producer as user properties, never
# shown to a 5.x consumer as such. Exactly the reference's system set (MessageConst.STRING_HASH_SET), so SDKs see
# __SHARDINGKEY, __transactionId__, __STARTDELIVERTIME... where they look for them; plus this broker's own POP retry
# bookkeeping, which the reference has no property for.
SYSTEM_PROPERTY_NAMES = MESSAGE_CONST_SYSTEM_SET | {"POP_ORIGIN_QUEUE_ID", "POP_ORIGIN_QUEUE_OFFSET"}

_PB_TYPES = {types.NORMAL: pb.NORMAL, types.FIFO: pb.FIFO, types.DELAY: pb.DELAY, types.TRANSACTION: pb.TRANSACTION,
             types.UNSPECIFIED: pb.MESSAGE_TYPE_UNSPECIFIED}


def accept_message_types(topic_config: object) -> list[int]:
    """What a route advertises per queue of the topic: its message type (NORMAL when it has none; MIXED: all four)."""
    return [_PB_TYPES[name] for name in types.accepted_types(topic_config)]




def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


def to_ms(duration: duration_pb2.Duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000


def timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def message_type_of(props: dict[str, str]) -> int:
    return _PB_TYPES[types.message_type_of(props)]


def fill_message(message: pb.Message, record: MessageRecord, topic: str, queue_id: int, queue_offset: int,
                 attempt: int) -> pb.SystemProperties:
    """Write a stored record into ``message`` as the SDKs expect it (reference §10), in place (no copies): id =
    UNIQ_KEY, an upper-case MD5 digest, tag, keys, group, the application's properties only. Its system properties
    are returned; receipt handles are the caller's."""
    props = record.properties
    message.topic.name = topic
    message.body = record.body
    sp = message.system_properties
    sp.message_id = props.get("UNIQ_KEY") or record.offset_msg_id
    digest = sp.body_digest
    digest.type = pb.MD5
    digest.checksum = hashlib.md5(record.body).hexdigest().upper()
    sp.body_encoding = pb.GZIP if record.sys_flag & 1 else pb.IDENTITY
    born, stored = record.born_timestamp, record.store_timestamp
    sp.born_timestamp.seconds, sp.born_timestamp.nanos = born // 1000, (born % 1000) * 1_000_000
    sp.born_host = props.get("__BORNHOST") or f"{record.born_host[0]}:{record.born_host[1]}"
    sp.store_timestamp.seconds, sp.store_timestamp.nanos = stored // 1000, (stored % 1000) * 1_000_000
    sp.store_host = f"{record.store_host[0]}:{record.store_host[1]}"
    sp.queue_id = queue_id
    sp.queue_offset = queue_offset
    sp.delivery_attempt = attempt
    fill_from_properties(message, sp, props)
    return sp


def fill_from_properties(message: pb.Message, sp: pb.SystemProperties, props: dict[str, str]) -> None:
    """The fields a record's properties decide beyond its id and born host: message type, tag, keys, message
    group, trace context, delivery time, the application's properties, the dead-letter origin."""
    sp.message_type = message_type_of(props)
    if props.get("TAGS"):
        sp.tag = props["TAGS"]
    if props.get("KEYS"):
        sp.keys.extend(props["KEYS"].split())
    if props.get("__SHARDINGKEY"):
        sp.message_group = props["__SHARDINGKEY"]
    if props.get("TRACE_CONTEXT"):
        sp.trace_context = props["TRACE_CONTEXT"]
    deliver_ms = props.get("TIMER_DELIVER_MS")
    if deliver_ms and deliver_ms.isdigit():
        deliver = int(deliver_ms)
        sp.delivery_timestamp.seconds, sp.delivery_timestamp.nanos = deliver // 1000, (deliver % 1000) * 1_000_000
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTY_NAMES}
    if user:
        message.user_properties.update(user)
    if props.get("DLQ_ORIGIN_TOPIC") and props.get("DLQ_ORIGIN_MESSAGE_ID"):
        sp.dead_letter_queue.topic = props["DLQ_ORIGIN_TOPIC"]
        sp.dead_letter_queue.message_id = props["DLQ_ORIGIN_MESSAGE_ID"]


def record_message(record: MessageRecord, topic: str, queue_id: int, queue_offset: int, attempt: int) -> pb.Message:
    """A stored record as a new pb.Message (fill_message)."""
    message = pb.Message()
    fill_message(message, record, topic, queue_id, queue_offset, attempt)
    return message
