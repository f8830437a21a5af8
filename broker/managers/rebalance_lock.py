"""Queue locks for orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ, reference §4.9).

Per consumer group, each message queue is held by at most one client id. A lock is granted when the
queue is free, already held by the same client (which renews it), or its holder has not renewed it
for ``max_live_ms`` (60 s by default; clients renew every 20 s). Locks live in memory only, like on
the reference broker: after a restart clients simply lock again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from protocol.bodies import MessageQueue

DEFAULT_LOCK_MAX_LIVE_MS = 60_000


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update_ms: int


class RebalanceLockManager:
    """group -> {MessageQueue -> LockEntry}."""

    def __init__(self, max_live_ms: int = DEFAULT_LOCK_MAX_LIVE_MS, clock_ms: Callable[[], int] = _now_ms) -> None:
        self.max_live_ms = max_live_ms
        self._clock_ms = clock_ms
        self._groups: dict[str, dict[MessageQueue, LockEntry]] = {}

    def _expired(self, entry: LockEntry, now: int) -> bool:
        return now - entry.last_update_ms > self.max_live_ms

    def try_lock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> list[MessageQueue]:
        """Lock (or renew) every queue that is free, ours, or expired; returns the queues now held."""
        now = self._clock_ms()
        table = self._groups.setdefault(group, {})
        granted: list[MessageQueue] = []
        for mq in queues:
            entry = table.get(mq)
            if entry is None:
                table[mq] = LockEntry(client_id, now)
            elif entry.client_id == client_id or self._expired(entry, now):
                entry.client_id = client_id
                entry.last_update_ms = now
            else:
                continue
            granted.append(mq)
        return granted

    def unlock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> int:
        """Release the given queues held by ``client_id`` (others' locks are untouched); returns how many."""
        table = self._groups.get(group)
        if not table:
            return 0
        released = 0
        for mq in queues:
            entry = table.get(mq)
            if entry is not None and entry.client_id == client_id:
                del table[mq]
                released += 1
        if not table:
            del self._groups[group]
        return released

    def is_locked_by(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        entry = self._groups.get(group, {}).get(mq)
        return entry is not None and entry.client_id == client_id and not self._expired(entry, self._clock_ms())

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        """The client id holding an unexpired lock on ``mq``, if any."""
        entry = self._groups.get(group, {}).get(mq)
        if entry is None or self._expired(entry, self._clock_ms()):
            return None
        return entry.client_id

    def has_live_locks(self, group: str) -> bool:
        now = self._clock_ms()
        return any(not self._expired(e, now) for e in self._groups.get(group, {}).values())
