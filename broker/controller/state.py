"""The controller's per-group state and the events that change it (controller.md §2). Sans-I/O.

A group (keyed by brokerName) holds the replica info (cluster, brokerName, nextAssignBrokerId, id -> address and
register check code) and the sync state info (master id, masterEpoch, syncStateSetEpoch, SyncStateSet). Every
change is an event applied by ``apply_event``; the backends persist the resulting group (one JSON document each),
so a restarted or newly elected controller serves exactly what was decided.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Union

__all__ = [
    "FIRST_BROKER_ID", "BrokerSlot", "GroupState", "ApplyBrokerId", "UpdateBrokerAddress", "ElectMaster",
    "AlterSyncStateSet", "CleanBrokerData", "Event", "apply_event", "group_to_json", "group_from_json",
]

FIRST_BROKER_ID = 1  # controller ids start at 1; the route shows the master as 0


@dataclass(frozen=True, slots=True)
class BrokerSlot:
    """One replica of a group: its current address and the check code it applied its id with."""

    address: str
    register_check_code: str = ""


@dataclass(frozen=True, slots=True)
class GroupState:
    """Both records of one broker group. Immutable: events return a new value."""

    cluster_name: str
    broker_name: str
    next_assign_broker_id: int = FIRST_BROKER_ID
    brokers: dict[int, BrokerSlot] = field(default_factory=dict)
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()

    def address_of(self, broker_id: int | None) -> str | None:
        slot = self.brokers.get(broker_id) if broker_id is not None else None
        return slot.address if slot is not None else None

    @property
    def master_address(self) -> str | None:
        return self.address_of(self.master_broker_id)

    @property
    def first_time_for_elect(self) -> bool:
        """Never had a master: the first election takes the requester (controller.md §5 rule 2)."""
        return self.master_epoch == 0


# ---- events ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ApplyBrokerId:
    cluster_name: str
    broker_name: str
    broker_id: int
    address: str
    register_check_code: str


@dataclass(frozen=True, slots=True)
class UpdateBrokerAddress:
    broker_name: str
    broker_id: int
    address: str


@dataclass(frozen=True, slots=True)
class ElectMaster:
    """``broker_id`` None: the master is gone and nobody was elected (masterEpoch still + 1, set kept)."""

    broker_name: str
    broker_id: int | None


@dataclass(frozen=True, slots=True)
class AlterSyncStateSet:
    broker_name: str
    sync_state_set: frozenset[int]


@dataclass(frozen=True, slots=True)
class CleanBrokerData:
    """``broker_ids`` None or empty: drop the whole group."""

    broker_name: str
    broker_ids: frozenset[int] | None = None


Event = Union[ApplyBrokerId, UpdateBrokerAddress, ElectMaster, AlterSyncStateSet, CleanBrokerData]


def apply_event(state: GroupState | None, event: Event) -> GroupState | None:
    """The group after ``event``; None when the group no longer exists. Events that do not fit (unknown group for
    anything but ApplyBrokerId) leave the state as it is: the request logic checks before emitting them."""
    if isinstance(event, ApplyBrokerId):
        if state is None:
            state = GroupState(event.cluster_name, event.broker_name)
        if event.broker_id in state.brokers:
            return state
        brokers = dict(state.brokers)
        brokers[event.broker_id] = BrokerSlot(event.address, event.register_check_code)
        # +1, and never at or below an id already handed out (an id applied out of order must not be offered again)
        nxt = max(state.next_assign_broker_id + 1, event.broker_id + 1)
        return replace(state, brokers=brokers, next_assign_broker_id=nxt)
    if state is None:
        return None
    if isinstance(event, UpdateBrokerAddress):
        slot = state.brokers.get(event.broker_id)
        if slot is None:
            return state
        brokers = dict(state.brokers)
        brokers[event.broker_id] = BrokerSlot(event.address, slot.register_check_code)
        return replace(state, brokers=brokers)
    if isinstance(event, ElectMaster):
        if event.broker_id is None:
            return replace(state, master_broker_id=None, master_epoch=state.master_epoch + 1)
        return replace(state, master_broker_id=event.broker_id, master_epoch=state.master_epoch + 1,
                       sync_state_set=frozenset({event.broker_id}),
                       sync_state_set_epoch=state.sync_state_set_epoch + 1)
    if isinstance(event, AlterSyncStateSet):
        return replace(state, sync_state_set=frozenset(event.sync_state_set),
                       sync_state_set_epoch=state.sync_state_set_epoch + 1)
    if isinstance(event, CleanBrokerData):
        if not event.broker_ids:
            return None
        brokers = {k: v for k, v in state.brokers.items() if k not in event.broker_ids}
        if not brokers:
            return None
        master = state.master_broker_id if state.master_broker_id not in event.broker_ids else None
        return replace(state, brokers=brokers, master_broker_id=master,
                       sync_state_set=frozenset(state.sync_state_set - event.broker_ids))
    raise TypeError(f"unknown event {event!r}")


# ---- persistence format ----------------------------------------------------------------------------------------
def group_to_json(state: GroupState) -> dict[str, Any]:
    return {
        "clusterName": state.cluster_name, "brokerName": state.broker_name,
        "nextAssignBrokerId": state.next_assign_broker_id,
        "brokers": {str(k): {"address": v.address, "registerCheckCode": v.register_check_code}
                    for k, v in sorted(state.brokers.items())},
        "masterBrokerId": state.master_broker_id, "masterEpoch": state.master_epoch,
        "syncStateSetEpoch": state.sync_state_set_epoch, "syncStateSet": sorted(state.sync_state_set),
    }


def group_from_json(obj: Any) -> GroupState:
    """Raises ValueError on a malformed document (a corrupt store is refused, never half-read)."""
    if isinstance(obj, (bytes, str)):
        obj = json.loads(obj)
    if not isinstance(obj, dict):
        raise ValueError("a group must be a JSON object")
    try:
        brokers = {int(k): BrokerSlot(str(v["address"]), str(v.get("registerCheckCode", "")))
                   for k, v in dict(obj.get("brokers") or {}).items()}
        master = obj.get("masterBrokerId")
        return GroupState(
            cluster_name=str(obj["clusterName"]), broker_name=str(obj["brokerName"]),
            next_assign_broker_id=int(obj.get("nextAssignBrokerId", FIRST_BROKER_ID)), brokers=brokers,
            master_broker_id=int(master) if master is not None else None,
            master_epoch=int(obj.get("masterEpoch", 0)), sync_state_set_epoch=int(obj.get("syncStateSetEpoch", 0)),
            sync_state_set=frozenset(int(i) for i in obj.get("syncStateSet") or ()),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed group: {exc!r}") from None
