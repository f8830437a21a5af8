"""The send core's typed request and result (Message, SendRequest, SendResult), its Protocols and the shared
constants: a module of their own so that the single-message service (send.py) and the batch path (send_batch.py)
both build on them without importing each other."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from broker.acl.authorizer import Needs
from broker.acl.resources import send_needs
from broker.core.outcome import Outcome, Requester
from broker.store.types import MessageToStore, PutResult, PutStatus
from protocol.codes import STORED_CODES, ResponseCode  # noqa: F401 - STORED_CODES: re-exported for the core
from protocol.properties import decode_properties

PROP_UNIQ_KEY = "UNIQ_KEY"
PROP_TAGS = "TAGS"
PROP_KEYS = "KEYS"
PROP_CLUSTER = "CLUSTER"
PROP_SHARDING_KEY = "__SHARDINGKEY"
DEFAULT_MAX_RECONSUME_TIMES = 16

# Outcome.reason of refusals a protocol may answer with a finer code than ResponseCode
REASON_BODY_TOO_LARGE = "body_too_large"
REASON_PROPERTIES_TOO_LARGE = "properties_too_large"
REASON_DELIVERY_TIME = "delivery_time"
REASON_ILLEGAL_TOPIC = "illegal_topic"
REASON_MESSAGE_TYPE = "message_type"  # the topic accepts another message type (gRPC: its own code)

_PUT_STATUS_CODES: dict[PutStatus, int] = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.DISK_FULL: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.OS_PAGE_CACHE_BUSY: ResponseCode.SYSTEM_BUSY,
    PutStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
}
SUCCESS_CODE = int(ResponseCode.SUCCESS)
_LOCAL = Requester("127.0.0.1:0", "console")


# ---- the typed request and result ----------------------------------------------------------------------------------
@dataclass(slots=True)
class Message:
    """One message to send. Its properties come either encoded (``properties_text``, as remoting carries them; a batch
    entry's as the UTF-8 bytes that arrived, ``raw_properties``) or decoded (``properties``, as gRPC carries them;
    the core may change that dict), or both (they must agree: gRPC gives its dict's encoding too); tags and keys are
    the TAGS and KEYS properties. ``born_host`` is packed (protocol.ids.pack_host)."""

    body: bytes
    properties_text: str | None = None
    properties: dict[str, str] | None = None
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    reconsume_times: int = 0
    raw_properties: bytes | None = None

    def property_map(self) -> dict[str, str]:
        """The properties decoded, whichever form they came in."""
        if self.properties is not None:
            return self.properties
        if self.raw_properties is not None:
            return decode_properties(self.raw_properties.decode("utf-8", "replace"))
        return decode_properties(self.properties_text)

    @property
    def tags(self) -> str | None:
        return self.property_map().get(PROP_TAGS)

    @property
    def keys(self) -> str | None:
        return self.property_map().get(PROP_KEYS)


@dataclass(slots=True)
class SendRequest:
    """A send of ``messages`` to ``topic``: queue ``queue_id`` (-1: the broker chooses), from ``producer_group``.
    ``batch``: the messages are one atomic batch (``batch_properties`` / ``batch_sys_flag``: the batch's own encoded
    properties and sysFlag).
    ``default_topic`` / ``default_topic_queue_nums``: the template of an auto-created topic; ``max_reconsume_times``:
    a retry's limit (None: the group's)."""

    topic: str
    messages: Sequence[Message]
    queue_id: int = -1
    producer_group: str | None = None
    requester: Requester = _LOCAL
    default_topic: str | None = None
    default_topic_queue_nums: int = 4
    max_reconsume_times: int | None = None
    batch: bool = False
    batch_properties: str | None = None
    batch_sys_flag: int = 0

    def needs(self) -> Needs:
        """What the requester must be allowed (broker/acl/authorizer.py): PUB on the topic, or SUB on the group of a
        retry topic."""
        return send_needs(self.topic)


@dataclass(slots=True)
class SendResult:
    """Where the messages went: ``msg_ids`` (offset message ids, one per message), the queue and the first message's
    queue offset (the others follow it); ``transaction_id`` the UNIQ_KEY a remoting answer names (a batch: its own
    property's); ``timed``: the delivery time (ms) of a message that waits in the timer (it can be recalled), else
    0."""

    msg_ids: Sequence[str]
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    timed: int = 0


class SendObserver(Protocol):
    """Told once per observed request (never per message): its topic, how many messages and body bytes it carried,
    its code (the first refusal, else the first message's code) and how long it took, awaits included."""

    def __call__(self, topic: str, message_count: int, body_bytes: int, code: int, seconds: float) -> None: ...


class StoreWriter(Protocol):
    """The store's public put API (broker/store/append.py)."""

    def append(self, msgs: list[MessageToStore]) -> PutResult: ...
    def append_one(self, msg: MessageToStore) -> PutResult: ...
    async def put_message(self, msg: MessageToStore) -> PutResult: ...
    async def put_messages(self, msgs: list[MessageToStore]) -> PutResult: ...
    async def await_flush(self, result: PutResult) -> None: ...


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


class MessageIds(Sequence[str]):
    """A put's offset message ids, formatted only when read (a gRPC answer names none but a timed message's)."""

    __slots__ = ("_put",)

    def __init__(self, put: PutResult) -> None:
        self._put = put

    def __getitem__(self, index: Any) -> Any:
        return self._put.msg_ids[index]

    def __len__(self) -> int:
        return len(self._put.physical_offsets)

    def __iter__(self) -> Any:
        return iter(self._put.msg_ids)

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return repr(self._put.msg_ids)


def stored_outcome(result: PutResult, queue_id: int, transaction_id: str | None, timed: int = 0,
                   batch: bool = False) -> Outcome[SendResult]:
    """The Outcome of a put: SUCCESS (or a stored-but-late code, remark = the put status) with the SendResult, else
    the refusal."""
    status = result.status
    if status is PutStatus.PUT_OK:
        return Outcome(SUCCESS_CODE, "", SendResult(MessageIds(result), queue_id, result.queue_offset, transaction_id,
                                                timed))
    code = _PUT_STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)
    if code in STORED_CODES:
        return Outcome(int(code), status.name,
                       SendResult(MessageIds(result), queue_id, result.queue_offset, transaction_id, timed))
    return Outcome(int(code), result.remark or f"put message failed: {status.name}")


def late_outcome(outcome: Outcome[SendResult], status: PutStatus) -> Outcome[SendResult]:
    """A stored message's Outcome once the wait for its flush or its slaves ended with ``status``: unchanged when
    PUT_OK (or when it was not stored), else the stored-but-late code with the status's name, as stored_outcome."""
    if status is PutStatus.PUT_OK or outcome.code != SUCCESS_CODE:
        return outcome
    return Outcome(int(_PUT_STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)), status.name, outcome.value)


# ---- the service -------------------------------------------------------------------------------------------------
