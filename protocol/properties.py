"""Message properties: the ``name\\x01value\\x02`` string carried in send headers and commit-log records.

Decoding follows Java's MessageDecoder.string2messageProperties exactly: split on \\x02; a segment counts only if its
first \\x01 is after the first character and before the last one (so empty names and empty values are dropped, and a
value may itself contain \\x01); a later duplicate key overrides an earlier one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"

# Well-known keys (MessageConst).
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_WAIT = PROPERTY_WAIT_STORE_MSG_OK
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_DELAY = PROPERTY_DELAY_TIME_LEVEL
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_REAL_QID = PROPERTY_REAL_QUEUE_ID
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_BUYER_ID = "BUYER_ID"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_TRANSFER_FLAG = "TRANSFER_FLAG"
PROPERTY_CORRECTION_FLAG = "CORRECTION_FLAG"
PROPERTY_MQ2_FLAG = "MQ2_FLAG"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"
PROPERTY_TRACE_ON = PROPERTY_TRACE_SWITCH
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_UNIQ_KEY = PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
PROPERTY_EXTEND_UNIQ_INFO = "EXTEND_UNIQ_INFO"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
PROPERTY_INNER_NUM = "INNER_NUM"
PROPERTY_INNER_BASE = "INNER_BASE"
PROPERTY_DUP_INFO = "DUP_INFO"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_INSTANCE_ID = "INSTANCE_ID"
PROPERTY_CORRELATION_ID = "CORRELATION_ID"
PROPERTY_MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
PROPERTY_MESSAGE_TTL = "TTL"
PROPERTY_REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
PROPERTY_PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_MESSAGE_TYPE = "MSG_TYPE"
PROPERTY_POP_CK = "POP_CK"
PROPERTY_POP_CK_OFFSET = "POP_CK_OFFSET"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_FORWARD_QUEUE_ID = "PROPERTY_FORWARD_QUEUE_ID"
PROPERTY_REDIRECT = "REDIRECT"
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
PROPERTY_TIMER_DELAY_LEVEL = "TIMER_DELAY_LEVEL"
PROPERTY_BORN_HOST = "__BORNHOST"
PROPERTY_BORN_TIMESTAMP = "BORN_TIMESTAMP"
PROPERTY_CRC32 = "__CRC32#"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
PROPERTY_TRANSIENT_PREFIX = "__RMQ.TRANSIENT."

# Names the reference client refuses as user properties ("used by system": MessageConst.STRING_HASH_SET and the
# 5.x additions): setting one would silently change how the message is stored, filtered, delayed or retried.
SYSTEM_PROPERTY_NAMES = frozenset({
    PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_WAIT, PROPERTY_DELAY, PROPERTY_RETRY_TOPIC, PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QID, PROPERTY_TRANSACTION_PREPARED, PROPERTY_PRODUCER_GROUP, PROPERTY_MIN_OFFSET,
    PROPERTY_MAX_OFFSET, PROPERTY_BUYER_ID, PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_TRANSFER_FLAG,
    PROPERTY_CORRECTION_FLAG, "MQ2_FLAG", PROPERTY_RECONSUME_TIME, PROPERTY_MSG_REGION, PROPERTY_TRACE_ON,
    PROPERTY_UNIQ_KEY, PROPERTY_EXTEND_UNIQ_INFO, PROPERTY_MAX_RECONSUME_TIMES, PROPERTY_CONSUME_START_TIMESTAMP,
    PROPERTY_INNER_NUM, PROPERTY_INNER_BASE, PROPERTY_DUP_INFO, PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, PROPERTY_TRANSACTION_ID, PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_INSTANCE_ID, PROPERTY_CORRELATION_ID, PROPERTY_MESSAGE_REPLY_TO_CLIENT, PROPERTY_MESSAGE_TTL,
    PROPERTY_REPLY_MESSAGE_ARRIVE_TIME, PROPERTY_PUSH_REPLY_TIME, PROPERTY_CLUSTER, PROPERTY_MESSAGE_TYPE,
    PROPERTY_POP_CK, PROPERTY_POP_CK_OFFSET, PROPERTY_FIRST_POP_TIME, PROPERTY_SHARDING_KEY,
    PROPERTY_FORWARD_QUEUE_ID, PROPERTY_REDIRECT, PROPERTY_INNER_MULTI_DISPATCH, PROPERTY_INNER_MULTI_QUEUE_OFFSET,
    PROPERTY_TRACE_CONTEXT, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_ENQUEUE_MS, PROPERTY_TIMER_DEQUEUE_MS, PROPERTY_TIMER_ROLL_TIMES, PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_DEL_UNIQKEY, PROPERTY_TIMER_DELAY_LEVEL, PROPERTY_BORN_HOST, PROPERTY_BORN_TIMESTAMP,
    PROPERTY_DLQ_ORIGIN_TOPIC, PROPERTY_DLQ_ORIGIN_MESSAGE_ID, "__STARTDELIVERTIME",
})

# Longest properties string a record can hold (signed int16 length, in UTF-8 bytes).
MAX_PROPERTIES_BYTES = 32767


def encode_properties(props: Mapping[str, str | None]) -> str:
    """Encode a mapping as ``k\\x01v\\x02`` pairs, every pair terminated by \\x02; None values are skipped."""
    return "".join([f"{k}\x01{v}\x02" for k, v in props.items() if v is not None])


def decode_properties(s: str | None) -> dict[str, str]:
    """Decode a properties string with Java's acceptance rules (see module docstring)."""
    if not s:
        return {}
    # Fast path: well-formed strings (the norm) decode with C-level splits; anything unusual takes the exact loop.
    try:
        result = dict([segment.split("\x01", 1) for segment in s.split("\x02") if segment])
    except ValueError:  # a segment without \x01
        return _decode_properties_exact(s)
    if "" in result or "" in result.values():
        return _decode_properties_exact(s)
    return result


