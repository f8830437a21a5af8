"""What the controller answers and which event it commits, per request (controller.md §3, §5, §7, §11). Sans-I/O.

Each function takes the group's current state (None: unknown group), the request's fields and the liveness view,
and returns a ``Decision``: response code, remark, response header, body, and the event to commit (if any). The
service commits the event through its backend and only then sends the answer, so an answer never announces a
change that was not stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from broker.controller.election import LiveView, elect
from broker.controller.state import (FIRST_BROKER_ID, AlterSyncStateSet, ApplyBrokerId, CleanBrokerData, ElectMaster,
                                     Event, GroupState, UpdateBrokerAddress)
from protocol.codes import ResponseCode
from protocol.jsonlenient import dumps_compact
from protocol.controller import (AlterSyncStateSetResponseHeader, ApplyBrokerIdResponseHeader, BrokerMemberGroup,
                                 BrokerReplica, BrokerReplicasInfo, ElectMasterResponseBody, ElectMasterResponseHeader,
                                 GetNextBrokerIdResponseHeader, GetReplicaInfoResponseHeader,
                                 RegisterBrokerToControllerResponseHeader, ReplicasInfo, SyncStateSet)

__all__ = ["Decision", "get_next_broker_id", "apply_broker_id", "register_broker", "elect_master",
           "alter_sync_state_set", "get_replica_info", "get_sync_state_data", "clean_broker_data",
           "parse_broker_ids"]


@dataclass(slots=True)
class Decision:
    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    header: Any = None  # a protocol.controller header, or None
    body: bytes = b""
    event: Event | None = None
    new_master: bool = False  # a SUCCESS election: tell the group's alive members (NOTIFY_BROKER_ROLE_CHANGED)
    extra: dict[str, Any] = field(default_factory=dict)

    def ext_fields(self) -> dict[str, Any] | None:
        return self.header.encode() if self.header is not None else None


def _sync_body(state: GroupState) -> bytes:
    return SyncStateSet(set(state.sync_state_set), state.sync_state_set_epoch).encode()


# ---- broker ids (§3) -------------------------------------------------------------------------------------------
def get_next_broker_id(state: GroupState | None, cluster: str, broker_name: str) -> Decision:
    nxt = state.next_assign_broker_id if state is not None else FIRST_BROKER_ID
    return Decision(header=GetNextBrokerIdResponseHeader(cluster_name=cluster, broker_name=broker_name,
                                                         next_broker_id=nxt))


def apply_broker_id(state: GroupState | None, cluster: str, broker_name: str, broker_id: int,
                    check_code: str) -> Decision:
    """Accept the id if the group is unknown and the id is 1, the id is free, or it is held with the same check
    code (a retry after a crash); else 2014."""
    header = ApplyBrokerIdResponseHeader(cluster_name=cluster, broker_name=broker_name)
    address = check_code.split(";", 1)[0]
    event = ApplyBrokerId(cluster, broker_name, broker_id, address, check_code)
    if broker_id < FIRST_BROKER_ID:
        return Decision(ResponseCode.CONTROLLER_BROKER_ID_INVALID, f"brokerId {broker_id} is not a controller id "
                        f"(they start at {FIRST_BROKER_ID})", header)
    if state is None:
        if broker_id == FIRST_BROKER_ID:
            return Decision(header=header, event=event)
        return Decision(ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                        f"Broker-set: {broker_name} hasn't been registered in controller, but broker try to apply "
                        f"brokerId: {broker_id}", header)
    slot = state.brokers.get(broker_id)
    if slot is None:
        return Decision(header=header, event=event)
    if slot.register_check_code == check_code:
        return Decision(header=header)  # a retry: already applied, nothing to store
    return Decision(ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                    f"Fail to apply brokerId: {broker_id} in broker-set: {broker_name}", header)


def register_broker(state: GroupState | None, cluster: str, broker_name: str, broker_id: int, address: str,
                    live: LiveView) -> Decision:
    """Master fields only when a master exists and is alive; body the current SyncStateSet; an address change
    is stored (UpdateBrokerAddress)."""
    header = RegisterBrokerToControllerResponseHeader(cluster_name=cluster, broker_name=broker_name)
    if state is None:
        return Decision(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                        f"Broker-set: {broker_name} hasn't been registered in controller", header)
    if broker_id not in state.brokers:
        return Decision(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                        f"BrokerId: {broker_id} hasn't been registered in broker-set: {broker_name}", header)
    master = state.master_broker_id
    if master is not None and live.is_alive(state.cluster_name, broker_name, master):
        header.master_broker_id = master
        header.master_address = state.address_of(master)
        header.master_epoch = state.master_epoch
        header.sync_state_set_epoch = state.sync_state_set_epoch
    event = None
    if state.address_of(broker_id) != address:
        event = UpdateBrokerAddress(broker_name, broker_id, address)
    return Decision(header=header, body=_sync_body(state), event=event)


# ---- elections (§5) --------------------------------------------------------------------------------------------
def elect_master(state: GroupState | None, broker_name: str, broker_id: int | None, designate: bool,
                 live: LiveView, unclean: bool) -> Decision:
    """``broker_id`` None or -1: triggered by the controller (a failed election then stores "no master", 2004);
    otherwise by a broker for itself or by an admin (``designate``): failure is 2012 and changes nothing."""
    header = ElectMasterResponseHeader()
    if state is None:
        return Decision(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered",
                        header)
    controller_triggered = broker_id is None or broker_id == -1
    old = state.master_broker_id
    new: int | None = None
    if state.first_time_for_elect and not controller_triggered:
        if broker_id not in state.brokers:  # not a member: it cannot be "the requesting broker"
            return Decision(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                            f"brokerId {broker_id} is not registered in broker-set {broker_name}", header)
        new = broker_id
    if new is None:
        new = elect(state.cluster_name, broker_name, state.sync_state_set,
                    state.brokers.keys() if unclean else None, old,
                    broker_id if designate and not controller_triggered else None, live)
    if new is not None and new == old:
        header.master_epoch = state.master_epoch
        header.sync_state_set_epoch = state.sync_state_set_epoch
        header.master_broker_id = old
        header.master_address = state.address_of(old)
        # the reference leaves brokerMemberGroup null here (fastjson then omits it)
        body = dumps_compact({"syncStateSet": sorted(state.sync_state_set)})
        return Decision(ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                        f"The old master {old} is still alive, not need to elect new master for broker {broker_name}",
                        header, body)
    if new is not None:
        header.master_broker_id = new
        header.master_address = state.address_of(new)
        header.master_epoch = state.master_epoch + 1
        header.sync_state_set_epoch = state.sync_state_set_epoch + 1
        group = BrokerMemberGroup(state.cluster_name, broker_name, {k: v.address for k, v in state.brokers.items()})
        body = ElectMasterResponseBody(group, {new}).encode()
        return Decision(header=header, body=body, event=ElectMaster(broker_name, new), new_master=True)
    if controller_triggered:
        return Decision(ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                        "Old master has down and failed to elect a new broker master", header,
                        event=ElectMaster(broker_name, None))
    return Decision(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master", header)


# ---- SyncStateSet (§7) -----------------------------------------------------------------------------------------
def alter_sync_state_set(state: GroupState | None, broker_name: str, master_broker_id: int, master_epoch: int,
                         proposed: SyncStateSet, live: LiveView) -> Decision:
    """Checks in the reference's order: group (2013), same set (2013), master id (2002), master epoch (2000),
    set epoch (2001), ids registered (2003) and alive (2006), master included (2013)."""
    header = AlterSyncStateSetResponseHeader()
    if state is None:
        return Decision(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed", header)
    new_set = frozenset(proposed.sync_state_set)
    if new_set == state.sync_state_set:
        return Decision(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                        "The newSyncStateSet is equal with oldSyncStateSet, no needed to update syncStateSet", header)
    if state.master_broker_id is None or state.master_broker_id != master_broker_id:
        return Decision(ResponseCode.CONTROLLER_INVALID_MASTER,
                        "Rejecting alter syncStateSet request because the current leader is:"
                        f"{{{state.master_broker_id}}}, not {{{master_broker_id}}}", header)
    if master_epoch != state.master_epoch:
        return Decision(ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                        "Rejecting alter syncStateSet request because the current master epoch is:"
                        f"{{{state.master_epoch}}}, not {{{master_epoch}}}", header)
    if proposed.sync_state_set_epoch != state.sync_state_set_epoch:
        return Decision(ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                        "Rejecting alter syncStateSet request because the current syncStateSet epoch is:"
                        f"{{{state.sync_state_set_epoch}}}, not {{{proposed.sync_state_set_epoch}}}", header)
    for replica in sorted(new_set):
        if replica not in state.brokers:
            return Decision(ResponseCode.CONTROLLER_INVALID_REPLICAS,
                            f"Rejecting alter syncStateSet request because the replicas {{{replica}}} don't exist",
                            header)
        if not live.is_alive(state.cluster_name, broker_name, replica):
            return Decision(ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
                            f"Rejecting alter syncStateSet request because the replicas {{{replica}}} don't alive",
                            header)
    if state.master_broker_id not in new_set:
        return Decision(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                        "Rejecting alter syncStateSet request because the newSyncStateSet don't contains origin "
                        f"leader {{{state.master_broker_id}}}", header)
    epoch = state.sync_state_set_epoch + 1
    header.new_sync_state_set_epoch = epoch
    return Decision(header=header, body=SyncStateSet(set(new_set), epoch).encode(),
                    event=AlterSyncStateSet(broker_name, new_set))


# ---- reads -----------------------------------------------------------------------------------------------------
def get_replica_info(state: GroupState | None, broker_name: str) -> Decision:
    if state is None:
        return Decision(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, "Broker metadata is not existed",
                        GetReplicaInfoResponseHeader())
    header = GetReplicaInfoResponseHeader(master_broker_id=state.master_broker_id,
                                          master_address=state.master_address, master_epoch=state.master_epoch)
    return Decision(header=header, body=_sync_body(state))


def get_sync_state_data(states: Mapping[str, GroupState], broker_names: Iterable[str], live: LiveView) -> Decision:
    table: dict[str, ReplicasInfo] = {}
    for name in broker_names:
        state = states.get(name)
        if state is None:
            continue
        in_sync: list[BrokerReplica] = []
        not_in_sync: list[BrokerReplica] = []
        for broker_id, slot in sorted(state.brokers.items()):
            replica = BrokerReplica(name, broker_id, slot.address, live.is_alive(state.cluster_name, name, broker_id))
            (in_sync if broker_id in state.sync_state_set else not_in_sync).append(replica)
        table[name] = ReplicasInfo(state.master_broker_id, state.master_address, state.master_epoch,
                                   state.sync_state_set_epoch, in_sync, not_in_sync)
    return Decision(body=BrokerReplicasInfo(table).encode())


# ---- CLEAN_BROKER_DATA (§11) -----------------------------------------------------------------------------------
def parse_broker_ids(text: str | None) -> frozenset[int] | None:
    """``1;2`` -> {1, 2}; blank -> None. Raises ValueError naming the bad entry."""
    if text is None or not text.strip():
        return None
    ids: set[int] = set()
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        try:
            ids.add(int(part))
        except ValueError:
            raise ValueError(f"not a broker id: {part!r}") from None
    return frozenset(ids) or None


def clean_broker_data(state: GroupState | None, cluster: str, broker_name: str, ids_text: str | None,
                      clean_living: bool, live: LiveView) -> Decision:
    """Without ``clean_living``: refuse (2009) a whole group that has a master, or any given id that is alive."""
    try:
        ids = parse_broker_ids(ids_text)
    except ValueError as exc:
        return Decision(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                        f"Please set the option <brokerControllerIdsToClean> according to the format, {exc}")
    if not clean_living:
        if ids is None and state is not None and state.master_broker_id is not None:
            return Decision(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                            f"Broker {broker_name} is still alive, clean up failure")
        for broker_id in sorted(ids or ()):
            if live.is_alive(cluster or (state.cluster_name if state else ""), broker_name, broker_id):
                return Decision(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                f"Broker [{broker_name},  {broker_id}] is still alive, clean up failure")
    if state is None:
        return Decision(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                        f"Broker {broker_name} is not existed,clean broker data failure.")
    return Decision(event=CleanBrokerData(broker_name, ids))
