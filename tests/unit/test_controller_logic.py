"""The controller's sans-I/O core (broker/controller/state.py, election.py, logic.py, liveness.py): every event,
every election rule of controller.md §5 and every ALTER_SYNC_STATE_SET check of §7 with its response code."""

from __future__ import annotations

import json

import pytest

from broker.controller import logic
from broker.controller.backend import LocalBackend
from broker.controller.liveness import LivenessTable
from broker.controller.state import (AlterSyncStateSet, ApplyBrokerId, CleanBrokerData, ElectMaster, GroupState,
                                     UpdateBrokerAddress, apply_event, group_from_json, group_to_json)
from protocol.codes import ResponseCode as RC
from protocol.controller import ElectMasterResponseBody, SyncStateSet

C, G = "DefaultCluster", "broker-a"


def group(n: int = 3) -> GroupState:
    state = None
    for i in range(1, n + 1):
        state = apply_event(state, ApplyBrokerId(C, G, i, f"10.0.0.{i}:10911", f"10.0.0.{i}:10911;{i}"))
    assert state is not None
    return state


def live(*ids: int, **info: tuple[int, int, int]) -> LivenessTable:
    """Alive ids; info: b<id>=(epoch, maxOffset, priority)."""
    table = LivenessTable()
    for i in ids:
        epoch, offset, prio = info.get(f"b{i}", (-1, -1, None))
        table.heartbeat(0.0, C, G, i, f"10.0.0.{i}:10911", None, epoch, offset, 0, 10_000, prio)
    return table


# ---- events (§2) -----------------------------------------------------------------------------------------------
def test_events_change_the_group_as_the_reference_does():
    s = group(3)
    assert s.next_assign_broker_id == 4 and s.master_broker_id is None and s.master_epoch == 0
    assert apply_event(s, ApplyBrokerId(C, G, 2, "x:1", "x:1;9")) == s  # an existing id is not replaced
    s = apply_event(s, ElectMaster(G, 1))
    assert (s.master_broker_id, s.master_epoch, s.sync_state_set, s.sync_state_set_epoch) == (1, 1, {1}, 1)
    s = apply_event(s, AlterSyncStateSet(G, frozenset({1, 2})))
    assert (s.sync_state_set, s.sync_state_set_epoch) == ({1, 2}, 2)
    s = apply_event(s, ElectMaster(G, None))  # no master: epoch + 1, set kept
    assert (s.master_broker_id, s.master_epoch, s.sync_state_set, s.sync_state_set_epoch) == (None, 2, {1, 2}, 2)
    s = apply_event(s, UpdateBrokerAddress(G, 2, "10.9.9.9:10911"))
    assert s.address_of(2) == "10.9.9.9:10911" and s.brokers[2].register_check_code == "10.0.0.2:10911;2"
    s = apply_event(s, ElectMaster(G, 2))
    s = apply_event(s, CleanBrokerData(G, frozenset({2})))
    assert 2 not in s.brokers and s.master_broker_id is None and 2 not in s.sync_state_set
    assert apply_event(s, CleanBrokerData(G, frozenset({1, 3}))) is None  # empty group is dropped
    assert apply_event(s, CleanBrokerData(G, None)) is None
    assert apply_event(None, ElectMaster(G, 1)) is None


def test_an_id_applied_out_of_order_is_never_offered_again():
    s = apply_event(None, ApplyBrokerId(C, G, 1, "a:1", "a:1;1"))
    s = apply_event(s, ApplyBrokerId(C, G, 5, "b:1", "b:1;1"))
    assert s.next_assign_broker_id == 6


def test_group_json_round_trip_and_corrupt_documents_are_refused():
    s = apply_event(apply_event(group(2), ElectMaster(G, 2)), AlterSyncStateSet(G, frozenset({1, 2})))
    assert group_from_json(json.dumps(group_to_json(s))) == s
    with pytest.raises(ValueError):
        group_from_json(b'{"brokerName": "x"}')
    with pytest.raises(ValueError):
        group_from_json(b"[1]")


# ---- broker ids (§3) -------------------------------------------------------------------------------------------
def test_next_and_apply_broker_id():
    assert logic.get_next_broker_id(None, C, G).header.next_broker_id == 1
    assert logic.get_next_broker_id(group(2), C, G).header.next_broker_id == 3
    ok = logic.apply_broker_id(None, C, G, 1, "a:1;5")
    assert ok.code == RC.SUCCESS and ok.event == ApplyBrokerId(C, G, 1, "a:1", "a:1;5")
    assert logic.apply_broker_id(None, C, G, 2, "a:1;5").code == RC.CONTROLLER_BROKER_ID_INVALID
    assert logic.apply_broker_id(group(2), C, G, 0, "a:1;5").code == RC.CONTROLLER_BROKER_ID_INVALID
    s = group(2)
    assert logic.apply_broker_id(s, C, G, 3, "c:1;1").event is not None  # a free id
    retry = logic.apply_broker_id(s, C, G, 2, "10.0.0.2:10911;2")  # same check code: a retry
    assert retry.code == RC.SUCCESS and retry.event is None
    assert logic.apply_broker_id(s, C, G, 2, "10.0.0.2:10911;999").code == RC.CONTROLLER_BROKER_ID_INVALID


