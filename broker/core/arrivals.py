"""The one notification of new messages: held pulls and held POP receives both wait here.

The store calls :meth:`Arrivals.notify` once per put (a batch is one call, with its queue's new max offset and the
tags codes of what arrived). Waiters are keyed by (topic, queue id); a key with queue id :data:`ANY_QUEUE` waits for
any queue of the topic (a POP receive pops every queue of its topic and of its retry topic). A notification wakes
only the waiters of its topic/queue, and among them only those whose ``matches(max_offset, tags)`` says yes (a held
pull's offset and tag/SQL filter), each at most once.

Two shapes of waiter, one registry:

* :meth:`hold` — one-shot, callback style (a remoting pull held on its channel): ``on_wake(reason)`` runs once, on
  an arrival, at its timeout (``loop.call_later``: short timeouts are honoured precisely, no scanning loop), or at
  shutdown; the waiter is gone after that.
* :meth:`watch` — a registration that stays while a coroutine loops "try, then wait" (a POP receive): it is
  registered before the first try, so a message arriving between a try and the wait is not missed.

:meth:`release_all` (broker shutdown) wakes every waiter with :data:`WAKE_SHUTDOWN` and refuses new waits. This
module sits beside the processors and services and imports nothing of the broker above the standard library."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["ANY_QUEUE", "WAKE_ARRIVAL", "WAKE_SHUTDOWN", "WAKE_TIMEOUT", "Arrivals", "Waiter", "Watch"]

ANY_QUEUE = -1
WAKE_ARRIVAL = "arrival"
WAKE_TIMEOUT = "timeout"
WAKE_SHUTDOWN = "shutdown"

Key = tuple[str, int]
Matches = Callable[[int, "Iterable[int] | int | None"], bool]


class Waiter:
    """One registration: its keys, its filter, and what to do when woken."""

    __slots__ = ("keys", "matches", "on_wake", "standing", "timer", "active")

    def __init__(self, keys: Sequence[Key], matches: Matches | None, on_wake: Callable[[str], None],
                 standing: bool = False) -> None:
        self.keys = tuple(keys)
        self.matches = matches  # None: every arrival on its keys wakes it
        self.on_wake = on_wake
        self.standing = standing  # a watch: stays registered when woken
        self.timer: asyncio.TimerHandle | None = None
        self.active = True


class Watch:
    """A standing registration for a loop of tries (see the module docstring); use as a context manager."""

    __slots__ = ("_arrivals", "_waiter", "_event", "_reason")

    def __init__(self, arrivals: "Arrivals", keys: Sequence[Key], matches: Matches | None) -> None:
        self._arrivals = arrivals
        self._event = asyncio.Event()
        self._reason = ""
        self._waiter = Waiter(keys, matches, self._woken, standing=True)
        arrivals._add(self._waiter)
        if arrivals.stopped:
            self._woken(WAKE_SHUTDOWN)

    def _woken(self, reason: str) -> None:
        if reason == WAKE_SHUTDOWN or not self._reason:
            self._reason = reason
        self._event.set()

    def interrupt(self) -> None:
        """End the wait now as at shutdown (the service behind the loop is stopping)."""
        self._woken(WAKE_SHUTDOWN)

    def clear(self) -> None:
        """Forget arrivals seen so far (call before each try)."""
        if self._reason != WAKE_SHUTDOWN:
            self._reason = ""
            self._event.clear()

    async def wait(self, timeout_s: float) -> str:
        """Until an arrival since the last :meth:`clear` (WAKE_ARRIVAL), ``timeout_s`` (WAKE_TIMEOUT) or shutdown."""
        if not self._event.is_set():
            try:
                await asyncio.wait_for(self._event.wait(), max(0.0, timeout_s))
            except asyncio.TimeoutError:
                return WAKE_TIMEOUT
        return self._reason or WAKE_ARRIVAL

    def close(self) -> None:
        self._arrivals._remove(self._waiter)

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()


class Arrivals:
    """The broker's one new-message notification (module docstring)."""

    def __init__(self) -> None:
        self._waiting: dict[Key, list[Waiter]] = {}
        self._held = 0  # one-shot holds (held pulls) registered now
        self._watches = 0  # standing watches (POP receives) registered now
        self.stopped = False

    @property
    def held_count(self) -> int:
        """Requests held by :meth:`hold` now (remoting pulls)."""
        return self._held

    @property
    def watch_count(self) -> int:
        """Receives waiting in a :meth:`watch` now (POP)."""
        return self._watches

    # ---- registering ----------------------------------------------------------------------------------------
    def hold(self, keys: Sequence[Key], timeout_s: float, on_wake: Callable[[str], None],
             matches: Matches | None = None) -> Waiter:
        """Call ``on_wake(reason)`` once: at the first matching arrival, after ``timeout_s``, or at shutdown (at
        once when the broker is stopping). :meth:`cancel` drops it silently (its client went away)."""
        waiter = Waiter(keys, matches, on_wake)
        if self.stopped:
            self._fire(waiter, WAKE_SHUTDOWN)
            return waiter
        self._add(waiter)
        waiter.timer = asyncio.get_running_loop().call_later(max(timeout_s, 0.0), self._timed_out, waiter)
        return waiter

    def watch(self, keys: Sequence[Key], matches: Matches | None = None) -> Watch:
        """A standing registration on ``keys`` for a try-then-wait loop (with ... as watch)."""
        return Watch(self, keys, matches)

    def cancel(self, waiter: Waiter) -> None:
        """Forget a held waiter without waking it."""
        if self._remove(waiter) and waiter.timer is not None:
            waiter.timer.cancel()
            waiter.timer = None

    # ---- waking -----------------------------------------------------------------------------------------------
    def notify(self, topic: str, queue_id: int, max_offset: int, tags: Iterable[int] | int | None = None) -> None:
        """The store's arrival listener (once per put, a batch included): wake the waiters of this queue and of
        its whole topic whose filter matches what arrived."""
        waiting = self._waiting
        if not waiting:
            return
        for key in ((topic, queue_id), (topic, ANY_QUEUE)) if queue_id != ANY_QUEUE else ((topic, ANY_QUEUE),):
            found = waiting.get(key)
            if found:
                self._wake_matching(found, max_offset, tags)

    def poke(self, topic: str) -> None:
        """Wake the whole-topic waiters of ``topic`` (its state changed without a new message: a FIFO queue may move
        on after an ack, a lapsed delivery is due again)."""
        found = self._waiting.get((topic, ANY_QUEUE))
        if found:
            for waiter in list(found):
                self._wake(waiter, WAKE_ARRIVAL)

    def _wake_matching(self, found: list[Waiter], max_offset: int, tags: Iterable[int] | int | None) -> None:
        woken = []
        for waiter in found:
            check = waiter.matches
            if check is None:
                woken.append(waiter)
                continue
            try:
                if check(max_offset, tags):
                    woken.append(waiter)
            except Exception:
                log.exception("checking an arrival against a waiting request's filter failed")
                woken.append(waiter)  # let the request itself decide
        for waiter in woken:
            self._wake(waiter, WAKE_ARRIVAL)

    def _wake(self, waiter: Waiter, reason: str) -> None:
        if waiter.standing:
            waiter.on_wake(reason)  # a watch stays registered
            return
        if self._remove(waiter):
            self._fire(waiter, reason)

    def _timed_out(self, waiter: Waiter) -> None:
        waiter.timer = None
        if self._remove(waiter):
            self._fire(waiter, WAKE_TIMEOUT)

    def _fire(self, waiter: Waiter, reason: str) -> None:
        if waiter.timer is not None:
            waiter.timer.cancel()
            waiter.timer = None
        try:
            waiter.on_wake(reason)
        except Exception:
            log.exception("waking a held request failed")

    def release_all(self) -> None:
        """Broker shutdown: wake every waiter with WAKE_SHUTDOWN now, and every later one at once."""
        self.stopped = True
        everyone = {id(w): w for found in self._waiting.values() for w in found}
        for waiter in everyone.values():
            self._wake(waiter, WAKE_SHUTDOWN)

    # ---- the registry -----------------------------------------------------------------------------------------
    def _add(self, waiter: Waiter) -> None:
        for key in waiter.keys:
            self._waiting.setdefault(key, []).append(waiter)
        if waiter.standing:
            self._watches += 1
        else:
            self._held += 1

    def _remove(self, waiter: Waiter) -> bool:
        """Unregister ``waiter``; False when it was not registered (woken or cancelled already)."""
        if not waiter.active:
            return False
        waiter.active = False
        waiting = self._waiting
        for key in waiter.keys:
            found = waiting.get(key)
            if found is None:
                continue
            try:
                found.remove(waiter)
            except ValueError:
                pass
            if not found:
                del waiting[key]
        if waiter.standing:
            self._watches -= 1
        else:
            self._held -= 1
        return True
