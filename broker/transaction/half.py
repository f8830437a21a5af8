"""Transactional messages in the store, as the reference broker keeps them (pure: records in, messages out).

A prepared ("half") message is stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0 with its real topic and queue in REAL_TOPIC /
REAL_QID, so no consumer sees it. A decision is an "op" record in RMQ_SYS_TRANS_OP_HALF_TOPIC whose body lists the
half-queue offsets it settles (``"17"``, or ``"17,5,"`` when a checked copy and its original are settled together).
A commit writes the message again on its real topic. A half message checked too often is copied, unchanged, to
TRANS_CHECK_MAX_TIME_TOPIC and given up.
"""

from __future__ import annotations

from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.hashing import tags_code
from protocol.ids import offset_msg_id, pack_host
from protocol.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    MessageRecord,
    encode_record,
)
from protocol.properties import encode_properties
from broker.store.types import MessageToStore, message_from_record
from broker.transaction.half_ids import PROP_TRANSACTION_ID

__all__ = [
    "HALF_TOPIC", "OP_TOPIC", "CHECK_MAX_TOPIC", "SYSTEM_GROUP", "TRANSACTION_TOPICS", "is_half_send", "to_half",
    "op_message", "parse_op_body", "committed_message", "check_copy", "given_up_message", "check_request",
    "root_offset", "committed_from_sent",
]

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_GROUP = "CID_RMQ_SYS_TRANS"  # the check service's progress is kept as this group's consumer offsets
TRANSACTION_TOPICS = frozenset({HALF_TOPIC, OP_TOPIC, CHECK_MAX_TOPIC})

PROP_TRAN_MSG = "TRAN_MSG"
PROP_PGROUP = "PGROUP"
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_DELAY = "DELAY"
PROP_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROP_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROP_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
OP_REMOVE_TAG = "d"


def is_half_send(props: dict[str, str], reconsume_times: int) -> bool:
    """A send is a half message when its TRAN_MSG property says "true" (not its sysFlag, reference pitfall 1). A
    committed message coming back through %RETRY% still carries TRAN_MSG; with a reconsume count and a delay level it
    is a retry, not a new transaction (the 5.x guard)."""
    flag = props.get(PROP_TRAN_MSG)
    if flag is None or flag.lower() != "true":
        return False
    return not (reconsume_times > 0 and props.get(PROP_DELAY))


