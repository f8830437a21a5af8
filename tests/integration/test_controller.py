"""The real ``mqcontroller`` (controllerType=local) driven over TCP by clients playing brokers (controller.md §3-§7):
broker ids, registration, heartbeats, elections after a master stops heartbeating or its connection dies,
NOTIFY_BROKER_ROLE_CHANGED on the other broker's connection, SyncStateSet changes, restart persistence, start-up
config errors, and the embedded controller of a name server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.controller import BrokerReplicasInfo, ElectMasterResponseBody, SyncStateSet
from tests.support.broker_process import PROJECT_ROOT, NamesrvProcess, free_port
from tests.support.controller import ControllerProcess, FakeBroker
from tests.support.wire import WireClient

CLUSTER = "DefaultCluster"
GROUP = "broker-a"
HB_TIMEOUT_MS = 3000  # the fake brokers' heartbeatTimeoutMills (also the new controller's grace period)


async def _heartbeat_forever(broker: FakeBroker, stop: asyncio.Event, interval: float = 0.5) -> None:
    while not stop.is_set():
        await broker.heartbeat(HB_TIMEOUT_MS)
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except asyncio.TimeoutError:
            pass


async def _notify(broker: FakeBroker, timeout: float) -> dict:
    """The next NOTIFY_BROKER_ROLE_CHANGED that arrives on this broker's connection (header + body)."""
    deadline = time.monotonic() + timeout
    while True:
        cmd = await asyncio.wait_for(broker.client.server_requests.get(), max(0.01, deadline - time.monotonic()))
        if cmd.code == RequestCode.NOTIFY_BROKER_ROLE_CHANGED:
            assert cmd.is_oneway
            return {"header": dict(cmd.ext_fields or {}), "body": SyncStateSet.decode(cmd.body)}


@pytest.fixture
def controller(tmp_path):
    proc = ControllerProcess(tmp_path, extra={"scanNotActiveBrokerInterval": 1000,
                                              "scanInactiveMasterInterval": 1000}).start()
    yield proc
    proc.kill()


async def _group(addr: str, n: int) -> list[FakeBroker]:
    brokers = []
    for i in range(n):
        b = await FakeBroker.connect(addr, CLUSTER, GROUP, f"127.0.0.1:{20911 + i * 10}")
        await b.obtain_id()
        brokers.append(b)
    return brokers


async def test_ids_register_first_election_and_failover_by_heartbeat_timeout(controller):
    a, b, c = await _group(controller.addr, 3)
    try:
        assert (a.broker_id, b.broker_id, c.broker_id) == (1, 2, 3)
        # unknown group / unknown id: 2010
        stranger = await FakeBroker.connect(controller.addr, CLUSTER, "broker-x", "127.0.0.1:1")
        stranger.broker_id = 1
        assert (await stranger.register()).code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        assert (await stranger.elect_self()).code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        assert (await stranger.replica_info()).code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST
        await stranger.close()
        # registration without a master: no master fields, body the (empty) set
        reg = await a.register()
        assert reg.code == 0 and "masterBrokerId" not in reg.ext_fields
        assert SyncStateSet.decode(reg.body).sync_state_set == set()
        stop = asyncio.Event()
        beats = {x.broker_id: asyncio.create_task(_heartbeat_forever(x, stop)) for x in (a, b, c)}
        await asyncio.sleep(0.3)
        # the first election takes the requester
        first = await a.elect_self()
        assert first.code == 0, first
        assert first.ext_fields["masterBrokerId"] == "1" and first.ext_fields["masterEpoch"] == "1"
        body = ElectMasterResponseBody.decode(first.body)
        assert body.sync_state_set == {1} and body.broker_member_group.broker_addrs[2] == b.address
        # everyone alive hears about it on its own connection
        for x in (a, b, c):
            note = await _notify(x, 3)
            assert note["header"]["masterBrokerId"] == "1" and note["header"]["masterEpoch"] == "1"
        # the master is alive: 2011 with the current state; b asking for itself does not depose it
        still = await b.elect_self()
        assert still.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
        assert still.ext_fields["masterBrokerId"] == "1" and still.ext_fields["masterEpoch"] == "1"
        # a register now names the live master
        reg = await b.register()
        assert reg.ext_fields["masterBrokerId"] == "1" and reg.ext_fields["masterAddress"] == a.address
        # grow the set to {1,2} (stale epochs are fenced first)
        assert (await a.alter({1, 2}, 0, 1)).code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
        assert (await a.alter({1, 2}, 1, 0)).code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
        assert (await b.alter({1, 2}, 1, 1)).code == ResponseCode.CONTROLLER_INVALID_MASTER
        grown = await a.alter({1, 2}, 1, 1)
        assert grown.code == 0 and grown.ext_fields["newSyncStateSetEpoch"] == "2"
        assert SyncStateSet.decode(grown.body) == SyncStateSet({1, 2}, 2)
        # c is ahead in offsets but not in the set: never chosen; b is
        c.max_offset = 10_000
        b.max_offset = 100
        # the master stops heartbeating (hung, connection open): elected within the heartbeat timeout + one scan
        t0 = time.monotonic()
        beats.pop(1).cancel()
        note = await _notify(b, HB_TIMEOUT_MS / 1000 + 1.0 + 3.0)
        elapsed = time.monotonic() - t0
        assert note["header"]["masterBrokerId"] == "2" and note["header"]["masterEpoch"] == "2", note
        assert note["body"] == SyncStateSet({2}, 3)
        assert elapsed < HB_TIMEOUT_MS / 1000 + 1.0 + 3.0
        note_c = await _notify(c, 2)
        assert note_c["header"]["masterBrokerId"] == "2"
        info = await c.replica_info()
        assert info.ext_fields["masterBrokerId"] == "2" and info.ext_fields["masterAddress"] == b.address
        # the new master's set is itself alone; the dead old master cannot re-enter (2006), an unknown id 2003
        assert (await b.alter({2, 1}, 2, 3)).code == ResponseCode.CONTROLLER_BROKER_NOT_ALIVE
        assert (await b.alter({2, 9}, 2, 3)).code == ResponseCode.CONTROLLER_INVALID_REPLICAS
        assert (await b.alter({3}, 2, 3)).code == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
        assert (await b.alter({2}, 2, 3)).code == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED  # same set
        # b's connection dies (kill -9): c is alive but outside the set -> "no master" (epoch 3), nobody notified;
        # c asking for itself is refused (2012) without unclean election
        beats.pop(2).cancel()
        await b.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            info = await c.replica_info()
            if info.ext_fields.get("masterEpoch") == "3":
                break
            await asyncio.sleep(0.2)
        assert info.ext_fields["masterEpoch"] == "3" and "masterBrokerId" not in info.ext_fields, info
        refused = await c.elect_self()
        assert refused.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
        assert (await c.replica_info()).ext_fields["masterEpoch"] == "3"  # a refusal changes nothing
        # an ELECT_MASTER without brokerId counts as controller-triggered: no candidate -> 2004, "no master" again
        anyone = await c.request(RequestCode.CONTROLLER_ELECT_MASTER, {"clusterName": CLUSTER, "brokerName": GROUP})
        assert anyone.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE, anyone
        assert (await c.replica_info()).ext_fields["masterEpoch"] == "4"
        stop.set()
        for task in beats.values():
            task.cancel()
    finally:
        for x in (a, b, c):
            await x.close()


