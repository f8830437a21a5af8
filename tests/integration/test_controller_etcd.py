"""controllerType=etcd: a real 3-member etcd on loopback and two ``mqcontroller`` processes (controller.md §15).

The active controller is killed (-9): the other takes over within the lease TTL, serves exactly the state that was
decided, and elects when a master's heartbeats stop. A frozen (SIGSTOP) leader that comes back after being
replaced cannot change anything: its commits are fenced and it answers 2007."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.controller import SyncStateSet
from tests.support.controller import ControllerProcess, FakeBroker
from tests.support.etcd import ETCD, EtcdCluster, needs_etcd
from tests.support.admin import mqadmin_in_thread as mqadmin
from tests.support.wire import WireClient

pytestmark = [needs_etcd, pytest.mark.slow]

CLUSTER = "DefaultCluster"
GROUP = "broker-a"
HB_TIMEOUT_MS = 3000


@pytest.fixture
def etcd_cluster(tmp_path):
    """3 etcd members on loopback, data under tmp_path, killed at teardown."""
    if ETCD is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):  # .ci/run installs etcd-server: missing = broken
            pytest.fail("the etcd binary is missing: .ci/run must install etcd-server", pytrace=False)
        pytest.skip("the etcd binary is missing (apt-get install etcd-server)")
    (tmp_path / "etcd").mkdir()
    cluster = EtcdCluster(tmp_path / "etcd").start()
    yield cluster
    cluster.stop()


async def _metadata(addr: str) -> dict:
    async with await WireClient.connect(addr) as w:
        return dict((await w.request(RequestCode.CONTROLLER_GET_METADATA_INFO, {})).ext_fields or {})


async def _wait_leader(addr: str, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if (await _metadata(addr)).get("isLeader") == "true":
                return time.monotonic() - t0
        except OSError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"{addr} did not become the active controller within {timeout} s")


class Member:
    """One fake broker with a connection to each controller (heartbeats go to all, as brokers do)."""

    def __init__(self, links: dict[str, FakeBroker]) -> None:
        self.links = links
        self.beating = True

    def on(self, addr: str) -> FakeBroker:
        return self.links[addr]

    async def beat_forever(self) -> None:
        while True:
            if self.beating:
                for link in self.links.values():
                    try:
                        await link.heartbeat(HB_TIMEOUT_MS)
                    except (ConnectionError, OSError):
                        pass
            await asyncio.sleep(0.5)


async def _member(addrs: list[str], address: str) -> Member:
    return Member({a: await FakeBroker.connect(a, CLUSTER, GROUP, address) for a in addrs})


def _controller(tmp_path, name: str, endpoints: str) -> ControllerProcess:
    return ControllerProcess(tmp_path, name, extra={"controllerType": "etcd", "controllerEtcdEndpoints": endpoints,
                                                    "scanNotActiveBrokerInterval": 1000,
                                                    "scanInactiveMasterInterval": 1000})


async def test_killing_the_active_controller_loses_no_decision(etcd_cluster, tmp_path):
    c1 = _controller(tmp_path, "c1", etcd_cluster.endpoints).start()
    c2 = None
    tasks: list[asyncio.Task] = []
    members: list[Member] = []
    try:
        await _wait_leader(c1.addr, 15)
        c2 = _controller(tmp_path, "c2", etcd_cluster.endpoints).start()
        await asyncio.sleep(1.0)
        meta2 = await _metadata(c2.addr)
        assert meta2["isLeader"] == "false" and meta2["controllerLeaderAddress"] == c1.addr
        assert c1.addr in meta2["peers"] and c2.addr in meta2["peers"]
        # leader-only requests on the standby: 2007 at once
        async with await WireClient.connect(c2.addr) as w:
            r = await w.request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CLUSTER,
                                                                           "brokerName": GROUP})
            assert r.code == ResponseCode.CONTROLLER_NOT_LEADER
        addrs = [c1.addr, c2.addr]
        members = [await _member(addrs, f"127.0.0.1:{21911 + i * 10}") for i in range(3)]
        a, b, c = members
        for m in members:
            assert await m.on(c1.addr).obtain_id() in (1, 2, 3)
            for link in m.links.values():
                link.broker_id = m.on(c1.addr).broker_id
        tasks = [asyncio.create_task(m.beat_forever()) for m in members]
        await asyncio.sleep(0.8)
        assert (await a.on(c1.addr).elect_self()).code == 0
        grown = await a.on(c1.addr).alter({1, 2}, 1, 1)
        assert grown.code == 0, grown
        decided = await a.on(c1.addr).replica_info()
        # kill -9 the active controller: c2 takes over within the lease TTL (+ a poll)
        t0 = time.monotonic()
        c1.kill()
        took = await _wait_leader(c2.addr, 10)
        assert took < 6, took
        served = await b.on(c2.addr).replica_info()
        assert served.code == 0
        assert served.ext_fields == decided.ext_fields
        assert SyncStateSet.decode(served.body) == SyncStateSet.decode(decided.body) == SyncStateSet({1, 2}, 2)
        nxt = await b.on(c2.addr).request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                                          {"clusterName": CLUSTER, "brokerName": GROUP})
        assert nxt.ext_fields["nextBrokerId"] == "4"
        # the master's heartbeats stop: the new controller (after one heartbeat timeout of grace) elects b, the
        # only other member of the SyncStateSet, and tells the alive members on their connections to it
        a.beating = False
        deadline = time.monotonic() + 15
        note = None
        while time.monotonic() < deadline:
            try:
                cmd = await asyncio.wait_for(b.on(c2.addr).client.server_requests.get(), 1)
            except asyncio.TimeoutError:
                continue
            if cmd.code == RequestCode.NOTIFY_BROKER_ROLE_CHANGED:
                note = cmd
                break
        assert note is not None, "no NOTIFY_BROKER_ROLE_CHANGED from the new controller"
        assert note.ext_fields["masterBrokerId"] == "2" and note.ext_fields["masterEpoch"] == "2"
        print(f"take-over {took:.2f} s, election {time.monotonic() - t0:.2f} s after the kill")
        # the old controller comes back as a standby and agrees
        c1.start()
        await asyncio.sleep(1.0)
        meta1 = await _metadata(c1.addr)
        assert meta1["isLeader"] == "false" and meta1["controllerLeaderAddress"] == c2.addr
        # mqadmin through the standby: it names the leader, and state requests follow it there
        shown = await mqadmin("getControllerMetaData", "-a", c1.addr)
        assert f"#ControllerLeaderAddress\t{c2.addr}" in shown.stdout.splitlines(), shown
        assert shown.stdout.count("#Peer:") == 2
        sss = json.loads((await mqadmin("getSyncStateSet", "-a", c1.addr, "-b", GROUP, "--json")).stdout)
        assert sss[GROUP]["masterBrokerId"] == 2 and sss[GROUP]["masterEpoch"] == 2
        moved = await mqadmin("electMaster", "-a", c1.addr, "-c", CLUSTER, "-bn", GROUP, "-b", "3")
        assert moved.returncode == 1 and "CONTROLLER_ELECT_MASTER_FAILED" in moved.stderr  # 3 is not in the set
    finally:
        for t in tasks:
            t.cancel()
        for m in members:
            for link in m.links.values():
                await link.close()
        c1.kill()
        if c2 is not None:
            c2.kill()


async def test_a_frozen_leader_is_fenced_after_another_takes_over(etcd_cluster, tmp_path):
    c1 = _controller(tmp_path, "c1", etcd_cluster.endpoints).start()
    c2 = None
    try:
        await _wait_leader(c1.addr, 15)
        c2 = _controller(tmp_path, "c2", etcd_cluster.endpoints).start()
        a1 = await FakeBroker.connect(c1.addr, CLUSTER, GROUP, "127.0.0.1:22911")
        assert await a1.obtain_id() == 1
        os.kill(c1.proc.pid, signal.SIGSTOP)
        try:
            await _wait_leader(c2.addr, 10)
            b2 = await FakeBroker.connect(c2.addr, CLUSTER, GROUP, "127.0.0.1:22921")
            assert await b2.obtain_id() == 2
        finally:
            os.kill(c1.proc.pid, signal.SIGCONT)
        # the old leader's first state change after waking up is fenced: 2007, nothing stored
        r = await a1.request(RequestCode.CONTROLLER_APPLY_BROKER_ID, {
            "clusterName": CLUSTER, "brokerName": GROUP, "appliedBrokerId": 3, "registerCheckCode": "x:1;1"})
        assert r.code == ResponseCode.CONTROLLER_NOT_LEADER, r
        nxt = await b2.request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CLUSTER,
                                                                          "brokerName": GROUP})
        assert nxt.ext_fields["nextBrokerId"] == "3"
        await asyncio.sleep(1.0)
        assert (await _metadata(c1.addr))["isLeader"] == "false"
        await a1.close()
        await b2.close()
    finally:
        c1.kill()
        if c2 is not None:
            c2.kill()


async def test_losing_an_etcd_member_does_not_stop_the_controller_group(etcd_cluster, tmp_path):
    """Both controllers talk to the first endpoint first; kill that etcd member: they move to the next endpoint,
    a controller leads again and decides, and the state is intact."""
    c1 = _controller(tmp_path, "c1", etcd_cluster.endpoints).start()
    c2 = _controller(tmp_path, "c2", etcd_cluster.endpoints).start()
    try:
        await _wait_leader(c1.addr, 15)
        a = await FakeBroker.connect(c1.addr, CLUSTER, GROUP, "127.0.0.1:24911")
        assert await a.obtain_id() == 1
        await a.close()
        etcd_cluster.procs[0].kill()
        etcd_cluster.procs[0].wait(10)
        deadline = time.monotonic() + 20
        leader = None
        while time.monotonic() < deadline and leader is None:
            for c in (c1, c2):
                try:
                    if (await _metadata(c.addr)).get("isLeader") == "true":
                        leader = c
                except OSError:
                    pass
            await asyncio.sleep(0.2)
        assert leader is not None, "no active controller after losing one etcd member"
        b = await FakeBroker.connect(leader.addr, CLUSTER, GROUP, "127.0.0.1:24921")
        deadline = time.monotonic() + 20
        while True:  # the first tries may meet the etcd election that follows the member's loss (answered 1)
            names = {"clusterName": CLUSTER, "brokerName": GROUP}
            nxt = await b.request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, names, timeout=15)
            if nxt.code == 0:
                applied = await b.request(RequestCode.CONTROLLER_APPLY_BROKER_ID, dict(
                    names, appliedBrokerId=int(nxt.ext_fields["nextBrokerId"]), registerCheckCode="b:1;1"),
                    timeout=15)
                if applied.code == 0:
                    break
            assert time.monotonic() < deadline, (nxt, applied if nxt.code == 0 else None)
            await asyncio.sleep(0.5)
        assert nxt.ext_fields["nextBrokerId"] == "2"  # the id applied before the loss is still there
        await b.close()
    except BaseException:
        print("c1:", c1.log_text()[-4000:], "\nc2:", c2.log_text()[-4000:])
        raise
    finally:
        c1.kill()
        c2.kill()


async def test_a_stopped_active_controller_hands_over_at_once(etcd_cluster, tmp_path):
    """SIGTERM: the active controller deletes its leader key on the way out, so the standby does not wait for the
    lease to run out."""
    c1 = _controller(tmp_path, "c1", etcd_cluster.endpoints).start()
    c2 = _controller(tmp_path, "c2", etcd_cluster.endpoints).start()
    try:
        await _wait_leader(c1.addr, 15)
        await asyncio.sleep(0.5)
        assert (await _metadata(c2.addr))["isLeader"] == "false"
        assert c1.stop() == 0
        took = await _wait_leader(c2.addr, 10)
        assert took < 2.0, took  # the lease is 3 s
        assert "Traceback" not in c1.log_text() and "ERROR" not in c1.log_text(), c1.log_text()
    finally:
        c1.kill()
        c2.kill()
