"""The console's Replication page (issue 28): who replicates with whom in this broker's group.

Controller mode: the group as the active controller knows it (CONTROLLER_GET_SYNC_STATE_DATA: every replica's id,
address, alive and in/not in the SyncStateSet, the master, masterEpoch and syncStateSetEpoch) beside what this broker
itself acted on (its controller id, role, epochs, max and confirm offsets). A controller that cannot be reached is
said so; the local half is still shown. Classic master/slave: this broker's role, its slaves' HA connections (a
master) or its master's HA address (a slave), and that controller mode is off.

Built from small parts, never the whole broker: ``ControllerParts`` (the ReplicasManager's and BrokerRoles' own
readings) or ``ClassicParts`` (the HA master and slave objects). Addresses and roles only, no message data; still a
broker-wide figure, so only admin accounts see it (the console's rule, broker/console/access.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from broker.console.access import Viewer

__all__ = ["ClassicParts", "ControllerParts", "ReplicationView"]

CONTROLLER_TIMEOUT_S = 4.0  # the page answers even when no controller does


@dataclass(frozen=True, slots=True)
class ControllerParts:
    """``group_state()``: the controller's ReplicasInfo for this group (None: unknown there); ``manager_state()`` and
    ``log_state()``: this broker's own view (ReplicasManager.local_state, BrokerRoles.local_state)."""

    group_state: Callable[[], Awaitable[Any]]
    manager_state: Callable[[], dict[str, Any]]
    log_state: Callable[[], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ClassicParts:
    """A classic broker: ``role()`` its brokerRole, ``ha_master`` (a master's HA listener, else None), ``ha_slave`` (a
    slave's HA client, else None), ``max_offset()`` its commit log's end."""

    role: Callable[[], str]
    ha_master: Any
    ha_slave: Any
    max_offset: Callable[[], int]


def _replica(r: Any, in_sync: bool, master_id: int | None) -> dict[str, Any]:
    return {"brokerId": r.broker_id, "address": r.broker_address, "alive": bool(r.alive), "inSync": in_sync,
            "master": r.broker_id == master_id}


class ReplicationView:
    """``/api/replication``'s answer, for one of the two kinds of broker."""

    def __init__(self, cluster: str, broker_name: str, parts: ControllerParts | ClassicParts) -> None:
        self.cluster = cluster
        self.broker_name = broker_name
        self.parts = parts

    async def state(self, viewer: Viewer) -> dict[str, Any]:
        viewer.require_admin("the replication state (broker roles and addresses, a broker-wide figure)")
        head = {"clusterName": self.cluster, "brokerName": self.broker_name}
        parts = self.parts
        if isinstance(parts, ClassicParts):
            return head | {"controllerMode": False, **self._classic(parts)}
        local = parts.manager_state() | parts.log_state()
        group: dict[str, Any] | None = None
        problem: str | None = None
        try:
            info = await asyncio.wait_for(parts.group_state(), CONTROLLER_TIMEOUT_S)
        except (ConnectionError, OSError, TimeoutError) as exc:  # ControllerError is a ConnectionError
            info, problem = None, f"no controller answered: {exc or type(exc).__name__}"
        if info is not None:
            master = info.master_broker_id
            replicas = [_replica(r, True, master) for r in info.in_sync_replicas] + \
                [_replica(r, False, master) for r in info.not_in_sync_replicas]
            replicas.sort(key=lambda r: r["brokerId"])
            group = {"masterBrokerId": master, "masterAddress": info.master_address,
                     "masterEpoch": info.master_epoch, "syncStateSetEpoch": info.sync_state_set_epoch,
                     "syncStateSet": sorted(r.broker_id for r in info.in_sync_replicas), "replicas": replicas}
        elif problem is None:
            problem = "the controller knows no such broker group yet (this broker has not registered)"
        return head | {"controllerMode": True, "local": local, "group": group, "controllerProblem": problem}

    @staticmethod
    def _classic(parts: ClassicParts) -> dict[str, Any]:
        max_offset = parts.max_offset()
        slaves = []
        master = parts.ha_master
        if master is not None:
            for conn in sorted(getattr(master, "slaves", ()), key=lambda c: c.addr):
                acked = conn.acked
                slaves.append({"address": conn.addr, "ackedOffset": acked,
                               "behindBytes": max(0, max_offset - acked) if acked >= 0 else None})
        slave = parts.ha_slave
        following = None
        if slave is not None:
            following = {"haAddress": slave.master_address, "connected": bool(slave.connected),
                         "masterMaxOffset": slave.master_max_seen if slave.master_max_seen >= 0 else None}
        return {"role": parts.role(), "maxOffset": max_offset, "slaves": slaves, "master": following}
