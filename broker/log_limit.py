"""Rate-limited logging for warnings a client (or a full disk) can trigger once per request.

A bad client can send thousands of bad requests a second; logging each one fills the disk and drowns the
log. `RateLimitedLog` logs the first occurrence of each key at once, then stays quiet for `interval_s`
seconds, counting what it swallowed; the next line logged for that key says how many were suppressed.
`flush()` writes the pending counts (for shutdown or a periodic task) so no suppressed burst goes unmentioned.

A leaf module (imports only the standard library) so every floor, the store included, can use it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable
from typing import Any

DEFAULT_INTERVAL_S = 10.0
# Keys are often client addresses: cap how many are remembered so a scan of many peers cannot grow the table.
MAX_KEYS = 4096


class _KeyState:
    __slots__ = ("last", "suppressed", "level", "msg", "args")

    def __init__(self, last: float) -> None:
        self.last = last
        self.suppressed = 0
        self.level = logging.WARNING
        self.msg = ""
        self.args: tuple[Any, ...] = ()


class RateLimitedLog:
    """At most one log line per key every `interval_s` seconds; the next one counts those skipped."""

    def __init__(self, logger: logging.Logger, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._keys: dict[Hashable, _KeyState] = {}
        self.suppressed_total = 0

    def warning(self, key: Hashable, msg: str, *args: Any, **kwargs: Any) -> bool:
        """Log `msg % args` at WARNING unless `key` was logged in the last interval; True if it was written."""
        return self.log(logging.WARNING, key, msg, *args, **kwargs)

    def error(self, key: Hashable, msg: str, *args: Any, **kwargs: Any) -> bool:
        """Log `msg % args` at ERROR unless `key` was logged in the last interval; True if it was written."""
        return self.log(logging.ERROR, key, msg, *args, **kwargs)

    def info(self, key: Hashable, msg: str, *args: Any, **kwargs: Any) -> bool:
        return self.log(logging.INFO, key, msg, *args, **kwargs)

    def log(self, level: int, key: Hashable, msg: str, *args: Any, **kwargs: Any) -> bool:
        """Log at `level` unless `key` was logged in the last interval; `kwargs` (exc_info, ...) go to the logger."""
        now = time.monotonic()
        state = self._keys.get(key)
        if state is not None and now - state.last < self.interval_s:
            state.suppressed += 1
            state.level, state.msg, state.args = level, msg, args
            self.suppressed_total += 1
            return False
        skipped = 0
        if state is None:
            if len(self._keys) >= MAX_KEYS:
                self._evict(now)
            state = self._keys[key] = _KeyState(now)
        else:
            skipped, state.suppressed = state.suppressed, 0
            state.last = now
        if skipped:
            msg += " (%d similar messages suppressed in the last %.0f s)"
            args = (*args, skipped, self.interval_s)
        self.logger.log(level, msg, *args, **kwargs)
        return True

    def flush(self) -> int:
        """Log one summary line per key with suppressed messages pending; returns how many lines were written."""
        written = 0
        for state in self._keys.values():
            if state.suppressed:
                self.logger.log(
                    state.level,
                    state.msg + " (%d similar messages suppressed)",
                    *state.args,
                    state.suppressed,
                )
                state.suppressed = 0
                written += 1
        return written

    def _evict(self, now: float) -> None:
        """Drop keys whose interval has passed (their pending counts are summarised first); else the oldest half."""
        stale = [k for k, s in self._keys.items() if now - s.last >= self.interval_s]
        if len(stale) < len(self._keys) // 2:
            ordered = sorted(self._keys, key=lambda k: self._keys[k].last)
            stale = ordered[: len(ordered) // 2]
        for k in stale:
            state = self._keys.pop(k)
            if state.suppressed:
                self.logger.log(
                    state.level, state.msg + " (%d similar messages suppressed)", *state.args, state.suppressed
                )
