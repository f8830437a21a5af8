"""Controller mode on the wire (5.x automatic failover, controller.md §11): request headers and JSON bodies.

Shared by the controller (broker/controller/), brokers in controller mode and ``mqadmin``. Sans-I/O: headers are
``protocol.headers.Header`` classes, bodies ``protocol.json_body.Body`` classes, decoded liberally (fastjson writes
Long map keys unquoted and numbers as strings) and encoded the way the reference's Java side reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocol.headers import F, Header, int32, int64
from protocol.json_body import Body, as_bool, as_dict, as_int, as_list, as_object, as_str

__all__ = [
    "BrokerHeartbeatRequestHeader", "AlterSyncStateSetRequestHeader", "AlterSyncStateSetResponseHeader",
    "ElectMasterRequestHeader", "ElectMasterResponseHeader", "RegisterBrokerToControllerRequestHeader",
    "RegisterBrokerToControllerResponseHeader", "GetReplicaInfoRequestHeader", "GetReplicaInfoResponseHeader",
    "GetMetaDataResponseHeader", "NotifyBrokerRoleChangedRequestHeader", "CleanControllerBrokerDataRequestHeader",
    "GetNextBrokerIdRequestHeader", "GetNextBrokerIdResponseHeader", "ApplyBrokerIdRequestHeader",
    "ApplyBrokerIdResponseHeader", "SyncStateSet", "BrokerMemberGroup", "ElectMasterResponseBody",
    "BrokerReplica", "ReplicasInfo", "BrokerReplicasInfo", "EpochEntry", "EpochEntryCache", "LONG_MAX",
]

LONG_MAX = (1 << 63) - 1  # the open end of the last epoch entry, as Java writes it


# ---- headers ---------------------------------------------------------------------------------------------------
class BrokerHeartbeatRequestHeader(Header):
    """BROKER_HEARTBEAT (904), one-way, to every reachable controller."""

    cluster_name = F("clusterName", str, required=True)
    broker_addr = F("brokerAddr", str, required=True)
    broker_name = F("brokerName", str, required=True)
    broker_id = F("brokerId", int64)
    epoch = F("epoch", int32)
    max_offset = F("maxOffset", int64)
    confirm_offset = F("confirmOffset", int64)
    heartbeat_timeout_mills = F("heartbeatTimeoutMills", int64)
    election_priority = F("electionPriority", int32)


class AlterSyncStateSetRequestHeader(Header):
    """CONTROLLER_ALTER_SYNC_STATE_SET (1001): a master proposes a new SyncStateSet (body SyncStateSet)."""

    broker_name = F("brokerName", str, required=True)
    master_broker_id = F("masterBrokerId", int64, required=True)
    master_epoch = F("masterEpoch", int32, required=True)
    invoke_time = F("invokeTime", int64)


class AlterSyncStateSetResponseHeader(Header):
    new_sync_state_set_epoch = F("newSyncStateSetEpoch", int32)


class ElectMasterRequestHeader(Header):
    """CONTROLLER_ELECT_MASTER (1002): a broker asks for itself, a controller for anyone, an admin for one id."""

    cluster_name = F("clusterName", str, default="")
    broker_name = F("brokerName", str, required=True)
    broker_id = F("brokerId", int64, default=-1)
    designate_elect = F("designateElect", bool, default=False)
    invoke_time = F("invokeTime", int64)


class ElectMasterResponseHeader(Header):
    master_broker_id = F("masterBrokerId", int64)
    master_address = F("masterAddress", str)
    master_epoch = F("masterEpoch", int32)
    sync_state_set_epoch = F("syncStateSetEpoch", int32)


class RegisterBrokerToControllerRequestHeader(Header):
    """CONTROLLER_REGISTER_BROKER (1003)."""

    cluster_name = F("clusterName", str, required=True)
    broker_name = F("brokerName", str, required=True)
    broker_id = F("brokerId", int64, required=True)
    broker_address = F("brokerAddress", str, required=True)
    invoke_time = F("invokeTime", int64)


class RegisterBrokerToControllerResponseHeader(Header):
    cluster_name = F("clusterName", str)
    broker_name = F("brokerName", str)
    master_broker_id = F("masterBrokerId", int64)
    master_address = F("masterAddress", str)
    master_epoch = F("masterEpoch", int32)
    sync_state_set_epoch = F("syncStateSetEpoch", int32)


class GetReplicaInfoRequestHeader(Header):
    """CONTROLLER_GET_REPLICA_INFO (1004)."""

    broker_name = F("brokerName", str, required=True)


class GetReplicaInfoResponseHeader(Header):
    master_broker_id = F("masterBrokerId", int64)
    master_address = F("masterAddress", str)
    master_epoch = F("masterEpoch", int32)


class GetMetaDataResponseHeader(Header):
    """CONTROLLER_GET_METADATA_INFO (1005): who leads; ``peers`` is ``id:addr;`` repeated."""

    group = F("group", str)
    controller_leader_id = F("controllerLeaderId", str)
    controller_leader_address = F("controllerLeaderAddress", str)
    is_leader = F("isLeader", bool, default=False)
    peers = F("peers", str)


class NotifyBrokerRoleChangedRequestHeader(Header):
    """NOTIFY_BROKER_ROLE_CHANGED (1008), controller -> broker, one-way (body SyncStateSet)."""

    master_address = F("masterAddress", str)
    master_epoch = F("masterEpoch", int32)
    sync_state_set_epoch = F("syncStateSetEpoch", int32)
    master_broker_id = F("masterBrokerId", int64)


class CleanControllerBrokerDataRequestHeader(Header):
    """CLEAN_BROKER_DATA (1011): ``brokerControllerIdsToClean`` is ``1;2``."""

    cluster_name = F("clusterName", str)
    broker_name = F("brokerName", str, required=True)
    broker_controller_ids_to_clean = F("brokerControllerIdsToClean", str)
    is_clean_living_broker = F("isCleanLivingBroker", bool, default=False)
    invoke_time = F("invokeTime", int64)


class GetNextBrokerIdRequestHeader(Header):
    """CONTROLLER_GET_NEXT_BROKER_ID (1012)."""

    cluster_name = F("clusterName", str, required=True)
    broker_name = F("brokerName", str, required=True)


class GetNextBrokerIdResponseHeader(Header):
    cluster_name = F("clusterName", str)
    broker_name = F("brokerName", str)
    next_broker_id = F("nextBrokerId", int64)


class ApplyBrokerIdRequestHeader(Header):
    """CONTROLLER_APPLY_BROKER_ID (1013): claim ``appliedBrokerId`` with a check code (``<addr>;<millis>``)."""

    cluster_name = F("clusterName", str, required=True)
    broker_name = F("brokerName", str, required=True)
    applied_broker_id = F("appliedBrokerId", int64, required=True)
    register_check_code = F("registerCheckCode", str, required=True)


class ApplyBrokerIdResponseHeader(Header):
    cluster_name = F("clusterName", str)
    broker_name = F("brokerName", str)


# ---- bodies ----------------------------------------------------------------------------------------------------
def _ids(value: Any) -> set[int]:
    return {as_int(v) for v in as_list(value) if v is not None and v != ""}


@dataclass(slots=True)
class SyncStateSet(Body):
    """``{"syncStateSet":[1,2],"syncStateSetEpoch":3}``."""

    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0

    @classmethod
    def from_json(cls, obj: Any) -> "SyncStateSet":
        d = as_object(obj)
        return cls(_ids(d.get("syncStateSet")), as_int(d.get("syncStateSetEpoch")))

    def to_json(self) -> dict:
        return {"syncStateSet": sorted(self.sync_state_set), "syncStateSetEpoch": self.sync_state_set_epoch}


@dataclass(slots=True)
class BrokerMemberGroup(Body):
    """``{"cluster":…,"brokerName":…,"brokerAddrs":{id:addr}}``."""

    cluster: str = ""
    broker_name: str = ""
    broker_addrs: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Any) -> "BrokerMemberGroup":
        d = as_object(obj)
        addrs = {as_int(k): as_str(v) or "" for k, v in as_dict(d.get("brokerAddrs")).items()}
        return cls(as_str(d.get("cluster")) or "", as_str(d.get("brokerName")) or "", addrs)

    def to_json(self) -> dict:
        return {"brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
                "brokerName": self.broker_name, "cluster": self.cluster}


@dataclass(slots=True)
class ElectMasterResponseBody(Body):
    broker_member_group: BrokerMemberGroup = field(default_factory=BrokerMemberGroup)
    sync_state_set: set[int] = field(default_factory=set)

    @classmethod
    def from_json(cls, obj: Any) -> "ElectMasterResponseBody":
        d = as_object(obj)
        group = d.get("brokerMemberGroup")
        return cls(BrokerMemberGroup.from_json(group) if isinstance(group, dict) else BrokerMemberGroup(),
                   _ids(d.get("syncStateSet")))

    def to_json(self) -> dict:
        return {"brokerMemberGroup": self.broker_member_group.to_json(), "syncStateSet": sorted(self.sync_state_set)}


@dataclass(slots=True)
class BrokerReplica(Body):
    """One ``ReplicaIdentity`` of BrokerReplicasInfo."""

    broker_name: str = ""
    broker_id: int = 0
    broker_address: str = ""
    alive: bool = False

    @classmethod
    def from_json(cls, obj: Any) -> "BrokerReplica":
        d = as_object(obj)
        return cls(as_str(d.get("brokerName")) or "", as_int(d.get("brokerId")), as_str(d.get("brokerAddress")) or "",
                   as_bool(d.get("alive")))

    def to_json(self) -> dict:
        return {"alive": self.alive, "brokerAddress": self.broker_address, "brokerId": self.broker_id,
                "brokerName": self.broker_name}


@dataclass(slots=True)
class ReplicasInfo(Body):
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    in_sync_replicas: list[BrokerReplica] = field(default_factory=list)
    not_in_sync_replicas: list[BrokerReplica] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any) -> "ReplicasInfo":
        d = as_object(obj)
        master = d.get("masterBrokerId")
        return cls(as_int(master) if master is not None else None, as_str(d.get("masterAddress"), None),
                   as_int(d.get("masterEpoch")), as_int(d.get("syncStateSetEpoch")),
                   [BrokerReplica.from_json(r) for r in as_list(d.get("inSyncReplicas")) if isinstance(r, dict)],
                   [BrokerReplica.from_json(r) for r in as_list(d.get("notInSyncReplicas")) if isinstance(r, dict)])

    def to_json(self) -> dict:
        out: dict[str, Any] = {"inSyncReplicas": [r.to_json() for r in self.in_sync_replicas],
                               "masterEpoch": self.master_epoch,
                               "notInSyncReplicas": [r.to_json() for r in self.not_in_sync_replicas],
                               "syncStateSetEpoch": self.sync_state_set_epoch}
        if self.master_broker_id is not None:
            out["masterBrokerId"] = self.master_broker_id
        if self.master_address is not None:
            out["masterAddress"] = self.master_address
        return out


@dataclass(slots=True)
class BrokerReplicasInfo(Body):
    """CONTROLLER_GET_SYNC_STATE_DATA (1006)'s answer: ``{"replicasInfoTable":{brokerName: ReplicasInfo}}``."""

    replicas_info_table: dict[str, ReplicasInfo] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Any) -> "BrokerReplicasInfo":
        d = as_object(obj)
        return cls({str(k): ReplicasInfo.from_json(v) for k, v in as_dict(d.get("replicasInfoTable")).items()
                    if isinstance(v, dict)})

    def to_json(self) -> dict:
        return {"replicasInfoTable": {k: v.to_json() for k, v in sorted(self.replicas_info_table.items())}}


