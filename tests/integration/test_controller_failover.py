"""Controller mode with real processes (issue 28, broker side): a name server, a controller and a broker group whose
members get their ids and roles from the controller. kill -9 of the master elects a SyncStateSet member within
seconds with every acknowledged message kept (allAckInSyncStateSet); an old master that accepted messages nobody
else had (asynchronous replication) rejoins as a slave, cuts that tail, and ends byte-identical to the new master."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from protocol.codes import RequestCode, ResponseCode

from tests.support.admin import mqadmin, ok_json
from tests.support.controller_cluster import (FailoverCluster, FollowingProducer, commit_log_bytes, drain_keys,
                                              stored_keys)
from tests.support.wire import WireClient, create_topic, props, pull_fields, send_v2_fields, wait_until

TOPIC = "FailoverTopic"


@pytest.fixture
def cluster_factory(tmp_path):
    made: list[FailoverCluster] = []

    def make(*args, **kwargs) -> FailoverCluster:
        cluster = FailoverCluster(tmp_path, *args, **kwargs)
        made.append(cluster)
        return cluster

    yield make
    for c in made:
        c.stop()


async def _topic_known(addr: str) -> bool:
    async with await WireClient.connect(addr) as client:
        resp = await client.request(RequestCode.PULL_MESSAGE, pull_fields(TOPIC, "probe", 0, 0, suspend_ms=0))
    return resp.code != ResponseCode.TOPIC_NOT_EXIST


async def _form_group(cluster: FailoverCluster, create: bool = True) -> str:
    """Start replica 0 first (the first election takes the requester), then the others; wait for the full set."""
    cluster.brokers[0].start()
    first = await wait_until(cluster.master_addr, "a master in the routes", timeout=30)
    assert first == cluster.brokers[0].addr
    for b in cluster.brokers[1:]:
        b.start()
    want = len(cluster.brokers)
    await wait_until(lambda: _count(cluster, want), f"{want} replicas in the SyncStateSet", timeout=40)
    if create:
        await create_topic(first, TOPIC, 2)
    return first


async def _count(cluster: FailoverCluster, want: int) -> bool:
    return len(await cluster.in_sync_ids()) == want


async def test_fenced_until_registered_and_epoch_cache(cluster_factory):
    """A controller-mode broker whose controller is not there takes no writes and is in no route; once the
    controller runs it registers, is elected and answers GET_BROKER_EPOCH_CACHE (a classic broker refuses it)."""
    cluster = cluster_factory(1)
    cluster.controller.stop()
    b = cluster.brokers[0].start()
    async with await WireClient.connect(b.addr) as client:
        refused = await client.request(RequestCode.SEND_MESSAGE_V2, send_v2_fields(TOPIC, 0, props(UNIQ_KEY="F")),
                                       b"x")
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
    await asyncio.sleep(1.0)
    assert await cluster.routes() == {}
    cluster.controller.start()
    assert await wait_until(cluster.master_addr, "the master in the routes", timeout=30) == b.addr
    cache = await cluster.epochs(b.addr)
    assert (cache.broker_name, cache.broker_id) == ("broker-f", 0)
    assert [(e.epoch, e.start_offset) for e in cache.epoch_list] == [(1, 0)]
    assert (b.store_dir / "brokerIdentity").read_text().strip() == "FailCluster#broker-f#1"
    async with await WireClient.connect(b.addr) as client:
        ok = await client.request(RequestCode.SEND_MESSAGE_V2, send_v2_fields(TOPIC, 0, props(UNIQ_KEY="G")), b"y")
    assert ok.code == ResponseCode.SUCCESS, ok.remark


async def test_kill_master_elects_in_sync_replica_and_keeps_every_ack(cluster_factory):
    cluster = cluster_factory(3, broker_extra={"allAckInSyncStateSet": "true"})
    old = await _form_group(cluster)
    for b in cluster.brokers[1:]:
        await wait_until(lambda b=b: _topic_known(b.addr), f"topic copied to {b.addr}", timeout=30)
    producer = FollowingProducer(cluster, TOPIC)
    task = asyncio.create_task(producer.run())
    try:
        await wait_until(lambda: _gt(len(producer.acked), 300), "300 acknowledged sends", timeout=60)
        await cluster.controller.past_grace()
        killed_at = time.monotonic()
        cluster.by_addr(old).kill()
        new = await wait_until(lambda: _other_master(cluster, old), "a new master in the routes", timeout=30)
        await wait_until(lambda: _gt(producer.first_ack_after(killed_at, old) or 0, 0), "an ack from the new master",
                         timeout=30)
        failover_s = producer.first_ack_after(killed_at, old) - killed_at
        assert failover_s < 20, failover_s
        count = len(producer.acked)
        await wait_until(lambda: _gt(len(producer.acked), count + 100), "100 more acks", timeout=30)
    finally:
        producer.stopping = True
        await task
    stored = await stored_keys(new, TOPIC, set(producer.acked))
    missing = set(producer.acked) - stored
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    cache = await cluster.epochs(new)
    assert [e.epoch for e in cache.epoch_list] == [1, 2] and cache.broker_id == 0
    # the old master comes back as a slave of the new one and ends with the same log
    old_broker = cluster.by_addr(old)
    old_broker.start()
    routes = await wait_until(lambda: _listed(cluster, old), "the old master listed as a slave", timeout=30)
    assert routes[0] == new
    await wait_until(lambda: _same_end(cluster, old, new), "the old master caught up", timeout=30)
    a, b = await cluster.epochs(old), await cluster.epochs(new)
    assert [(e.epoch, e.start_offset) for e in a.epoch_list] == [(e.epoch, e.start_offset) for e in b.epoch_list]
    assert commit_log_bytes(old_broker)[:a.max_offset] == commit_log_bytes(cluster.by_addr(new))[:a.max_offset]
    # mqadmin getBrokerEpoch lists every replica with the same history (the master as route id 0)
    third = next(x.addr for x in cluster.brokers if x.addr not in (old, new))
    await wait_until(lambda: _same_end(cluster, third, new), "the other slave caught up", timeout=30)
    report = ok_json(cluster.namesrv.addr, "getBrokerEpoch", "-b", "broker-f")["brokers"]
    assert len(report) == 3 and sorted(r["brokerId"] for r in report)[0] == 0
    assert all([e["epoch"] for e in r["epochList"]] == [1, 2] for r in report), [(r["brokerId"], r["maxOffset"], r["epochList"]) for r in report]
    text = mqadmin(cluster.namesrv.addr, "getBrokerEpoch", "-c", "FailCluster")
    assert text.returncode == 0 and text.stdout.count("#Epoch: EpochEntry{epoch=2, startOffset=") == 3


async def test_old_master_cuts_its_divergent_tail(cluster_factory):
    # asynchronous replication; the slave is frozen while the master takes messages nobody else will have
    cluster = cluster_factory(2, broker_extra={"haMaxTimeSlaveNotCatchup": 60000})
    old = await _form_group(cluster)
    a_proc, b_proc = cluster.by_addr(old), next(b for b in cluster.brokers if b.addr != old)
    async with await WireClient.connect(old) as client:
        for i in range(50):
            r = await client.request(RequestCode.SEND_MESSAGE_V2,
                                     send_v2_fields(TOPIC, i % 2, props(UNIQ_KEY=f"S{i}")), b"s" * 500)
            assert r.code == ResponseCode.SUCCESS
    await wait_until(lambda: _same_end(cluster, old, b_proc.addr), "the slave caught up", timeout=30)
    await cluster.controller.past_grace()
    os.kill(b_proc.proc.pid, signal.SIGSTOP)  # for about a second: well within its heartbeat timeout
    try:
        async with await WireClient.connect(old) as client:
            for i in range(160):  # ~10 MB: more than the socket buffers between them hold
                r = await client.request(RequestCode.SEND_MESSAGE_V2,
                                         send_v2_fields(TOPIC, i % 2, props(UNIQ_KEY=f"D{i}")), b"d" * 64 * 1024)
                assert r.code == ResponseCode.SUCCESS, r.remark
        old_end = (await cluster.epochs(old)).max_offset
        a_proc.kill()
    finally:
        os.kill(b_proc.proc.pid, signal.SIGCONT)
    new = await wait_until(lambda: _other_master(cluster, old), "the slave elected", timeout=30)
    assert new == b_proc.addr
    new_cache = await cluster.epochs(new)
    assert [e.epoch for e in new_cache.epoch_list] == [1, 2]
    common = new_cache.epoch_list[1].start_offset
    assert common < old_end  # the old master had bytes the new one never got
    async with await WireClient.connect(new) as client:  # the new master's own epoch-2 messages
        for i in range(20):
            r = await client.request(RequestCode.SEND_MESSAGE_V2,
                                     send_v2_fields(TOPIC, i % 2, props(UNIQ_KEY=f"N{i}")), b"n" * 500)
            assert r.code == ResponseCode.SUCCESS, r.remark
    a_proc.start()
    log = a_proc.wait_for_log("cut the commit log", timeout=30)
    line = next(li for li in log.splitlines() if "cut the commit log" in li)
    assert f"from {old_end} to {common} ({old_end - common} bytes" in line
    assert log.count("cut the commit log") == 1
    await wait_until(lambda: _same_end(cluster, old, new), "the old master caught up", timeout=30)
    a, b = await cluster.epochs(old), await cluster.epochs(new)
    assert [(e.epoch, e.start_offset) for e in a.epoch_list] == [(e.epoch, e.start_offset) for e in b.epoch_list]
    assert a.broker_id == 1 and b.broker_id == 0
    assert commit_log_bytes(a_proc)[:a.max_offset] == commit_log_bytes(b_proc)[:a.max_offset]


async def _gt(value, than) -> bool:
    return value > than


async def _other_master(cluster: FailoverCluster, old: str) -> str | None:
    addr = await cluster.master_addr()
    return addr if addr and addr != old else None


async def _listed(cluster: FailoverCluster, addr: str) -> dict | None:
    routes = await cluster.routes()
    return routes if any(a == addr and i > 0 for i, a in routes.items()) else None


async def _same_end(cluster: FailoverCluster, a: str, b: str) -> bool:
    try:
        x, y = await cluster.epochs(a), await cluster.epochs(b)
    except (OSError, ConnectionError, AssertionError):
        return False
    return x.max_offset == y.max_offset and x.max_offset > 0


async def test_ack_rules_follow_the_sync_state_set(cluster_factory):
    """allAckInSyncStateSet: a frozen set member makes sends answer FLUSH_SLAVE_TIMEOUT (stored) after slaveTimeout
    until the master drops it from the set (haMaxTimeSlaveNotCatchup); then minInSyncReplicas=2 refuses sends with
    "in-sync replicas not enough" (not stored) until the member is back in the set."""
    cluster = cluster_factory(2, broker_extra={"allAckInSyncStateSet": "true", "minInSyncReplicas": 2,
                                               "slaveTimeout": 800, "haMaxTimeSlaveNotCatchup": 2000,
                                               "checkSyncStateSetPeriod": 500})
    master = await _form_group(cluster)
    slave = next(b for b in cluster.brokers if b.addr != master)

    async def send(key: str):
        async with await WireClient.connect(master) as client:
            return await client.request(RequestCode.SEND_MESSAGE_V2,
                                        send_v2_fields(TOPIC, 0, props(UNIQ_KEY=key)), b"a" * 100)

    ok = await send("A0")
    assert ok.code == ResponseCode.SUCCESS, ok.remark  # control: both in the set, both have it
    os.kill(slave.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        late = await send("A1")
        assert late.code == ResponseCode.FLUSH_SLAVE_TIMEOUT and time.monotonic() - started >= 0.7
        # stored, but past confirmOffset while the frozen member is still in the set: consumers do not see it
        assert await drain_keys(master, TOPIC) == {"A0"}
        await wait_until(lambda: _count(cluster, 1), "the frozen member dropped from the set", timeout=20)
        refused = await send("A2")
        assert refused.code == ResponseCode.SYSTEM_ERROR and "in-sync replicas not enough" in refused.remark
    finally:
        os.kill(slave.proc.pid, signal.SIGCONT)
    await wait_until(lambda: _count(cluster, 2), "the member back in the set", timeout=20)
    back = await send("A3")
    assert back.code == ResponseCode.SUCCESS, back.remark
    stored = await drain_keys(master, TOPIC)
    assert {"A0", "A1", "A3"} <= stored and "A2" not in stored

    async def on_slave():  # a slave shows what its master confirmed: all of it once the member is back
        return {"A0", "A1", "A3"} <= await drain_keys(slave.addr, TOPIC)
    await wait_until(on_slave, "the confirmed messages readable on the slave", timeout=20)


async def test_forged_role_notice_on_the_broker_port_changes_nothing(cluster_factory):
    """NOTIFY_BROKER_ROLE_CHANGED sent to the broker's own port by anyone, with a higher epoch naming another master,
    only makes the broker ask the controller: it stays master (the controller's own notices, on the broker's
    connection to it, are what the failover tests follow)."""
    from protocol.controller import NotifyBrokerRoleChangedRequestHeader, SyncStateSet

    cluster = cluster_factory(1)
    b = cluster.brokers[0].start()
    assert await wait_until(cluster.master_addr, "the master", timeout=30) == b.addr
    header = NotifyBrokerRoleChangedRequestHeader(master_address="127.0.0.1:1", master_epoch=99,
                                                  sync_state_set_epoch=99, master_broker_id=7).encode()
    async with await WireClient.connect(b.addr) as client:
        resp = await client.request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header, SyncStateSet({7}, 99).encode())
        assert resp.code == ResponseCode.SUCCESS
        await asyncio.sleep(1.0)
        ok = await client.request(RequestCode.SEND_MESSAGE_V2, send_v2_fields(TOPIC, 0, props(UNIQ_KEY="Z")), b"z")
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    assert await cluster.master_addr() == b.addr
    assert [e.epoch for e in (await cluster.epochs(b.addr)).epoch_list] == [1]


async def test_classic_broker_refuses_epoch_cache(broker):
    async with await WireClient.connect(broker.addr) as client:
        resp = await client.request(RequestCode.GET_BROKER_EPOCH_CACHE)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "not in controller mode" in resp.remark


async def test_roles_change_both_ways_without_restart(cluster_factory):
    """A hung master (SIGSTOP past its heartbeat timeout) is replaced; resumed, the same process turns slave, copies
    from the new master, and becomes master again when that one dies, taking sends (also delayed ones) each time."""
    cluster = cluster_factory(2, broker_extra={"controllerHeartBeatTimeoutMills": 3000})
    a_addr = await _form_group(cluster)
    a = cluster.by_addr(a_addr)
    b = next(x for x in cluster.brokers if x is not a)
    await cluster.controller.past_grace(3.0)

    async def send(addr: str, key: str, **extra: str):
        async with await WireClient.connect(addr) as client:
            return await client.request(RequestCode.SEND_MESSAGE_V2,
                                        send_v2_fields(TOPIC, 0, props(UNIQ_KEY=key, **extra)), b"r" * 100)

    assert (await send(a_addr, "R0")).code == ResponseCode.SUCCESS
    await wait_until(lambda: _same_end(cluster, a_addr, b.addr), "b copied R0", timeout=30)
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        assert await wait_until(lambda: _other_master(cluster, a_addr), "b elected", timeout=30) == b.addr
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    assert (await send(b.addr, "R1")).code == ResponseCode.SUCCESS
    await wait_until(lambda: _listed(cluster, a_addr), "a listed as a slave", timeout=30)
    await wait_until(lambda: _same_end(cluster, a_addr, b.addr), "a copied b's log", timeout=30)
    await wait_until(lambda: _count(cluster, 2), "a back in the SyncStateSet", timeout=30)
    refused = await send(a_addr, "R-refused")
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE  # a slave now, same process
    assert a.proc.poll() is None
    b.kill()
    assert await wait_until(lambda: _other_master(cluster, b.addr), "a master again", timeout=30) == a_addr
    assert (await send(a_addr, "R2")).code == ResponseCode.SUCCESS
    assert (await send(a_addr, "R3", DELAY="1")).code == ResponseCode.SUCCESS  # delayed delivery runs again
    await wait_until(lambda: _has(a_addr, {"R0", "R1", "R2", "R3"}), "every message readable on a", timeout=20)
    cache = await cluster.epochs(a_addr)
    assert [e.epoch for e in cache.epoch_list] == [1, 2, 3] and cache.broker_id == 0
    assert a.stop() == 0  # a clean shutdown of a controller-mode master
    assert "Traceback" not in a.log_text() and " ERROR " not in a.log_text(), a.log_text()[-3000:]


async def _has(addr: str, keys: set[str]) -> bool:
    return keys <= await drain_keys(addr, TOPIC)


ACL = """accounts:
  - accessKey: ctl_admin01
    secretKey: ctl-admin-secret
    admin: true
  - accessKey: app_key01
    secretKey: app-secret-01
    defaultTopicPerm: PUB|SUB