async def test_apply_broker_id_rules_and_persistence_across_restart(controller, tmp_path):
    a = await FakeBroker.connect(controller.addr, CLUSTER, GROUP, "127.0.0.1:30911")
    names = {"clusterName": CLUSTER, "brokerName": GROUP}
    try:
        # unknown group: only id 1
        r = await a.request(RequestCode.CONTROLLER_APPLY_BROKER_ID, dict(names, appliedBrokerId=2,
                                                                       registerCheckCode="127.0.0.1:30911;1"))
        assert r.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
        r = await a.request(RequestCode.CONTROLLER_APPLY_BROKER_ID, dict(names, appliedBrokerId=1,
                                                                       registerCheckCode="127.0.0.1:30911;1"))
        assert r.code == 0 and r.ext_fields == {"clusterName": CLUSTER, "brokerName": GROUP}
        # a retry with the same check code is accepted; another broker's claim on id 1 is not
        r = await a.request(RequestCode.CONTROLLER_APPLY_BROKER_ID, dict(names, appliedBrokerId=1,
                                                                       registerCheckCode="127.0.0.1:30911;1"))
        assert r.code == 0
        r = await a.request(RequestCode.CONTROLLER_APPLY_BROKER_ID, dict(names, appliedBrokerId=1,
                                                                       registerCheckCode="127.0.0.1:40911;2"))
        assert r.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
        nxt = await a.request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, names)
        assert nxt.ext_fields["nextBrokerId"] == "2"
        a.broker_id = 1
        await a.heartbeat(HB_TIMEOUT_MS)
        assert (await a.elect_self()).code == 0
        # an address change at registration is stored
        a.address = "127.0.0.1:30999"
        assert (await a.register()).code == 0
    finally:
        await a.close()
    controller.stop()
    assert "Traceback" not in controller.log_text()
    controller.start()
    async with await WireClient.connect(controller.addr) as w:
        nxt = await w.request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, names)
        assert nxt.ext_fields["nextBrokerId"] == "2"
        info = await w.request(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP})
        assert info.ext_fields["masterBrokerId"] == "1" and info.ext_fields["masterEpoch"] == "1"
        assert info.ext_fields["masterAddress"] == "127.0.0.1:30999"
        data = await w.request(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, json.dumps([GROUP, "nope"]).encode())
        table = BrokerReplicasInfo.decode(data.body).replicas_info_table
        assert list(table) == [GROUP] and table[GROUP].in_sync_replicas[0].alive is False
        meta = await w.request(RequestCode.CONTROLLER_GET_METADATA_INFO, {})
        assert meta.ext_fields["controllerLeaderAddress"] == controller.addr and meta.ext_fields["isLeader"] == "true"
        # CLEAN_BROKER_DATA: a group with a master is refused without ids; with the (dead) id it goes
        clean = await w.request(RequestCode.CLEAN_BROKER_DATA, {"clusterName": CLUSTER, "brokerName": GROUP})
        assert clean.code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
        clean = await w.request(RequestCode.CLEAN_BROKER_DATA, {"clusterName": CLUSTER, "brokerName": GROUP,
                                                                "brokerControllerIdsToClean": "1"})
        assert clean.code == 0
        info = await w.request(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP})
        assert info.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST
    store = tmp_path / "controller" / "store"
    assert [p.name for p in store.iterdir()] == ["controller_state.json"]  # no temp file left