def test_register_broker():
    assert logic.register_broker(None, C, G, 1, "a", live()).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    s = group(2)
    assert logic.register_broker(s, C, G, 7, "a", live()).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    s = apply_event(s, ElectMaster(G, 1))
    dead = logic.register_broker(s, C, G, 2, "10.0.0.2:10911", live())
    assert dead.header.master_broker_id is None and dead.event is None  # master not alive: not named
    assert SyncStateSet.decode(dead.body) == SyncStateSet({1}, 1)
    alive = logic.register_broker(s, C, G, 2, "10.0.0.2:10999", live(1))
    assert (alive.header.master_broker_id, alive.header.master_address, alive.header.master_epoch) == \
        (1, "10.0.0.1:10911", 1)
    assert alive.event == UpdateBrokerAddress(G, 2, "10.0.0.2:10999")


# ---- elections (§5) --------------------------------------------------------------------------------------------
def test_unknown_group_2010():
    assert logic.elect_master(None, G, 1, False, live(), False).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_first_election_takes_the_requester_without_checks():
    d = logic.elect_master(group(3), G, 3, False, live(), False)  # nobody alive, empty set: still elected
    assert d.code == RC.SUCCESS and d.event == ElectMaster(G, 3) and d.new_master
    assert (d.header.master_broker_id, d.header.master_epoch, d.header.sync_state_set_epoch) == (3, 1, 1)
    body = ElectMasterResponseBody.decode(d.body)
    assert body.sync_state_set == {3} and body.broker_member_group.broker_addrs == {
        1: "10.0.0.1:10911", 2: "10.0.0.2:10911", 3: "10.0.0.3:10911"}
    assert logic.elect_master(group(3), G, 9, False, live(9), False).code == RC.CONTROLLER_ELECT_MASTER_FAILED


def _with_set(ids: set[int], master: int = 1) -> GroupState:
    s = apply_event(group(4), ElectMaster(G, master))
    return apply_event(s, AlterSyncStateSet(G, frozenset(ids)))


def test_alive_old_master_is_kept_2011():
    s = _with_set({1, 2})
    d = logic.elect_master(s, G, 2, False, live(1, 2), False)
    assert d.code == RC.CONTROLLER_MASTER_STILL_EXIST and d.event is None
    assert (d.header.master_broker_id, d.header.master_epoch, d.header.sync_state_set_epoch) == (1, 1, 2)
    assert json.loads(d.body) == {"syncStateSet": [1, 2]}
    assert logic.elect_master(s, G, -1, False, live(1, 2), False).code == RC.CONTROLLER_MASTER_STILL_EXIST


def test_ordering_epoch_then_offset_then_priority():
    s = _with_set({1, 2, 3, 4})
    # master 1 dead; 2 has the highest epoch though a lower offset
    d = logic.elect_master(s, G, -1, False, live(2, 3, 4, b2=(5, 10, 9), b3=(4, 999, 1), b4=(4, 999, 0)), False)
    assert d.header.master_broker_id == 2
    # same epoch: highest offset
    d = logic.elect_master(s, G, -1, False, live(2, 3, 4, b2=(4, 10, 0), b3=(4, 50, 9), b4=(4, 20, 0)), False)
    assert d.header.master_broker_id == 3
    # same epoch and offset: lowest priority value wins
    d = logic.elect_master(s, G, -1, False, live(2, 3, 4, b2=(4, 50, 7), b3=(4, 50, 3), b4=(4, 50, 5)), False)
    assert d.header.master_broker_id == 3
    assert (d.header.master_epoch, d.header.sync_state_set_epoch) == (2, 3) and d.new_master
    assert ElectMasterResponseBody.decode(d.body).sync_state_set == {3}


