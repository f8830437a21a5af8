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
        return (f"{self.queue_offset} {self.pop_time_ms} {self.invisible_ms} 0 {self.topic_kind} {self.broker_name} "
                f"{self.queue_id} {self.queue_offset} {self.commit_log_offset}")

    @classmethod
    def decode(cls, text: str) -> "ReceiptHandle":
        parts = (text or "").split(" ")
        if len(parts) != 9:
            raise InvalidHandle(f"the receipt handle {text[:80]!r} is not one this broker gave out")
        try:
            _start, pop_time, invisible, _revive, kind, queue_id, offset, phys = (int(p) for p in parts[:5] + parts[6:])
        except ValueError:
            raise InvalidHandle(f"the receipt handle {text[:80]!r} is not one this broker gave out") from None
        if kind not in (TOPIC_KIND_NORMAL, TOPIC_KIND_RETRY) or min(pop_time, invisible, queue_id, offset, phys) < 0:
            raise InvalidHandle(f"the receipt handle {text[:80]!r} is not one this broker gave out")
        return cls(pop_time, invisible, kind, parts[5], queue_id, offset, phys)
