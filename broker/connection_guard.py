"""What client connections may cost a process, whatever the clients do.

One ``ConnectionGuard`` per process is shared by every remoting server in it (broker port, VIP port,
embedded name server), so the limits are totals:

* ``serverMaxConnections``: connections over it are closed as soon as they are accepted;
* ``serverMaxBufferedFrameBytes``: bytes that unfinished frames may occupy (``FrameBudget``). A frame of
  at least ``ACCOUNTED_FRAME_BYTES`` whose first bytes arrived reserves its announced size; when the
  reservation does not fit, reading from that connection pauses until earlier reservations finish.
  A holder that sends nothing for ``serverFrameStallTimeoutSeconds`` while others wait is closed.
* ``writeBufferHighWaterMark`` / ``writeBufferLowWaterMark``: a connection whose unsent responses pass the
  high mark is not read from until they drain below the low mark (see remoting_server);
* ``serverChannelMaxIdleTimeSeconds``: connections without a complete request for that long are closed.

Every limit that is hit is logged through ``RateLimitedLog``: one line per kind of event and interval,
with the count of those left out, so thousands of misbehaving connections make a handful of lines.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass, fields
from typing import Any, Mapping, Protocol

from broker.descriptors import DescriptorBudget
from broker.log_limit import RateLimitedLog

log = logging.getLogger("broker.connections")

# Frames smaller than this are never budgeted: the kernel's receive buffer per connection is of the same
# order anyway, and pipelined small requests (whose chunks usually end mid-frame) skip the accountant.
ACCOUNTED_FRAME_BYTES = 64 * 1024
# File descriptors a broker needs besides client connections (store files, listeners, logs).
FD_HEADROOM = 256


@dataclass(frozen=True)
class ConnectionLimits:
    """Per-process connection limits; field ``x_y`` is broker.conf key ``xY``."""

    server_channel_max_idle_time_seconds: int = 120
    server_max_connections: int = 10_000
    # 16 frames of the largest size (frameMaxLength 16 MiB), or 64 maximal 4 MiB messages, in flight at once.
    server_max_buffered_frame_bytes: int = 256 * 1024 * 1024
    server_frame_stall_timeout_seconds: int = 10
    write_buffer_high_water_mark: int = 1024 * 1024
    write_buffer_low_water_mark: int = 0  # 0: a quarter of the high mark

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) <= 0 and f.name != "write_buffer_low_water_mark":
                raise ValueError(f"{_key(f.name)} must be greater than 0, got {getattr(self, f.name)}")
        if not 0 <= self.write_buffer_low_water_mark <= self.write_buffer_high_water_mark:
            raise ValueError(f"writeBufferLowWaterMark ({self.write_buffer_low_water_mark}) must be between 0 "
                             f"and writeBufferHighWaterMark ({self.write_buffer_high_water_mark})")

    @property
    def write_low_water(self) -> int:
        """The low mark in effect (writeBufferLowWaterMark, or a quarter of the high mark when 0)."""
        return self.write_buffer_low_water_mark or self.write_buffer_high_water_mark // 4

    @classmethod
    def from_config(cls, config: Any) -> "ConnectionLimits":
        """Take the fields from an object with the same attribute names (BrokerConfig); missing ones default."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls) if hasattr(config, f.name)})

    @classmethod
    def keys(cls) -> dict[str, str]:
        """broker.conf key -> field name."""
        return {_key(f.name): f.name for f in fields(cls)}

    @classmethod
    def from_properties(cls, values: Mapping[str, str]) -> "ConnectionLimits":
        """From ``key -> text`` properties (name server config); raises ValueError naming the key."""
        keys = cls.keys()
        parsed = {}
        for key, text in values.items():
            try:
                parsed[keys[key]] = int(str(text).strip())
            except ValueError:
                raise ValueError(f"{key}: expected an integer, got {text!r}") from None
        return cls(**parsed)


def _key(attr: str) -> str:
    head, *rest = attr.split("_")
    return head + "".join(part.capitalize() for part in rest)


class FrameHolder(Protocol):
    """A connection as the frame budget sees it (the server's protocol object)."""

    peer: str

    @property
    def frame_bytes_held(self) -> int: ...

    def budget_granted(self) -> None: ...

    def close_for_budget(self) -> None: ...


