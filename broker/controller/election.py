"""Who becomes master (controller.md §5, the reference's DefaultElectPolicy). Sans-I/O.

Candidates are the alive members of the SyncStateSet; only when none is alive and unclean election is enabled,
the alive members of the whole group. An alive old master is kept unless another id is designated; a designated
id wins only if it is a candidate; otherwise the best candidate by heartbeat epoch (high first), max offset (high
first) and election priority (low first), broker id last for a stable answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

__all__ = ["LiveInfo", "LiveView", "elect"]


@dataclass(slots=True)
class LiveInfo:
    """What a broker's last heartbeat told (the reference's BrokerLiveInfo, minus the connection)."""

    epoch: int = -1
    max_offset: int = -1
    confirm_offset: int = -1
    election_priority: int = 2**31 - 1


class LiveView(Protocol):
    """The controller's liveness table as the decision logic sees it."""

    def is_alive(self, cluster: str, broker_name: str, broker_id: int) -> bool: ...

    def live_info(self, cluster: str, broker_name: str, broker_id: int) -> LiveInfo | None: ...


def _sort_key(info: LiveInfo | None, broker_id: int) -> tuple[int, int, int, int]:
    if info is None:
        info = LiveInfo()
    return (-info.epoch, -info.max_offset, info.election_priority, broker_id)


def _try(ids: Iterable[int], alive: Callable[[int], bool], info: Callable[[int], LiveInfo | None],
         old_master: int | None, designated: int | None) -> int | None:
    candidates = sorted(i for i in ids if alive(i))
    if not candidates:
        return None
    if old_master in candidates and (designated is None or designated == old_master):
        return old_master
    if designated is not None:
        return designated if designated in candidates else None
    return min(candidates, key=lambda i: _sort_key(info(i), i))


def elect(cluster: str, broker_name: str, sync_state_set: Iterable[int], all_brokers: Iterable[int] | None,
          old_master: int | None, designated: int | None, live: LiveView) -> int | None:
    """The new master's id, the old master's (still fine), or None (no candidate).

    ``all_brokers`` is the whole group when unclean election is enabled, else None."""
    def alive(i: int) -> bool:
        return live.is_alive(cluster, broker_name, i)

    def info(i: int) -> LiveInfo | None:
        return live.live_info(cluster, broker_name, i)

    chosen = _try(sync_state_set, alive, info, old_master, designated)
    if chosen is None and all_brokers is not None:
        chosen = _try(all_brokers, alive, info, old_master, designated)
    return chosen
