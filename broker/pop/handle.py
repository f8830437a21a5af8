"""The receipt handle of one delivery: opaque to clients, enough for the broker to find the message again.

The text has the reference's shape, space-separated::

    <start offset> <pop time ms> <invisible ms> <revive queue> <topic kind> <broker name> <queue id> <queue offset>
    <commit-log offset>

so a handle names exactly one delivery (pop time) of one message (queue, offset) and carries its expiry.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

TOPIC_KIND_NORMAL = 0
TOPIC_KIND_RETRY = 1


class InvalidHandle(ValueError):
    """A receipt handle that is not one this broker wrote."""


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    pop_time_ms: int
    invisible_ms: int
    topic_kind: int
    broker_name: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int

    @property
    def expiry_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms

    @property
    def retry(self) -> bool:
        return self.topic_kind == TOPIC_KIND_RETRY

    def renewed(self, pop_time_ms: int, invisible_ms: int) -> "ReceiptHandle":
        return replace(self, pop_time_ms=pop_time_ms, invisible_ms=invisible_ms)

    def encode(self) -> str:
        return handle_text(self.pop_time_ms, self.invisible_ms, self.topic_kind, self.broker_name, self.queue_id,
                           self.queue_offset, self.commit_log_offset)

    @classmethod
    def decode(cls, text: str) -> "ReceiptHandle":
        return cls(*parse_handle(text))


def handle_middle(pop_time_ms: int, invisible_ms: int, topic_kind: int, broker_name: str, queue_id: int) -> str:
    """What the handles of one pop pass over one queue share: ``handle_text`` is ``<offset><middle><offset>
    <commit-log offset>``, so a receive formats this once per queue, and one short f-string per message."""
    return f" {pop_time_ms} {invisible_ms} 0 {topic_kind} {broker_name} {queue_id} "


def handle_text(pop_time_ms: int, invisible_ms: int, topic_kind: int, broker_name: str, queue_id: int,
                queue_offset: int, commit_log_offset: int) -> str:
    """The handle's text (the one encoding)."""
    middle = handle_middle(pop_time_ms, invisible_ms, topic_kind, broker_name, queue_id)
    return f"{queue_offset}{middle}{queue_offset} {commit_log_offset}"


def parse_handle(text: str) -> tuple[int, int, int, str, int, int, int]:
    """(pop time, invisible ms, topic kind, broker name, queue id, queue offset, commit-log offset) of a handle's
    text, in ReceiptHandle's field order; InvalidHandle unless it has the shape ``handle_text`` writes (nine
    fields, all but the broker name integers, these non-negative). One split and one ``int`` per field: an ack
    parses one per message."""
    try:
        start, pop_time, invisible, revive, kind, broker_name, queue_id, offset, phys = text.split(" ")
        int(start), int(revive)
        pop_time, invisible, kind, queue_id, offset, phys = (int(pop_time), int(invisible), int(kind), int(queue_id),
                                                             int(offset), int(phys))
    except (ValueError, AttributeError):  # not nine fields, not integers, not text
        pass
    else:
        if (kind == TOPIC_KIND_NORMAL or kind == TOPIC_KIND_RETRY) and pop_time >= 0 and invisible >= 0 and \
                queue_id >= 0 and offset >= 0 and phys >= 0:
            return pop_time, invisible, kind, broker_name, queue_id, offset, phys
    raise InvalidHandle(f"the receipt handle {str(text or '')[:80]!r} is not one this broker gave out")