@dataclass(slots=True)
class EpochEntry(Body):
    """One epoch of a replica's log: it starts at ``start_offset``; ``end_offset`` is the next entry's start
    (LONG_MAX for the last, open one)."""

    epoch: int = 0
    start_offset: int = 0
    end_offset: int = LONG_MAX

    @classmethod
    def from_json(cls, obj: Any) -> "EpochEntry":
        d = as_object(obj)
        return cls(as_int(d.get("epoch")), as_int(d.get("startOffset")), as_int(d.get("endOffset"), LONG_MAX))

    def to_json(self) -> dict:
        return {"endOffset": self.end_offset, "epoch": self.epoch, "startOffset": self.start_offset}


@dataclass(slots=True)
class EpochEntryCache(Body):
    """GET_BROKER_EPOCH_CACHE (1007)'s answer."""

    cluster_name: str = ""
    broker_name: str = ""
    broker_id: int = 0
    epoch_list: list[EpochEntry] = field(default_factory=list)
    max_offset: int = 0

    @classmethod
    def from_json(cls, obj: Any) -> "EpochEntryCache":
        d = as_object(obj)
        return cls(as_str(d.get("clusterName")) or "", as_str(d.get("brokerName")) or "", as_int(d.get("brokerId")),
                   [EpochEntry.from_json(e) for e in as_list(d.get("epochList")) if isinstance(e, dict)],
                   as_int(d.get("maxOffset")))

    def to_json(self) -> dict:
        return {"brokerId": self.broker_id, "brokerName": self.broker_name, "clusterName": self.cluster_name,
                "epochList": [e.to_json() for e in self.epoch_list], "maxOffset": self.max_offset}
