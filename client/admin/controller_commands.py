"""mqadmin's controller-mode commands (controller.md §13): getControllerMetaData, getSyncStateSet, electMaster,
cleanBrokerMetadata. ``-a`` names a controller (``host:port``, or several separated by ``;``): the tool asks it who
leads (1005) and sends state requests to the leader. Output lines are the reference's; ``--json`` prints one object.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any, Callable

from client.admin import AdminClient, AdminError, NotFoundError, UnreachableError
from client.admin.format import dump_json
from protocol.codes import RequestCode
from protocol.controller import BrokerReplicasInfo, ElectMasterResponseBody, GetMetaDataResponseHeader
from protocol.jsonlenient import dumps_compact

__all__ = ["add_parsers", "get_controller_metadata", "get_sync_state_set", "elect_master", "clean_broker_metadata"]


def _controllers(args: argparse.Namespace) -> list[str]:
    addrs = [a.strip() for a in (args.controller or "").replace(",", ";").split(";") if a.strip()]
    if not addrs:
        raise AdminError("give a controller address with -a host:port")
    return addrs


async def _metadata(admin: AdminClient, args: argparse.Namespace) -> tuple[str, GetMetaDataResponseHeader]:
    """The first controller of -a that answers 1005, and its answer."""
    last: AdminError | None = None
    for addr in _controllers(args):
        try:
            resp = admin.check(await admin.invoke(addr, RequestCode.CONTROLLER_GET_METADATA_INFO, role="controller"),
                               f"get controller metadata from {addr}")
            return addr, GetMetaDataResponseHeader.decode(resp.ext_fields)
        except UnreachableError as exc:
            last = exc
    assert last is not None
    raise last


async def _leader(admin: AdminClient, args: argparse.Namespace) -> str:
    addr, meta = await _metadata(admin, args)
    if meta.is_leader:
        return addr
    if not meta.controller_leader_address:
        raise NotFoundError(f"controller {addr} knows no active controller (is a controller group electing?)")
    return meta.controller_leader_address


# ---- getControllerMetaData -------------------------------------------------------------------------------------
async def get_controller_metadata(admin: AdminClient, args: argparse.Namespace) -> int:
    _, meta = await _metadata(admin, args)
    peers = [p for p in (meta.peers or "").split(";") if p]
    if args.json:
        dump_json({"group": meta.group, "controllerLeaderId": meta.controller_leader_id,
                   "controllerLeaderAddress": meta.controller_leader_address, "isLeader": meta.is_leader,
                   "peers": peers})
        return 0
    print(f"#ControllerGroup\t{meta.group}")
    print(f"#ControllerLeaderId\t{meta.controller_leader_id}")
    print(f"#ControllerLeaderAddress\t{meta.controller_leader_address}")
    for peer in peers:
        print(f"#Peer:\t{peer}")
    return 0


# ---- getSyncStateSet -------------------------------------------------------------------------------------------
def _replica_line(r: Any) -> str:
    return (f"ReplicaIdentity{{brokerName={r.broker_name}, brokerId={r.broker_id}, brokerAddress={r.broker_address}, "
            f"alive={str(r.alive).lower()}}}")


async def _broker_names(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    if args.broker_name:
        return [args.broker_name]
    info = await admin.cluster_info()
    names = sorted(info.cluster_addr_table.get(args.cluster) or ())
    if not names:
        raise NotFoundError(f"cluster {args.cluster} has no broker registered with the name server")
    return names


async def get_sync_state_set(admin: AdminClient, args: argparse.Namespace) -> int:
    while True:
        names = await _broker_names(admin, args)
        leader = await _leader(admin, args)
        resp = admin.check(await admin.invoke(leader, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                                              body=dumps_compact(names), role="controller"),
                           "get SyncStateSet data")
        table = BrokerReplicasInfo.decode(resp.body).replicas_info_table if resp.body else {}
        if args.json:
            dump_json({name: info.to_json() for name, info in sorted(table.items())})
        else:
            for name, info in sorted(table.items()):
                print(f"#brokerName\t{name}")
                print(f"#MasterBrokerId\t{info.master_broker_id}")
                print(f"#MasterAddr\t{info.master_address}")
                print(f"#MasterEpoch\t{info.master_epoch}")
                print(f"#SyncStateSetEpoch\t{info.sync_state_set_epoch}")
                print(f"#SyncStateSetNums\t{len(info.in_sync_replicas)}")
                for r in info.in_sync_replicas:
                    print(f"InSyncReplica:\t{_replica_line(r)}")
                for r in info.not_in_sync_replicas:
                    print(f"NotInSyncReplica:\t{_replica_line(r)}")
                print()
        if not args.interval:
            return 0
        await asyncio.sleep(args.interval)


# ---- electMaster -----------------------------------------------------------------------------------------------
async def elect_master(admin: AdminClient, args: argparse.Namespace) -> int:
    leader = await _leader(admin, args)
    resp = admin.check(await admin.invoke(leader, RequestCode.CONTROLLER_ELECT_MASTER, {
        "clusterName": args.cluster, "brokerName": args.broker_name, "brokerId": args.broker_id,
        "designateElect": True}, role="controller"), f"elect broker {args.broker_id} master of {args.broker_name}")
    ext = resp.ext_fields or {}
    body = ElectMasterResponseBody.decode(resp.body) if resp.body else ElectMasterResponseBody()
    addrs = body.broker_member_group.broker_addrs
    if args.json:
        dump_json({"clusterName": args.cluster, "brokerName": args.broker_name,
                   "masterBrokerId": int(ext["masterBrokerId"]) if ext.get("masterBrokerId") else None,
                   "brokerMasterAddr": ext.get("masterAddress"), "masterEpoch": int(ext.get("masterEpoch", 0)),
                   "syncStateSetEpoch": int(ext.get("syncStateSetEpoch", 0)),
                   "syncStateSet": sorted(body.sync_state_set),
                   "brokers": {str(k): v for k, v in sorted(addrs.items())}})
        return 0
    print(f"#ClusterName\t{args.cluster}")
    print(f"#BrokerName\t{args.broker_name}")
    print(f"#BrokerMasterAddr\t{ext.get('masterAddress')}")
    print(f"#MasterEpoch\t{ext.get('masterEpoch')}")
    print(f"#SyncStateSetEpoch\t{ext.get('syncStateSetEpoch')}")
    for broker_id, addr in sorted(addrs.items()):
        print(f"\t#Broker\t{broker_id}\t{addr}")
    return 0


# ---- cleanBrokerMetadata ---------------------------------------------------------------------------------------
async def clean_broker_metadata(admin: AdminClient, args: argparse.Namespace) -> int:
    if not args.clean_living and not args.cluster:
        raise AdminError("give the cluster with -c (required unless -l cleans living brokers)")
    leader = await _leader(admin, args)
    admin.check(await admin.invoke(leader, RequestCode.CLEAN_BROKER_DATA, {
        "clusterName": args.cluster, "brokerName": args.broker_name,
        "brokerControllerIdsToClean": args.broker_ids, "isCleanLivingBroker": bool(args.clean_living)},
        role="controller"), f"clean broker {args.broker_name} metadata")
    if args.json:
        dump_json({"brokerName": args.broker_name, "brokerControllerIdsToClean": args.broker_ids, "cleaned": True})
        return 0
    print(f"clear broker {args.broker_name} metadata from controller success! ")
    return 0


# ---- parsers ---------------------------------------------------------------------------------------------------
def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text}")
    return value


def add_parsers(add: Callable[[str, Callable, str], argparse.ArgumentParser]) -> None:
    """Register the commands with mqadmin's sub-command factory (cli.build_parser's ``add``)."""
    p = add("getControllerMetaData", get_controller_metadata, "Show the controller group, its active controller "
            "and peers (controller mode)")
    p.add_argument("-a", "--controllerAddress", dest="controller", required=True, help="controller host:port")

    p = add("getSyncStateSet", get_sync_state_set, "Show each broker group's master, epochs and SyncStateSet "
            "from the controller")
    p.add_argument("-a", "--controllerAddress", dest="controller", required=True, help="controller host:port")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("-b", "--brokerName", dest="broker_name", help="one broker group")
    which.add_argument("-c", "--clusterName", dest="cluster", help="every group of this cluster (via -n)")
    p.add_argument("-i", "--interval", type=_non_negative, default=0, help="repeat every so many seconds")

    p = add("electMaster", elect_master, "Make an in-sync replica the master of its group (controller mode)")
    p.add_argument("-a", "--controllerAddress", dest="controller", required=True, help="controller host:port")
    p.add_argument("-c", "--clusterName", dest="cluster", required=True)
    p.add_argument("-bn", "--brokerName", dest="broker_name", required=True)
    p.add_argument("-b", "--brokerId", dest="broker_id", type=int, required=True, help="controller broker id")

    p = add("cleanBrokerMetadata", clean_broker_metadata, "Remove brokers (or a whole group) from the controller")
    p.add_argument("-a", "--controllerAddress", dest="controller", required=True, help="controller host:port")
    p.add_argument("-bn", "--brokerName", dest="broker_name", required=True)
    p.add_argument("-b", "--brokerControllerIdsToClean", dest="broker_ids", help="ids to remove, e.g. 1;2")
    p.add_argument("-c", "--clusterName", dest="cluster", help="required unless -l")
    p.add_argument("-l", "--cleanLivingBroker", dest="clean_living", action="store_true",
                   help="also remove brokers that are alive")