def test_never_outside_the_sync_state_set_unless_unclean():
    s = _with_set({1, 2})
    far_ahead = live(3, 4, b3=(9, 10**9, 0))
    controller = logic.elect_master(s, G, -1, False, far_ahead, False)
    assert controller.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE and controller.event == ElectMaster(G, None)
    broker = logic.elect_master(s, G, 3, False, far_ahead, False)
    assert broker.code == RC.CONTROLLER_ELECT_MASTER_FAILED and broker.event is None
    unclean = logic.elect_master(s, G, -1, False, far_ahead, True)
    assert unclean.code == RC.SUCCESS and unclean.header.master_broker_id == 3
    # unclean only when no set member is alive
    assert logic.elect_master(s, G, -1, False, live(2, 3, b3=(9, 10**9, 0)), True).header.master_broker_id == 2


def test_designated_election():
    s = _with_set({1, 2, 3})
    d = logic.elect_master(s, G, 3, True, live(1, 2, 3), False)  # the admin moves the master
    assert d.code == RC.SUCCESS and d.header.master_broker_id == 3
    assert logic.elect_master(s, G, 1, True, live(1, 2, 3), False).code == RC.CONTROLLER_MASTER_STILL_EXIST
    assert logic.elect_master(s, G, 4, True, live(1, 2, 3, 4), False).code == RC.CONTROLLER_ELECT_MASTER_FAILED
    assert logic.elect_master(s, G, 3, True, live(1, 2), False).code == RC.CONTROLLER_ELECT_MASTER_FAILED


def test_no_master_group_is_elected_by_a_member_asking_for_itself():
    s = apply_event(_with_set({1, 2}), ElectMaster(G, None))
    d = logic.elect_master(s, G, 2, False, live(2), False)
    assert d.code == RC.SUCCESS and d.header.master_broker_id == 2 and d.header.master_epoch == 3


