"""The POP service's request, delivery and error types (broker/pop/service.py), apart so front ends and the core
can name them without the service's machinery."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.filter import MessageFilter
from broker.pop.handle import ReceiptHandle
from broker.pop.state import QueueKey
from protocol.message import MessageRecord

MAX_BATCH = 32

KIND_HANDLE_EXPIRED = "handle_expired"
KIND_HANDLE_UNKNOWN = "handle_unknown"
KIND_NOT_FOUND = "not_found"
KIND_INTERNAL = "internal"
KIND_BUSY = "busy"


class PopError(Exception):
    """A refused POP request; `kind` is one of the KIND_* names (the gRPC layer maps it to a status code)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class PopRequest:
    group: str
    topic: str
    batch: int
    invisible_ms: int
    max_attempts: int
    fifo: bool = False
    queue_id: int = -1  # -1: every readable queue (what gRPC receives ask for: the reference pops the whole topic
    # on the broker whatever queue the request names, FIFO groups included)
    message_filter: MessageFilter | None = None
    tag_names: frozenset[str] | None = None  # exact tags (the filter's hash codes can collide)
    renew_client: str = ""  # auto_renew: the client id whose liveness keeps the messages invisible
    attempt_id: str = ""


@dataclass(slots=True)
class Delivery:
    """One message a receive hands out: the stored record; its receipt handle as text (written once, from its
    fields, by the receive: front ends send it as is) and invisible time; the delivery attempt; and the original
    topic, queue and offset (also for a message popped from the retry topic). ``handle`` parses the text."""

    record: MessageRecord
    handle_text: str
    invisible_ms: int
    attempt: int
    topic: str
    queue_id: int
    queue_offset: int

    @property
    def handle(self) -> ReceiptHandle:
        return ReceiptHandle.decode(self.handle_text)


@dataclass(slots=True)
class DeadLetter:
    key: QueueKey
    offset: int
    record: MessageRecord
    group: str
    topic: str


@dataclass(slots=True)
class PopPass:
    """What one pop pass collected."""

    deliveries: list[Delivery] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RenewPolicy:
    """Auto-renewed deliveries (push consumers): invisible this long, renewed this long before they lapse, for at
    most this long after they were handed out (the reference proxy's defaultInvisibleTimeMills,
    renewAheadTimeMillis, renewMaxTimeMillis)."""

    invisible_ms: int = 60_000
    ahead_ms: int = 10_000
    max_ms: int = 3 * 3600 * 1000
