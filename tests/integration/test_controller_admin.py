"""mqadmin's controller commands (subprocesses) against the real ``mqcontroller`` with clients playing brokers:
getControllerMetaData, getSyncStateSet (-b, and -c through a name server), electMaster, cleanBrokerMetadata, with
the reference's lines and --json; and ACL: with aclEnable a controller answers only an admin's signed request."""

from __future__ import annotations

import asyncio
import json

import pytest

from protocol.codes import RequestCode, ResponseCode
from tests.support.admin import mqadmin_in_thread as mqadmin
from tests.support.controller import ControllerProcess, FakeBroker
from tests.support.wire import WireClient

CLUSTER = "DefaultCluster"
GROUP = "broker-a"


async def _beat(brokers: list[FakeBroker]) -> None:
    while True:
        for b in brokers:
            await b.heartbeat(3000)
        await asyncio.sleep(0.5)


@pytest.fixture
def controller(tmp_path):
    proc = ControllerProcess(tmp_path).start()
    yield proc
    proc.kill()


async def test_mqadmin_controller_commands(controller):
    brokers = []
    for i in range(3):
        b = await FakeBroker.connect(controller.addr, CLUSTER, GROUP, f"127.0.0.1:{23911 + 10 * i}")
        await b.obtain_id()
        brokers.append(b)
    beat = asyncio.create_task(_beat(brokers))
    try:
        await asyncio.sleep(0.5)
        a, b, c = brokers
        assert (await a.elect_self()).code == 0
        assert (await a.alter({1, 2}, 1, 1)).code == 0

        meta = await mqadmin("getControllerMetaData", "-a", controller.addr)
        assert meta.returncode == 0, meta.stderr
        lines = meta.stdout.splitlines()
        assert lines[0] == "#ControllerGroup\tlocal"
        assert lines[2] == f"#ControllerLeaderAddress\t{controller.addr}"
        assert lines[3] == f"#Peer:\t{controller.addr.replace(':', '-')}:{controller.addr}"
        meta_json = json.loads((await mqadmin("getControllerMetaData", "-a", controller.addr, "--json")).stdout)
        assert meta_json["isLeader"] is True and meta_json["controllerLeaderAddress"] == controller.addr

        sss = await mqadmin("getSyncStateSet", "-a", controller.addr, "-b", GROUP)
        assert sss.returncode == 0, sss.stderr
        out = sss.stdout.splitlines()
        assert out[:6] == [f"#brokerName\t{GROUP}", "#MasterBrokerId\t1", f"#MasterAddr\t{a.address}",
                           "#MasterEpoch\t1", "#SyncStateSetEpoch\t2", "#SyncStateSetNums\t2"]
        assert out[6] == (f"InSyncReplica:\tReplicaIdentity{{brokerName={GROUP}, brokerId=1, "
                          f"brokerAddress={a.address}, alive=true}}")
        assert out[8].startswith("NotInSyncReplica:\tReplicaIdentity{brokerName=broker-a, brokerId=3")
        as_json = json.loads((await mqadmin("getSyncStateSet", "-a", controller.addr, "-b", GROUP, "--json")).stdout)
        assert as_json[GROUP]["masterBrokerId"] == 1 and len(as_json[GROUP]["inSyncReplicas"]) == 2

        # electMaster: the in-sync replica 2 becomes master; 3 is not in the set (exit 1, nothing changes)
        refused = await mqadmin("electMaster", "-a", controller.addr, "-c", CLUSTER, "-bn", GROUP, "-b", "3")
        assert refused.returncode == 1 and "CONTROLLER_ELECT_MASTER_FAILED" in refused.stderr, refused
        moved = await mqadmin("electMaster", "-a", controller.addr, "-c", CLUSTER, "-bn", GROUP, "-b", "2")
        assert moved.returncode == 0, moved.stderr
        assert moved.stdout.splitlines()[:5] == [f"#ClusterName\t{CLUSTER}", f"#BrokerName\t{GROUP}",
                                                 f"#BrokerMasterAddr\t{b.address}", "#MasterEpoch\t2",
                                                 "#SyncStateSetEpoch\t3"]
        assert f"\t#Broker\t3\t{c.address}" in moved.stdout.splitlines()
        again = await mqadmin("electMaster", "-a", controller.addr, "-c", CLUSTER, "-bn", GROUP, "-b", "2",
                              "--json")
        assert again.returncode == 1 and json.loads(again.stdout)["code"] == ResponseCode.CONTROLLER_MASTER_STILL_EXIST

        # cleanBrokerMetadata: an alive id is refused; -l cleans it anyway
        alive = await mqadmin("cleanBrokerMetadata", "-a", controller.addr, "-bn", GROUP, "-b", "3", "-c", CLUSTER)
        assert alive.returncode == 1 and "still alive" in alive.stderr
        beat.cancel()
        await c.close()
        cleaned = await mqadmin("cleanBrokerMetadata", "-a", controller.addr, "-bn", GROUP, "-b", "3", "-l")
        assert cleaned.returncode == 0, cleaned.stderr
        assert cleaned.stdout.strip() == f"clear broker {GROUP} metadata from controller success!"
        after = json.loads((await mqadmin("getSyncStateSet", "-a", controller.addr, "-b", GROUP, "--json")).stdout)
        ids = [r["brokerId"] for r in after[GROUP]["inSyncReplicas"] + after[GROUP]["notInSyncReplicas"]]
        assert ids == [2, 1] or sorted(ids) == [1, 2]
        # an unreachable controller: exit 3
        dead = await mqadmin("getControllerMetaData", "-a", "127.0.0.1:1")
        assert dead.returncode == 3
    finally:
        beat.cancel()
        for x in brokers:
            await x.close()


ADMIN = ("RocketMQ", "12345678")
USER = ("rocketmq2", "12345678")


def _write_acl(path) -> None:
    path.write_text(f"""accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    admin: false
    defaultTopicPerm: PUB|SUB
""")


async def test_acl_controller_answers_only_admin_signatures(tmp_path):
    proc = ControllerProcess(tmp_path, extra={"aclEnable": "true"})
    _write_acl(proc.workdir / "plain_acl.yml")
    proc.start()
    try:
        async with await WireClient.connect(proc.addr) as w:  # unsigned: refused
            r = await w.request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CLUSTER,
                                                                           "brokerName": GROUP})
            assert r.code != 0 and "nextBrokerId" not in (r.ext_fields or {})
        user = await mqadmin("getControllerMetaData", "-a", proc.addr, "--access-key", USER[0], "--secret-key",
                             USER[1])
        assert user.returncode != 0 and "admin" in user.stderr.lower(), user
        admin = await mqadmin("getControllerMetaData", "-a", proc.addr, "--access-key", ADMIN[0], "--secret-key",
                              ADMIN[1])
        assert admin.returncode == 0 and "#ControllerLeaderAddress" in admin.stdout, admin.stderr
    finally:
        proc.kill()
