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


def record_message(record: MessageRecord, topic: str, queue_id: int, queue_offset: int, attempt: int) -> pb.Message:
    """A stored record as the SDKs expect a message (reference §10): id = UNIQ_KEY, an upper-case MD5 digest, tag,
    keys, group, the application's properties only; receipt handles are the caller's."""
    props = record.properties
    sp = pb.SystemProperties(
        message_id=props.get("UNIQ_KEY") or record.offset_msg_id,
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(record.body).hexdigest().upper()),
        body_encoding=pb.GZIP if record.sys_flag & 1 else pb.IDENTITY,
        message_type=message_type_of(props),
        born_timestamp=timestamp(record.born_timestamp),
        born_host=props.get("__BORNHOST") or f"{record.born_host[0]}:{record.born_host[1]}",
        store_timestamp=timestamp(record.store_timestamp),
        store_host=f"{record.store_host[0]}:{record.store_host[1]}",
        queue_id=queue_id,
        queue_offset=queue_offset,
        delivery_attempt=attempt,
    )
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
        sp.delivery_timestamp.CopyFrom(timestamp(int(deliver_ms)))
    if props.get("DLQ_ORIGIN_TOPIC") and props.get("DLQ_ORIGIN_MESSAGE_ID"):
        sp.dead_letter_queue.topic = props["DLQ_ORIGIN_TOPIC"]
        sp.dead_letter_queue.message_id = props["DLQ_ORIGIN_MESSAGE_ID"]
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTY_NAMES}
    return pb.Message(topic=pb.Resource(name=topic), user_properties=user, system_properties=sp, body=record.body)