# ---- ALTER_SYNC_STATE_SET (§7) -----------------------------------------------------------------------------------
@pytest.mark.parametrize("state,master,epoch,proposal,alive,code", [
    (None, 1, 1, ({1, 2}, 1), (1, 2), RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),
    ("s", 1, 1, ({1}, 1), (1, 2), RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),  # same set
    ("s", 2, 1, ({1, 2}, 1), (1, 2), RC.CONTROLLER_INVALID_MASTER),
    ("s", 1, 0, ({1, 2}, 1), (1, 2), RC.CONTROLLER_FENCED_MASTER_EPOCH),
    ("s", 1, 1, ({1, 2}, 0), (1, 2), RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
    ("s", 1, 1, ({1, 9}, 1), (1, 9), RC.CONTROLLER_INVALID_REPLICAS),
    ("s", 1, 1, ({1, 2}, 1), (1,), RC.CONTROLLER_BROKER_NOT_ALIVE),
    ("s", 1, 1, ({2, 3}, 1), (1, 2, 3), RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),  # master left out
    ("s", 1, 1, ({1, 2, 3}, 1), (1, 2, 3), RC.SUCCESS),
])
def test_alter_sync_state_set_checks(state, master, epoch, proposal, alive, code):
    s = apply_event(group(3), ElectMaster(G, 1)) if state else None
    d = logic.alter_sync_state_set(s, G, master, epoch, SyncStateSet(*proposal), live(*alive))
    assert d.code == code, d.remark
    if code == RC.SUCCESS:
        assert d.header.new_sync_state_set_epoch == 2
        assert SyncStateSet.decode(d.body) == SyncStateSet({1, 2, 3}, 2)
        assert d.event == AlterSyncStateSet(G, frozenset({1, 2, 3}))
    else:
        assert d.event is None


def test_alter_with_no_master_is_invalid_master():
    s = apply_event(apply_event(group(2), ElectMaster(G, 1)), ElectMaster(G, None))
    assert logic.alter_sync_state_set(s, G, 1, 2, SyncStateSet({1, 2}, 1), live(1, 2)).code == \
        RC.CONTROLLER_INVALID_MASTER


# ---- reads and cleaning ------------------------------------------------------------------------------------------
def test_replica_info_and_sync_state_data():
    assert logic.get_replica_info(None, G).code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST
    s = _with_set({1, 2})
    d = logic.get_replica_info(s, G)
    assert (d.header.master_broker_id, d.header.master_address, d.header.master_epoch) == (1, "10.0.0.1:10911", 1)
    data = json.loads(logic.get_sync_state_data({G: s}, [G, "other"], live(1, 3)).body)
    info = data["replicasInfoTable"][G]
    assert list(data["replicasInfoTable"]) == [G]
    assert [(r["brokerId"], r["alive"]) for r in info["inSyncReplicas"]] == [(1, True), (2, False)]
    assert [(r["brokerId"], r["alive"]) for r in info["notInSyncReplicas"]] == [(3, True), (4, False)]
    assert info["masterBrokerId"] == 1 and info["syncStateSetEpoch"] == 2


def test_clean_broker_data_rules():
    s = _with_set({1, 2})
    assert logic.clean_broker_data(s, C, G, None, False, live()).code == RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert logic.clean_broker_data(s, C, G, "2;3", False, live(3)).code == \
        RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA  # 3 is alive
    assert logic.clean_broker_data(s, C, G, "2;x", False, live()).code == RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert logic.clean_broker_data(None, C, G, "1", False, live()).code == RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    ok = logic.clean_broker_data(s, C, G, "2;3", False, live(1))
    assert ok.code == RC.SUCCESS and ok.event == CleanBrokerData(G, frozenset({2, 3}))
    living = logic.clean_broker_data(s, C, G, "3", True, live(3))  # isCleanLivingBroker: only the given id
    assert living.event == CleanBrokerData(G, frozenset({3}))
    assert logic.clean_broker_data(s, C, G, None, True, live(1)).event == CleanBrokerData(G, None)


# ---- liveness --------------------------------------------------------------------------------------------------
def test_liveness_keeps_the_newest_epoch_offset_and_expires():
    t = LivenessTable()
    t.heartbeat(0.0, C, G, 1, "a", "ch", 3, 100, 0, 2000, None)
    t.heartbeat(0.5, C, G, 1, "a", "ch", 2, 900, 0, 2000, None)  # older epoch: ignored
    assert (t.live_info(C, G, 1).epoch, t.live_info(C, G, 1).max_offset) == (3, 100)
    t.heartbeat(1.0, C, G, 1, "a", "ch", 3, 150, 0, 2000, 5)
    assert (t.live_info(C, G, 1).max_offset, t.live_info(C, G, 1).election_priority) == (150, 5)
    t.heartbeat(1.0, C, G, 2, "b", "other", -1, 0, 0, None, None)  # no timeout: the 10 s default
    assert t.expire(2.9) == [] and [e.broker_id for e in t.expire(3.1)] == [1]
    assert [e.broker_id for e in t.drop_channel("other")] == [2] and len(t) == 0


# ---- the local store -----------------------------------------------------------------------------------------------
async def test_local_backend_persists_atomically_and_refuses_a_corrupt_file(tmp_path):
    b = LocalBackend("127.0.0.1:9878", str(tmp_path / "s"))
    await b.start()
    s = group(2)
    await b.commit(G, None, s)
    again = LocalBackend("127.0.0.1:9878", str(tmp_path / "s"))
    await again.start()
    assert again.groups == {G: s}
    await again.commit(G, again.groups[G], None)
    assert again.groups == {}
    (tmp_path / "s" / "controller_state.json").write_text("{not json")
    broken = LocalBackend("127.0.0.1:9878", str(tmp_path / "s"))
    from broker.controller.backend import BackendError
    with pytest.raises(BackendError, match="corrupt"):
        await broken.start()


# ---- configuration -----------------------------------------------------------------------------------------------
def test_controller_config_keys_and_errors(tmp_path):
    from broker.controller.config import ControllerConfig, parse_endpoints
    from broker.errors import ConfigError

    cfg = ControllerConfig.from_properties({"controllerType": "ETCD", "controllerEtcdEndpoints":
                                            "127.0.0.1:2379, http://10.0.0.2:2379,[::1]:2379",
                                            "controllerStorePath": str(tmp_path / "x"),
                                            "enableElectUncleanMaster": "true", "scanNotActiveBrokerInterval": "100"})
    assert cfg.controller_type == "etcd" and cfg.enable_elect_unclean_master
    assert cfg.scan_not_active_broker_interval == 100
    assert cfg.etcd_endpoints == [("127.0.0.1", 2379), ("10.0.0.2", 2379), ("::1", 2379)]
    assert ControllerConfig.from_properties({}).controller_store_path.endswith("localController")
    for values, key in (({"controllerType": "raft"}, "controllerType"),
                        ({"controllerType": "etcd"}, "controllerEtcdEndpoints"),
                        ({"controllerType": "etcd", "controllerEtcdEndpoints": "host"}, "controllerEtcdEndpoints"),
                        ({"controllerType": "etcd", "controllerEtcdEndpoints": "h:99999"}, "controllerEtcdEndpoints"),
                        ({"electMasterMaxRetryCount": "0"}, "electMasterMaxRetryCount"),
                        ({"scanInactiveMasterInterval": "x"}, "scanInactiveMasterInterval"),
                        ({"notifyBrokerRoleChanged": "yes"}, "notifyBrokerRoleChanged")):
        with pytest.raises(ConfigError) as err:
            ControllerConfig.from_properties(values)
        assert err.value.key == key
    with pytest.raises(ValueError):
        parse_endpoints("a:1,b")
