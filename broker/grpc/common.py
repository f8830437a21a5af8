"""Small pieces the gRPC service modules share: status frames, time conversions, the system property names."""

from __future__ import annotations

from google.protobuf import duration_pb2, timestamp_pb2

from protocol.grpc import definition_pb2 as pb

# Properties the broker and clients reserve: never sent by a 5.x producer as user properties, never shown as such.
SYSTEM_PROPERTY_NAMES = frozenset({
    "TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP",
    "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
    "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME",
    "CLUSTER", "__SHARDINGKEY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS",
    "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TRACE_CONTEXT", "__BORNHOST", "BORN_TIMESTAMP",
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "TRAN_PREPARED_QUEUE_OFFSET", "INNER_NUM", "INNER_BASE", "POP_CK",
    "1ST_POP_TIME", "POP_ORIGIN_QUEUE_ID", "POP_ORIGIN_QUEUE_OFFSET", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID",
    "__STARTDELIVERTIME",
})


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


def to_ms(duration: duration_pb2.Duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000


def timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)