def to_half(message: MessageToStore, props: dict[str, str]) -> str | None:
    """Rewrite a prepared send in place as the half record: half topic, queue 0, REAL_TOPIC/REAL_QID, transaction bits
    cleared (so it is dispatched to the half queue like any message); a DELAY is ignored (pitfall 2). Returns the
    properties text without REAL_* (what the committed message will carry) when it could be kept as it was."""
    real = f"{PROP_REAL_TOPIC}\x01{message.topic}\x02{PROP_REAL_QID}\x01{message.queue_id}\x02"
    # __transactionId__ = the message id, as the reference writes it into every half message (committed copies and
    # their consumers see it; it is the transaction id producers are answered and asked with)
    uniq = props.get("UNIQ_KEY")
    given_id = props.get(PROP_TRANSACTION_ID)
    add_id = f"{PROP_TRANSACTION_ID}\x01{uniq}\x02" if uniq and given_id is None else ""
    if uniq:
        props[PROP_TRANSACTION_ID] = uniq
    props[PROP_REAL_TOPIC] = message.topic
    props[PROP_REAL_QID] = str(message.queue_id)
    if props.pop(PROP_DELAY, None) is not None or (given_id is not None and given_id != uniq):
        message.properties = encode_properties(props)
    else:  # the common case: append to the text as sent rather than encode it again
        text = message.properties_text()
        message.properties = (text if not text or text.endswith("\x02") else text + "\x02") + add_id + real
    message.properties_bytes = None
    message.topic = HALF_TOPIC
    message.queue_id = 0
    message.sys_flag = (message.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_NOT_TYPE
    text = message.properties
    return text[: len(text) - len(real)] if text.endswith(real) else None


def root_offset(record: MessageRecord) -> int:
    """The half-queue offset of the original prepared message a (checked) copy stands for; its own otherwise."""
    raw = record.properties.get(PROP_PREPARED_QUEUE_OFFSET)
    try:
        return int(raw) if raw else record.queue_offset
    except ValueError:
        return record.queue_offset


def op_message(half_offsets: list[int], store_host: bytes, now_ms: int, props: dict[str, str]) -> MessageToStore:
    """The op record settling the given half-queue offsets (body ``"17"`` or ``"17,5,"``, tag ``d``)."""
    body = str(half_offsets[0]) if len(half_offsets) == 1 else "".join(f"{o}," for o in half_offsets)
    properties = {"TAGS": OP_REMOVE_TAG, "WAIT": "true", **props}
    return MessageToStore(
        topic=OP_TOPIC, queue_id=0, flag=0, sys_flag=0, born_timestamp=now_ms, born_host=store_host,
        reconsume_times=0, body=body.encode("ascii"), properties=encode_properties(properties),
        tags_code=tags_code(OP_REMOVE_TAG),
    )


def parse_op_body(body: bytes) -> list[int]:
    """Half-queue offsets an op record settles (4.x ``"17"`` and 5.x ``"17,18,"`` alike; junk ignored)."""
    out = []
    for part in bytes(body).decode("ascii", "replace").split(","):
        part = part.strip()
        if part.isdigit():
            out.append(int(part))
    return out


def committed_from_sent(message: MessageToStore, props: dict[str, str], committed_text: str | None,
                        half_phys: int) -> MessageToStore:
    """committed_message for a half record still remembered as it was sent (no read back from the log). Like the
    reference, the committed message keeps TRAN_MSG and PGROUP."""
    if committed_text is None:
        committed_text = encode_properties({k: v for k, v in props.items()
                                            if k != PROP_REAL_TOPIC and k != PROP_REAL_QID})
    return MessageToStore(
        topic=props[PROP_REAL_TOPIC], queue_id=int(props[PROP_REAL_QID]), flag=message.flag,
        sys_flag=(message.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE,
        born_timestamp=message.born_timestamp, born_host=message.born_host, reconsume_times=message.reconsume_times,
        body=message.body, properties=committed_text, tags_code=message.tags_code, keys=props.get("KEYS"),
        uniq_key=props.get("UNIQ_KEY"), prepared_transaction_offset=half_phys,
    )


def committed_message(half: MessageRecord) -> MessageToStore:
    """The message a COMMIT publishes: on REAL_TOPIC/REAL_QID, transaction bits COMMIT, prepared offset = the half
    record's commit-log offset, tagsCode recomputed; REAL_* and the check bookkeeping dropped (TRAN_MSG and PGROUP
    stay, as in the reference)."""
    props = dict(half.properties)
    topic = props.pop(PROP_REAL_TOPIC, half.topic)
    queue_id = int(props.pop(PROP_REAL_QID, "0") or 0)
    props.pop(PROP_PREPARED_QUEUE_OFFSET, None)
    props.pop(PROP_CHECK_TIMES, None)
    sys_flag = (half.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE
    return message_from_record(half, topic, queue_id, props, half.reconsume_times, sys_flag, half.physical_offset)


def check_copy(half: MessageRecord, check_times: int | None) -> MessageToStore:
    """The copy appended before a check (or to keep an immune message in view): same message, new half-queue
    offset; it names its original (TRAN_PREPARED_QUEUE_OFFSET) so a decision on either settles both."""
    props = dict(half.properties)
    if check_times is not None:
        props[PROP_CHECK_TIMES] = str(check_times)
    props[PROP_PREPARED_QUEUE_OFFSET] = str(root_offset(half))
    return message_from_record(half, HALF_TOPIC, 0, props, half.reconsume_times)


def given_up_message(half: MessageRecord) -> MessageToStore:
    """A half message past transactionCheckMax: kept in TRANS_CHECK_MAX_TIME_TOPIC for operators, never published."""
    return message_from_record(half, CHECK_MAX_TOPIC, 0, dict(half.properties), half.reconsume_times)


def check_request(copy: MessageRecord, store_host: bytes, broker_name: str) -> RemotingCommand:
    """One-way CHECK_TRANSACTION_STATE (39) about a half record: header per the reference, body = the message in
    record format on its real topic and queue."""
    props = copy.properties
    uniq = props.get("UNIQ_KEY") or ""
    body = encode_record(
        queue_id=int(props.get(PROP_REAL_QID, "0") or 0), flag=copy.flag, queue_offset=copy.queue_offset,
        physical_offset=copy.physical_offset, sys_flag=copy.sys_flag, born_timestamp=copy.born_timestamp,
        born_host=pack_host(*copy.born_host), store_timestamp=copy.store_timestamp,
        store_host=pack_host(*copy.store_host), reconsume_times=copy.reconsume_times,
        prepared_transaction_offset=copy.prepared_transaction_offset, body=bytes(copy.body),
        topic=props.get(PROP_REAL_TOPIC, copy.topic).encode("utf-8"),
        properties=encode_properties(props).encode("utf-8"),
    )
    header = {
        "tranStateTableOffset": str(copy.queue_offset),
        "commitLogOffset": str(copy.physical_offset),
        "msgId": uniq,
        "transactionId": uniq,
        "offsetMsgId": offset_msg_id(store_host, copy.physical_offset),
        "topic": HALF_TOPIC,
        "brokerName": broker_name,
    }
    return RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header, body, opaque=0, oneway=True)