def _decode_properties_exact(s: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for segment in s.split("\x02"):
        sep = segment.find("\x01")
        if 0 < sep < len(segment) - 1:
            result[segment[:sep]] = segment[sep + 1 :]
    return result


def decode_properties_bytes(data: bytes | memoryview) -> dict[str, str]:
    """Decode UTF-8 properties bytes as stored in a commit-log record (invalid UTF-8 is replaced, never raised)."""
    if not data:
        return {}
    return decode_properties(bytes(data).decode("utf-8", "replace"))


# The layouts producers usually write: [TAGS\x01t\x02][KEYS\x01k\x02]UNIQ_KEY\x01u\x02 and nothing else. On these,
# each key appears once with a non-empty value, so the groups equal what decode_properties would find.
_PRODUCER_LAYOUT = re.compile(rb"(?:TAGS\x01([^\x02]+)\x02)?(?:KEYS\x01([^\x02]+)\x02)?UNIQ_KEY\x01([^\x02]+)\x02")
#: ``match_producer_layout(raw)`` -> match with groups (TAGS, KEYS, UNIQ_KEY) or None; the caller checks isascii().
match_producer_layout = _PRODUCER_LAYOUT.fullmatch


def scan_producer_properties(raw: bytes) -> tuple[bytes | None, bytes | None, bytes] | None:
    """(TAGS, KEYS, UNIQ_KEY) values of ASCII properties laid out as producers usually write them:
    ``[TAGS\x01t\x02][KEYS\x01k\x02]UNIQ_KEY\x01u\x02`` and nothing else.

    Lets the broker's batch path keep the raw bytes instead of decoding and re-encoding them. Returns None for any
    other layout (or non-ASCII text), in which case the caller must use :func:`decode_properties`; on the layouts it
    accepts, the result equals what decode_properties would find.
    """
    if not raw.isascii():
        return None
    match = match_producer_layout(raw)
    return None if match is None else match.groups()