"""


async def test_acl_controller_mode_signs_and_refuses_strangers(cluster_factory):
    """With aclEnable on the controller and the brokers, brokers sign their controller requests with their admin
    account (and authenticate the HA link with it): the group forms. A broker whose account is not an admin one is
    refused by the controller and stays fenced; GET_BROKER_EPOCH_CACHE and role notices need an admin signature."""
    admin = ("ctl_admin01", "ctl-admin-secret")
    cluster = cluster_factory(2, controller_extra={"aclEnable": "true"}, acl_yaml=ACL, credentials=admin,
                              broker_extra={"aclEnable": "true", "accessKey": admin[0], "secretKey": admin[1]})
    master = await _form_group(cluster, create=False)  # registered, elected, the slave joined through the HA link
    cache = await cluster.epochs(master)
    assert [e.epoch for e in cache.epoch_list] == [1]
    async with await WireClient.connect(master) as client:
        unsigned = await client.request(RequestCode.GET_BROKER_EPOCH_CACHE)
        assert unsigned.code != ResponseCode.SUCCESS
    # a broker with a non-admin account cannot get an id or register
    stranger_dir = cluster.workdir / "stranger"
    stranger_dir.mkdir()
    (stranger_dir / "plain_acl.yml").write_text(ACL)
    from tests.support.broker_process import BrokerProcess

    stranger = BrokerProcess(stranger_dir, "broker-f", embedded_namesrv=False, namesrv_addr=cluster.namesrv.addr,
                             extra={"brokerClusterName": "FailCluster", "enableControllerMode": "true",
                                    "controllerAddr": cluster.controller.addr, "aclEnable": "true",
                                    "accessKey": "app_key01", "secretKey": "app-secret-01"})
    cluster.brokers.append(stranger)
    stranger.start()
    await asyncio.sleep(3.0)
    assert stranger.addr not in (await cluster.routes()).values()
    assert not (stranger.store_dir / "brokerIdentity").exists()
    assert len(await cluster.in_sync_ids()) == 2


async def test_mqadmin_elect_master_moves_the_master_and_keeps_every_ack(cluster_factory):
    """`mqadmin electMaster` names an in-sync replica: it becomes master while a producer runs, the old master
    follows it as a slave, and every acknowledged message is on the new master (allAckInSyncStateSet)."""
    cluster = cluster_factory(2, broker_extra={"allAckInSyncStateSet": "true"})
    old = await _form_group(cluster)
    routes = await cluster.routes()
    [(slave_id, chosen)] = [(i, a) for i, a in routes.items() if i > 0]
    await wait_until(lambda: _topic_known(chosen), f"topic copied to {chosen}", timeout=30)
    producer = FollowingProducer(cluster, TOPIC)
    task = asyncio.create_task(producer.run())
    try:
        await wait_until(lambda: _gt(len(producer.acked), 200), "200 acknowledged sends", timeout=60)
        moved_at = time.monotonic()
        elected = await asyncio.to_thread(mqadmin, None, "electMaster", "-a", cluster.controller.addr, "-c",
                                          "FailCluster", "-bn", "broker-f", "-b", str(slave_id), "--json")
        assert elected.returncode == 0, elected.stderr
        assert await wait_until(lambda: _other_master(cluster, old), "the chosen replica as master",
                                timeout=30) == chosen
        await wait_until(lambda: _gt(producer.first_ack_after(moved_at, old) or 0, 0), "an ack from the new master",
                         timeout=30)
        count = len(producer.acked)
        await wait_until(lambda: _gt(len(producer.acked), count + 100), "100 more acks", timeout=30)
    finally:
        producer.stopping = True
        await task
    assert (await _listed(cluster, old)) is not None or \
        await wait_until(lambda: _listed(cluster, old), "the old master listed as a slave", timeout=30)
    stored = await drain_keys(chosen, TOPIC)
    missing = set(producer.acked) - stored
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    assert [e.epoch for e in (await cluster.epochs(chosen)).epoch_list] == [1, 2]