class FrameBudget:
    """Bytes reserved by unfinished frames across all connections of a process.

    A connection asks for its frame's announced size with ``reserve``; it is granted when it fits (or when
    nothing else is reserved, so a frame larger than the budget still gets through alone), else the
    connection waits in FIFO order and must stop reading until ``budget_granted`` is called on it.
    ``release`` gives the reservation back (frame complete, connection gone) and grants waiters.
    """

    def __init__(self, limit: int, stall_timeout_s: float, rate_log: RateLimitedLog) -> None:
        self.limit = limit
        self.stall_timeout_s = stall_timeout_s
        self.used = 0
        self._log = rate_log
        self._granted: dict[FrameHolder, int] = {}
        self._waiting: dict[FrameHolder, int] = {}  # insertion order = FIFO
        self._progress: dict[FrameHolder, tuple[int, float]] = {}  # holder -> (bytes held, since)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def holders(self) -> int:
        return len(self._granted)

    def reserve(self, holder: FrameHolder, size: int) -> bool:
        """(Re)reserve `size` bytes for `holder`'s current frame; False: it must pause reading."""
        self._drop(holder)
        if not self._waiting and (self.used + size <= self.limit or not self._granted):
            self._grant(holder, size)
            return True
        self._waiting[holder] = size
        self._log.warning(
            "budget", "unfinished frames hold %d of serverMaxBufferedFrameBytes=%d bytes: %s waits to send a "
            "%d-byte frame (reading from it paused; %d connection(s) waiting)",
            self.used, self.limit, holder.peer, size, len(self._waiting))
        return False

    def release(self, holder: FrameHolder) -> None:
        if self._drop(holder):
            self._grant_waiters()

    def _drop(self, holder: FrameHolder) -> bool:
        size = self._granted.pop(holder, None)
        if size is None:
            self._waiting.pop(holder, None)
            return False
        self.used -= size
        self._progress.pop(holder, None)
        return True

    def _grant(self, holder: FrameHolder, size: int) -> None:
        self._granted[holder] = size
        self.used += size

    def _grant_waiters(self) -> None:
        while self._waiting:
            holder, size = next(iter(self._waiting.items()))
            if self.used + size > self.limit and self._granted:
                return
            del self._waiting[holder]
            self._grant(holder, size)
            holder.budget_granted()

    def close_stalled(self, now: float) -> int:
        """Close holders that received nothing for stall_timeout_s while other connections wait for budget.
        Called periodically (the servers' sweeps); returns how many were closed."""
        if not self._waiting:
            self._progress.clear()
            return 0
        stalled = []
        for holder in self._granted:
            held = holder.frame_bytes_held
            seen = self._progress.get(holder)
            if seen is None or seen[0] != held:
                self._progress[holder] = (held, now)
            elif now - seen[1] >= self.stall_timeout_s:
                stalled.append((held, holder))
        stalled.sort(key=lambda item: item[0], reverse=True)  # the ones holding most first
        for held, holder in stalled:
            self._log.warning(
                "stalled", "closing %s: its unfinished frame (%d bytes so far) made no progress for %.0f s "
                "(serverFrameStallTimeoutSeconds) while %d connection(s) wait for serverMaxBufferedFrameBytes",
                holder.peer, held, self.stall_timeout_s, len(self._waiting))
            holder.close_for_budget()
            self.release(holder)
        return len(stalled)


class ConnectionGuard:
    """The limits, the open-connection count and the frame budget of one process (see module docstring)."""

    def __init__(self, limits: ConnectionLimits | None = None, descriptors: DescriptorBudget | None = None) -> None:
        self.limits = limits or ConnectionLimits()
        # fileDescriptorReserve: connections are refused before the store runs out of descriptors (broker only)
        self.descriptors = descriptors
        self.log = RateLimitedLog(log)
        self.budget = FrameBudget(self.limits.server_max_buffered_frame_bytes,
                                  float(self.limits.server_frame_stall_timeout_seconds), self.log)
        self.connections = 0
        self._fd_limit_checked = False

    def admit(self, peer: str, server_name: str) -> bool:
        """Count a new connection, or refuse it (False) when serverMaxConnections are open."""
        if self.connections >= self.limits.server_max_connections:
            self.log.warning("max-connections", "%s: refusing connection from %s: serverMaxConnections=%d reached",
                             server_name, peer, self.limits.server_max_connections)
            return False
        descriptors = self.descriptors
        if descriptors is not None:
            if descriptors.admit("a connection from %s on the %s port" % (peer, server_name), "connection"):
                return False
            descriptors.opened()
        self.connections += 1
        return True

    def release(self) -> None:
        self.connections -= 1
        if self.descriptors is not None:
            self.descriptors.closed()

    def check_fd_limit(self) -> None:
        """Say once if serverMaxConnections cannot be reached because of the open-file limit."""
        if self._fd_limit_checked:
            return
        self._fd_limit_checked = True
        try:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        except (OSError, ValueError):
            return
        headroom = max(FD_HEADROOM, self.descriptors.reserve if self.descriptors is not None else 0)
        wanted = self.limits.server_max_connections + headroom
        if soft != resource.RLIM_INFINITY and soft < wanted:
            first = ("new connections are refused once only fileDescriptorReserve=%d descriptors are left"
                     % self.descriptors.reserve if self.descriptors is not None and self.descriptors.reserve > 0
                     else "accepting fails with 'Too many open files'")
            log.warning("serverMaxConnections=%d is above what the open-file limit allows (soft %d, hard %s, and "
                        "about %d files for the store): %s first; raise `ulimit -n` to at least %d or lower "
                        "serverMaxConnections", self.limits.server_max_connections, soft,
                        "unlimited" if hard == resource.RLIM_INFINITY else hard, headroom, first, wanted)
