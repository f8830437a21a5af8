"""Per-queue consumption bookkeeping of the push consumer: what is pulled but not yet consumed.

It answers two questions cheaply (amortised O(1) per message):
  * which offset is safe to commit (the smallest offset still in flight, or the pull position when nothing is), so a
    committed offset never passes an unconsumed message;
  * whether pulling must pause (flow control): too many messages or too many body bytes cached, or too wide a span
    between the oldest and newest cached message.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from client.message import MessageExt, MessageQueue
from client.waiting import wait_event

__all__ = ["ProcessQueue"]


class ProcessQueue:
    """Messages of one queue pulled but not yet consumed."""

    __slots__ = (
        "mq", "inflight", "order", "pulled_until", "max_offset_seen", "dropped", "cached_bytes",
        "max_count", "max_bytes", "max_span", "_resume", "last_pull_time", "locked", "last_lock_time",
    )

    def __init__(
        self, mq: MessageQueue, *, max_count: int = 1000, max_bytes: int = 100 * 1024 * 1024, max_span: int = 2000
    ) -> None:
        self.mq = mq
        self.inflight: dict[int, MessageExt] = {}  # queue offset -> message
        self.order: deque[int] = deque()  # in-flight offsets, ascending (pulls return ascending offsets)
        self.pulled_until = -1  # next offset to pull; what to commit when nothing is in flight
        self.max_offset_seen = -1
        self.dropped = False
        self.cached_bytes = 0
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.max_span = max_span
        self._resume: asyncio.Event | None = None
        self.last_pull_time = 0.0
        # Orderly CLUSTERING consumers only: whether the broker lock is held, and when it was last granted
        # (time.monotonic()); a lock not renewed for LOCK_EXPIRY seconds counts as lost.
        self.locked = False
        self.last_lock_time = 0.0

    # ------------------------------------------------------------------ pulled / consumed
    def add(self, messages: list[MessageExt], next_offset: int = -1) -> None:
        """Record a pulled batch (ascending offsets) and the offset the next pull starts at."""
        inflight = self.inflight
        order = self.order
        size = 0
        for m in messages:
            offset = m.queue_offset
            if offset not in inflight:
                order.append(offset)
                size += len(m._rec.body)
            inflight[offset] = m
        self.cached_bytes += size
        if messages:
            last = messages[-1].queue_offset
            if last > self.max_offset_seen:
                self.max_offset_seen = last
        if next_offset > self.pulled_until:
            self.pulled_until = next_offset

    def advance_to(self, next_offset: int) -> None:
        """A pull found nothing to hand over (no new / all filtered): the pull position still moves on."""
        if next_offset > self.pulled_until:
            self.pulled_until = next_offset

    def remove(self, messages: list[MessageExt]) -> int:
        """Forget consumed messages; returns the offset that is safe to commit (-1 if nothing is known yet)."""
        inflight = self.inflight
        size = 0
        for m in messages:
            if inflight.pop(m.queue_offset, None) is not None:
                size += len(m._rec.body)
        self.cached_bytes -= size
        order = self.order
        while order and order[0] not in inflight:
            order.popleft()
        if self._resume is not None and not self.over_threshold():
            self._resume.set()
        return self.commit_offset()

    def commit_offset(self) -> int:
        if self.order:
            return self.order[0]
        if self.pulled_until >= 0:
            return self.pulled_until
        return self.max_offset_seen + 1 if self.max_offset_seen >= 0 else -1

    # ------------------------------------------------------------------ orderly locks
    LOCK_EXPIRY = 30.0  # client side; the broker keeps a lock 60 s and consumers renew every 20 s

    def lock_granted(self, now: float | None = None) -> None:
        self.locked = True
        self.last_lock_time = time.monotonic() if now is None else now

    def holds_lock(self, now: float | None = None) -> bool:
        """True while the broker lock is held and was renewed within LOCK_EXPIRY seconds."""
        if not self.locked:
            return False
        now = time.monotonic() if now is None else now
        return now - self.last_lock_time <= self.LOCK_EXPIRY

    # ------------------------------------------------------------------ flow control
    def over_threshold(self) -> bool:
        """True when pulling should pause: count, bytes or offset span above the configured limits."""
        n = len(self.inflight)
        if n == 0:
            return False
        return (
            n > self.max_count
            or self.cached_bytes > self.max_bytes
            or (self.max_span > 0 and self.max_offset_seen - self.order[0] > self.max_span)
        )

    async def wait_until_drained(self, timeout: float) -> bool:
        """Pause until consumption brings the queue back under its thresholds (or timeout); True if resumed."""
        if not self.over_threshold():
            return True
        if self._resume is None:
            self._resume = asyncio.Event()
        self._resume.clear()
        if await wait_event(self._resume, timeout):
            return True
        return not self.over_threshold()

    def __len__(self) -> int:
        return len(self.inflight)
