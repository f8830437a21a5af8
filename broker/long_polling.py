"""Long polling: pulls that found nothing are held until a message arrives or they time out.

Held requests are keyed by (topic, queue_id). The store's arrival listener wakes the matching
requests at once; each held request also has its own timer (loop.call_later), so short test
timeouts are honoured precisely without a scanning loop. Waking means "re-execute the pull
with suspension disabled" — the pull processor supplies that callback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)

WAKE_ARRIVAL = "arrival"
WAKE_TIMEOUT = "timeout"
WAKE_SHUTDOWN = "shutdown"


class HeldPull:
    """A suspended pull request and what is needed to re-run it."""

    __slots__ = ("channel", "request", "header", "topic", "queue_id", "queue_offset",
                 "tag_filter", "record_check", "timer", "context")

    def __init__(self, channel: Any, request: Any, header: Any, topic: str, queue_id: int,
                 queue_offset: int, tag_filter: Callable[[int], bool] | None, context: Any = None) -> None:
        self.channel = channel
        self.request = request
        self.header = header
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.tag_filter = tag_filter  # None = matches every tag code
        # SQL92 pulls: record_check(held, max_offset, count) reads the `count` messages that just
        # arrived and says whether one matches, so a held pull wakes only for a matching message.
        self.record_check: Callable[["HeldPull", int, int], bool] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.context = context

    def matches_any(self, tags_codes: Iterable[int] | int | None) -> bool:
        tag_filter = self.tag_filter
        if tag_filter is None or tags_codes is None:
            return True
        if isinstance(tags_codes, int):
            return tag_filter(tags_codes)
        return any(tag_filter(code) for code in tags_codes)

    def arrival_matches(self, max_offset: int, tags_codes: Iterable[int] | int | None) -> bool:
        """Should the arrival of messages up to `max_offset` wake this pull?"""
        if max_offset <= self.queue_offset or not self.matches_any(tags_codes):
            return False
        check = self.record_check
        if check is None:
            return True
        count = 1 if tags_codes is None or isinstance(tags_codes, int) else len(list(tags_codes))
        try:
            return check(self, max_offset, count)
        except Exception:
            log.exception("checking an arrived message against a held pull's filter failed")
            return True  # let the re-executed pull decide


WakeCallback = Callable[[HeldPull, str], None]


class PullRequestHoldService:
    """Holds suspended pulls; `wake(held, reason)` re-executes one."""

    def __init__(self, wake: WakeCallback) -> None:
        self._wake = wake
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    def suspend(self, held: HeldPull, timeout_s: float) -> None:
        """Hold `held` for at most `timeout_s` seconds."""
        if self._stopped:
            self._fire(held, WAKE_SHUTDOWN)
            return
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        key = (held.topic, held.queue_id)
        self._held.setdefault(key, []).append(held)
        held.timer = self._loop.call_later(max(timeout_s, 0.0), self._on_timeout, held)
        held.channel.add_close_listener(lambda _ch, h=held: self._drop(h))

    def on_message_arrival(self, topic: str, queue_id: int, max_offset: int,
                           tags_codes: Iterable[int] | int | None = None) -> None:
        """Store arrival listener: wake held pulls of this queue whose filter matches."""
        waiting = self._held.get((topic, queue_id))
        if not waiting:
            return
        woken = [h for h in waiting if h.arrival_matches(max_offset, tags_codes)]
        if not woken:
            return
        remaining = [h for h in waiting if h not in woken] if len(woken) != len(waiting) else []
        if remaining:
            self._held[(topic, queue_id)] = remaining
        else:
            del self._held[(topic, queue_id)]
        for held in woken:
            self._fire(held, WAKE_ARRIVAL)

    def _on_timeout(self, held: HeldPull) -> None:
        held.timer = None
        if self._remove(held):
            self._fire(held, WAKE_TIMEOUT)

    def _remove(self, held: HeldPull) -> bool:
        key = (held.topic, held.queue_id)
        waiting = self._held.get(key)
        if not waiting:
            return False
        try:
            waiting.remove(held)
        except ValueError:
            return False
        if not waiting:
            del self._held[key]
        return True

    def _drop(self, held: HeldPull) -> None:
        """Channel closed: forget the request silently."""
        if self._remove(held) and held.timer is not None:
            held.timer.cancel()
            held.timer = None

    def _fire(self, held: HeldPull, reason: str) -> None:
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        if getattr(held.channel, "closed", False):
            return
        try:
            self._wake(held, reason)
        except Exception:
            log.exception("re-executing a held pull failed")

    def release_all(self) -> None:
        """Answer every held pull now (broker shutdown) and refuse new holds."""
        self._stopped = True
        held_all = [h for waiting in self._held.values() for h in waiting]
        self._held.clear()
        for held in held_all:
            self._fire(held, WAKE_SHUTDOWN)
