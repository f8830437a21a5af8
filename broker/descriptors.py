"""File descriptors held back for the store, so that clients run out long before the commit log does.

A process that reaches its open-file limit (RLIMIT_NOFILE) fails whatever opens a file next: with clients
creating topics or connections freely, that was a commit-log flush ("Too many open files"). The broker keeps
``fileDescriptorReserve`` descriptors free: new topics and new connections are refused once
open descriptors + reserve reach the soft limit, while existing topics, existing connections and the store's
short-lived descriptors (flushes, new queue and index files, config writes) use the reserve.

The open count is read from /proc/self/fd at most every ``refresh_ms`` and adjusted in between by what the
callers report opening (connections), so a check costs an integer comparison almost always.
"""

from __future__ import annotations

import logging
import os
import resource
import time

from broker.log_limit import RateLimitedLog

log = logging.getLogger("broker.descriptors")

_FD_DIRS = ("/proc/self/fd", "/dev/fd")


class DescriptorsShortError(Exception):
    """Something that would hold a descriptor (a topic, a connection) is refused: descriptors run short.
    ``str(exc)`` is the one-line reason, fit for a response remark."""


def count_open_descriptors() -> int | None:
    """Open descriptors of this process, None where the platform cannot tell."""
    for directory in _FD_DIRS:
        try:
            return len(os.listdir(directory)) - 1  # the directory listing's own descriptor
        except OSError:
            continue
    return None


def soft_descriptor_limit() -> int | None:
    """The soft RLIMIT_NOFILE, None when unlimited or unknown."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


class DescriptorBudget:
    """Whether this process may take on something that holds descriptors (see the module docstring).

    ``reserve`` 0 turns the checks off."""

    def __init__(self, reserve: int, refresh_ms: int = 100) -> None:
        self.reserve = reserve
        self.refresh_s = refresh_ms / 1000.0
        self._open = 0
        self._limit: int | None = None
        self._next_refresh = 0.0
        self.refused = 0  # topics and connections refused so far
        self._log = RateLimitedLog(log)

    def refresh(self) -> None:
        """Count now (the limit too: it can be changed from outside, prlimit)."""
        self._next_refresh = time.monotonic() + self.refresh_s
        self._limit = soft_descriptor_limit()
        counted = count_open_descriptors()
        self._open = counted if counted is not None else 0
        if counted is None:
            self._limit = None  # cannot count: never refuse

    def opened(self, count: int = 1) -> None:
        """Report descriptors opened since the last count (e.g. an accepted connection)."""
        self._open += count

    def closed(self, count: int = 1) -> None:
        self._open = max(0, self._open - count)

    @property
    def open_count(self) -> int:
        """The open descriptors as last counted and adjusted."""
        return self._open

    def shortage(self) -> str | None:
        """None while there is room beyond the reserve, else why there is not."""
        if self.reserve <= 0:
            return None
        if time.monotonic() >= self._next_refresh:
            self.refresh()
        limit = self._limit
        if limit is None or self._open + self.reserve < limit:
            return None
        return ("the broker is short of file descriptors: %d open, open-file limit %d, %d kept free for the store "
                "(fileDescriptorReserve); raise `ulimit -n`" % (self._open, limit, self.reserve))

    def admit(self, what: str, kind: str) -> str | None:
        """None when ``what`` may be created, else the one-line refusal (also logged, at most once an interval
        per ``kind``: "topic", "connection")."""
        problem = self.shortage()
        if problem is None:
            return None
        self.refused += 1
        self._log.warning(kind, "refusing %s: %s (%d refused so far)", what, problem, self.refused)
        return "cannot create %s now: %s" % (what, problem)

    def check(self, what: str, kind: str) -> None:
        """Raise DescriptorsShortError (see ``admit``) when descriptors run short."""
        refusal = self.admit(what, kind)
        if refusal is not None:
            raise DescriptorsShortError(refusal)