def test_bad_conf_fails_start_up_with_one_line_naming_the_key(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for line, key in (("controllerType=raft", "controllerType"), ("scanNotActiveBrokerInterval=soon",
                                                                   "scanNotActiveBrokerInterval"),
                      ("controllerType=etcd", "controllerEtcdEndpoints"),
                      ("enableElectUncleanMaster=maybe", "enableElectUncleanMaster")):
        conf = tmp_path / "bad.conf"
        conf.write_text(f"listenPort={free_port()}\n{line}\n")
        done = subprocess.run([sys.executable, "-m", "broker.controller", "-c", str(conf)], cwd=PROJECT_ROOT,
                              env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 2, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and key in lines[0] and "Traceback" not in done.stderr, done.stderr


async def test_name_server_with_enable_controller_in_namesrv_answers_controller_requests(tmp_path):
    namesrv = NamesrvProcess(workdir=tmp_path, conf={"enableControllerInNamesrv": "true",
                                                     "controllerStorePath": tmp_path / "cs"})
    try:
        addr = namesrv.addr
        async with await WireClient.connect(addr) as client:
            b = FakeBroker(client, CLUSTER, GROUP, "127.0.0.1:10911")
            assert await b.obtain_id() == 1
            await b.heartbeat()
            assert (await b.elect_self()).code == 0
            meta = await client.request(RequestCode.CONTROLLER_GET_METADATA_INFO, {})
            assert meta.ext_fields["controllerLeaderAddress"] == addr
            # still a name server
            assert (await client.request(RequestCode.GET_BROKER_CLUSTER_INFO, {})).code == 0
    finally:
        namesrv.stop()
    # without the key the name server does not answer controller codes
    namesrv = NamesrvProcess(namesrv.port, workdir=tmp_path, conf={})
    try:
        async with await WireClient.connect(namesrv.addr) as client:
            r = await client.request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CLUSTER,
                                                                                "brokerName": GROUP})
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    finally:
        namesrv.stop()


async def test_broker_embedded_name_server_hosts_a_controller(broker_factory, tmp_path):
    broker = broker_factory(extra={"enableControllerInNamesrv": "true",
                                   "controllerStorePath": tmp_path / "embedded-controller"})
    async with await WireClient.connect(broker.namesrv_addr) as client:
        b = FakeBroker(client, CLUSTER, GROUP, "127.0.0.1:10911")
        assert await b.obtain_id() == 1
        meta = await client.request(RequestCode.CONTROLLER_GET_METADATA_INFO, {})
        assert meta.ext_fields["controllerLeaderAddress"] == broker.namesrv_addr  # brokerIP1:namesrvListenPort
        await b.heartbeat()
        assert (await b.elect_self()).code == 0
        # mqadmin getSyncStateSet -c: the cluster's groups from the name server (-n), their state from -a
        from tests.support.admin import mqadmin_in_thread as mqadmin
        shown = await mqadmin("getSyncStateSet", "-a", broker.namesrv_addr, "-c", CLUSTER, "-n",
                              broker.namesrv_addr, "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)[GROUP]["masterBrokerId"] == 1
        unknown = await mqadmin("getSyncStateSet", "-a", broker.namesrv_addr, "-c", "NoSuchCluster", "-n",
                                broker.namesrv_addr)
        assert unknown.returncode == 4, unknown
    assert (tmp_path / "embedded-controller" / "controller_state.json").exists()
    # the broker port itself is not a controller
    async with await WireClient.connect(broker.addr) as client:
        r = await client.request(RequestCode.CONTROLLER_GET_METADATA_INFO, {})
        assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def test_broker_conf_controller_keys_are_checked(tmp_path):
    conf = tmp_path / "b.conf"
    conf.write_text(f"storePathRootDir={tmp_path / 's'}\nenableControllerInNamesrv=true\ncontrollerType=zk\n"
                    f"listenPort={free_port()}\nnamesrvListenPort={free_port()}\ndashboardPort=0\n")
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "broker", "-c", str(conf)], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert "controllerType" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_corrupt_store_stops_start_up_naming_the_key(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "controller_state.json").write_text("{half a docu")
    conf = tmp_path / "c.conf"
    conf.write_text(f"listenPort={free_port()}\ncontrollerStorePath={store}\n")
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "broker.controller", "-c", str(conf)], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "controllerStorePath" in done.stderr and "corrupt" in done.stderr, done
    assert "Traceback" not in done.stderr
    assert (store / "controller_state.json").read_text() == "{half a docu"  # left for the operator
