"""The controller's in-memory broker liveness table (controller.md §2, §4, §5). Sans-I/O: the caller passes the
time and the connection object; nothing here sleeps or reads sockets.

Liveness is deliberately not stored: every controller keeps its own table from the heartbeats (904) brokers send
to all of them, so a controller that takes over already knows who is alive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from broker.controller.election import LiveInfo

__all__ = ["BrokerLive", "LivenessTable", "DEFAULT_HEARTBEAT_TIMEOUT_MS"]

DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000  # the broker's controllerHeartBeatTimeoutMills default

Key = tuple[str, str, int]  # (clusterName, brokerName, brokerId)


@dataclass(slots=True)
class BrokerLive:
    cluster_name: str
    broker_name: str
    broker_id: int
    address: str
    last_seen: float  # monotonic seconds
    timeout_ms: int
    channel: Any
    info: LiveInfo

    @property
    def key(self) -> Key:
        return (self.cluster_name, self.broker_name, self.broker_id)


class LivenessTable:
    """(cluster, brokerName, brokerId) -> last heartbeat; also the ``LiveView`` of the decision logic."""

    def __init__(self) -> None:
        self._table: dict[Key, BrokerLive] = {}

    def __len__(self) -> int:
        return len(self._table)

    def __iter__(self) -> Iterator[BrokerLive]:
        return iter(list(self._table.values()))

    def heartbeat(self, now: float, cluster: str, broker_name: str, broker_id: int, address: str, channel: Any,
                  epoch: int | None, max_offset: int | None, confirm_offset: int | None, timeout_ms: int | None,
                  election_priority: int | None) -> BrokerLive:
        """Record one heartbeat. The epoch/offset pair is kept only if newer (higher epoch, or same epoch and higher
        offset), so a reordered older heartbeat cannot make a broker look behind or ahead."""
        key = (cluster, broker_name, broker_id)
        entry = self._table.get(key)
        timeout = timeout_ms if timeout_ms and timeout_ms > 0 else DEFAULT_HEARTBEAT_TIMEOUT_MS
        if entry is None:
            entry = BrokerLive(cluster, broker_name, broker_id, address, now, timeout, channel, LiveInfo())
            self._table[key] = entry
        entry.address = address
        entry.last_seen = now
        entry.timeout_ms = timeout
        entry.channel = channel
        info = entry.info
        ep = epoch if epoch is not None else -1
        off = max_offset if max_offset is not None else -1
        if ep > info.epoch or (ep == info.epoch and off > info.max_offset):
            info.epoch, info.max_offset = ep, off
        if confirm_offset is not None:
            info.confirm_offset = confirm_offset
        if election_priority is not None:
            info.election_priority = election_priority
        return entry

    # ---- LiveView ------------------------------------------------------------------------------------------------
    def is_alive(self, cluster: str, broker_name: str, broker_id: int) -> bool:
        return (cluster, broker_name, broker_id) in self._table

    def live_info(self, cluster: str, broker_name: str, broker_id: int) -> LiveInfo | None:
        entry = self._table.get((cluster, broker_name, broker_id))
        return entry.info if entry is not None else None

    def get(self, cluster: str, broker_name: str, broker_id: int) -> BrokerLive | None:
        return self._table.get((cluster, broker_name, broker_id))

    def members(self, cluster: str, broker_name: str) -> list[BrokerLive]:
        return [e for e in self._table.values() if e.cluster_name == cluster and e.broker_name == broker_name]

    # ---- expiry ---------------------------------------------------------------------------------------------------
    def expire(self, now: float) -> list[BrokerLive]:
        """Remove and return the brokers whose last heartbeat is older than their timeout."""
        gone = [e for e in self._table.values() if now - e.last_seen > e.timeout_ms / 1000.0]
        for entry in gone:
            del self._table[entry.key]
        return gone

    def drop_channel(self, channel: Any) -> list[BrokerLive]:
        """Remove and return the brokers whose heartbeats came over ``channel`` (it closed)."""
        gone = [e for e in self._table.values() if e.channel is channel]
        for entry in gone:
            del self._table[entry.key]
        return gone

    def remove(self, cluster: str, broker_name: str, broker_id: int) -> BrokerLive | None:
        return self._table.pop((cluster, broker_name, broker_id), None)
