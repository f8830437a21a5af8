"""Master/slave replication with real processes: a standalone name server, a master and a slave of one brokerName
(replication.md). The slave learns its master's HA address from the name server's registration answer."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from client import Message, Producer
from tests.support.broker_process import BrokerProcess, free_port

from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R

from tests.support.client_helpers import Recorder, push_consumer, wait_for
from tests.support.broker_process import NamesrvProcess
from tests.support.admin import scrape
from tests.support.admin import mqadmin
from tests.support.wire import WireClient, props, pull_fields, pull_records, send_v2_fields, wait_until

FILE_SIZE = 256 * 1024  # several commit-log files: BLANK markers and file switches are replicated too


@pytest.fixture
def namesrv():
    server = NamesrvProcess()
    yield server
    server.stop()


def pair(broker_factory, namesrv, role: str = "ASYNC_MASTER", master_extra: dict | None = None, **extra):
    common = {"mappedFileSizeCommitLog": FILE_SIZE, "brokerClusterName": "ReplCluster", **extra}
    master = broker_factory("broker-r", embedded_namesrv=False, namesrv_addr=namesrv.addr,
                            extra={**common, "brokerRole": role, **(master_extra or {})})
    slave_dir = master.workdir / "slave"
    slave_dir.mkdir()
    slave = BrokerProcess(slave_dir, "broker-r", embedded_namesrv=False, namesrv_addr=namesrv.addr,
                          extra={**common, "brokerRole": "SLAVE", "brokerId": 1})
    return master, slave


def log_bytes(store_dir: Path) -> bytes:
    """The commit log's files concatenated (names sorted: offsets)."""
    files = sorted((store_dir / "commitlog").iterdir())
    return b"".join(f.read_bytes() for f in files)


async def send_many(addr: str, topic: str, count: int, size: int = 900) -> list:
    async with await WireClient.connect(addr) as client:
        answers = []
        for i in range(count):
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, i % 2, props(UNIQ_KEY=f"U{i:08d}")),
                                        b"m" * size + str(i).encode())
            answers.append(resp)
        return answers


async def test_the_slave_log_is_byte_identical_and_serves_pulls(broker_factory, namesrv):
    master, slave = pair(broker_factory, namesrv)
    slave.start()
    try:
        answers = await send_many(master.addr, "ReplTopic", 600)
        assert all(a.code == R.SUCCESS for a in answers)

        async def caught_up():
            master_log, slave_log = log_bytes(master.store_dir), log_bytes(slave.store_dir)
            return len(slave_log) >= FILE_SIZE * 2 and master_log == slave_log
        await wait_until(caught_up, "the slave's commit log byte-identical to the master's", timeout=30)
        async with await WireClient.connect(slave.addr) as client:
            refused = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("ReplTopic", 0, props(UNIQ_KEY="X")), b"x")
            assert refused.code == R.SERVICE_NOT_AVAILABLE and "slave" in refused.remark
    finally:
        slave.stop()


async def test_consumers_read_from_the_slave_when_the_master_dies(broker_factory, namesrv):
    master, slave = pair(broker_factory, namesrv)
    slave.start()
    try:
        async with Producer("repl-pg", namesrv.addr, default_topic_queue_nums=2) as producer:
            sent = [await producer.send(Message("ReplConsume", b"r-%d" % i)) for i in range(200)]
        assert all(r.status.name == "SEND_OK" for r in sent)
        await wait_until(lambda: _same_logs(master, slave), "the slave caught up", timeout=30)

        async def slave_knows_topic():  # metadata copies run every 10 s (pitfall 7: topics arrive late)
            async with await WireClient.connect(slave.addr) as client:
                resp = await client.request(RC.GET_ALL_TOPIC_CONFIG, {})
                return b"ReplConsume" in (resp.body or b"")
        await wait_until(slave_knows_topic, "the topic copied to the slave", timeout=25, interval=0.5)
        master.kill()  # kill -9: every acknowledged message must still be readable, from the slave
        rec = Recorder()
        consumer = push_consumer("repl-cg", namesrv.addr, "ReplConsume", rec, route_refresh_interval=1.0)
        await consumer.start()
        try:
            await wait_for(lambda: len(rec.bodies) == 200, "all 200 messages from the slave", 40)
            assert rec.bodies == {b"r-%d" % i for i in range(200)}
            master.start()  # back: producers can send again, consumers go back to the master
            async with Producer("repl-pg", namesrv.addr) as producer:
                async def sent_again():
                    try:
                        return (await producer.send(Message("ReplConsume", b"after"))).status.name == "SEND_OK"
                    except Exception:
                        return False
                await wait_for(sent_again, "a send once the master is back", 30)
            await wait_for(lambda: b"after" in rec.bodies, "the message sent after the master came back", 40)
        finally:
            await consumer.shutdown()
    finally:
        slave.stop()


async def _same_logs(master, slave) -> bool:
    return log_bytes(master.store_dir) == log_bytes(slave.store_dir)


async def test_sync_master_acknowledges_only_what_the_slave_has(broker_factory, namesrv):
    master, slave = pair(broker_factory, namesrv, role="SYNC_MASTER", slaveTimeout=3000)
    async with await WireClient.connect(master.addr) as client:
        alone = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("ReplSync", 0, props(UNIQ_KEY="A0")), b"a")
        assert alone.code == R.SLAVE_NOT_AVAILABLE  # stored on the master, but no slave has it
        slave.start()
        try:
            async def replicated_send():
                resp = await client.request(RC.SEND_MESSAGE_V2,
                                            send_v2_fields("ReplSync", 0, props(UNIQ_KEY="A1")), b"probe")
                return resp if resp.code == R.SUCCESS else None
            await wait_until(replicated_send, "a SEND_OK once the slave is connected", timeout=20, interval=0.3)
            for i in range(50):
                body = b"sync-%03d" % i
                resp = await client.request(RC.SEND_MESSAGE_V2,
                                            send_v2_fields("ReplSync", i % 2, props(UNIQ_KEY=f"S{i}")), body)
                assert resp.code == R.SUCCESS, resp.remark
                assert body in log_bytes(slave.store_dir)  # in the slave's file when the answer arrives
        finally:
            slave.stop()
        await asyncio.sleep(0.5)
        gone = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("ReplSync", 0, props(UNIQ_KEY="A2")), b"z")
        assert gone.code == R.SLAVE_NOT_AVAILABLE


@pytest.mark.parametrize("how", ["sigterm", "kill -9"])
async def test_replication_resumes_after_the_master_restarts(broker_factory, namesrv, how):
    master, slave = pair(broker_factory, namesrv)
    slave.start()
    try:
        await send_many(master.addr, "ReplResume", 100)
        await wait_until(lambda: _same_logs(master, slave), "the slave caught up", timeout=30)
        if how == "sigterm":
            master.stop()
        else:
            master.kill()
        master.start()
        answers = await send_many(master.addr, "ReplResume", 150)
        assert all(a.code == R.SUCCESS for a in answers)
        await wait_until(lambda: _same_logs(master, slave), "the slave caught up after the restart", timeout=40,
                         interval=0.5)
        async with await WireClient.connect(slave.addr) as client:
            assert len(await pull_records(client, "ReplResume", 0)) + \
                len(await pull_records(client, "ReplResume", 1)) == 250
    finally:
        slave.stop()


async def test_a_slave_ahead_of_its_master_is_reported_and_kept(broker_factory, namesrv):
    master, slave = pair(broker_factory, namesrv)
    slave.start()
    try:
        await send_many(master.addr, "ReplAhead", 60)
        await wait_until(lambda: _same_logs(master, slave), "the slave caught up", timeout=30)
        slave_log = log_bytes(slave.store_dir)
        master.kill()
        shutil.rmtree(master.store_dir)  # the master lost its disk: its log restarts empty
        master.start()

        async def reported():
            return "ahead" in master.log_text() and "ahead" in slave.log_text()
        await wait_until(reported, "master and slave reporting the slave ahead", timeout=20, interval=0.5)
        assert log_bytes(slave.store_dir) == slave_log  # nothing of the slave's log was overwritten
    finally:
        slave.stop()


async def test_operators_see_roles_and_lag_and_cold_reads_are_sent_to_the_slave(broker_factory, namesrv):
    port = free_port()
    master, slave = pair(broker_factory, namesrv, slaveReadEnable="true", accessMessageInMemoryMaxRatio=0,
                         master_extra={"metricsPort": port})
    slave.start()
    try:
        await send_many(master.addr, "ReplOps", 40)
        await wait_until(lambda: _same_logs(master, slave), "the slave caught up", timeout=30)

        async def listed():
            result = await asyncio.to_thread(mqadmin, namesrv.addr, "clusterList", "--json")
            rows = json.loads(result.stdout)["brokers"] if result.returncode == 0 else []
            roles = {r["brokerId"]: (r["role"], r["replicationLag"]) for r in rows if r["brokerName"] == "broker-r"}
            return roles if len(roles) == 2 and roles[0][1] == 0 and roles[1][1] == 0 else None
        roles = await wait_until(listed, "both brokers listed with their roles", timeout=20, interval=0.5)
        assert roles[0][0] == "ASYNC_MASTER" and roles[1][0] == "SLAVE"
        samples = await scrape(port)
        assert samples[("rocketmq_replication_slaves", ())] == 1
        assert samples[("rocketmq_replication_lag_bytes", ())] == 0
        async with await WireClient.connect(master.addr) as client:
            resp = await client.request(RC.PULL_MESSAGE, pull_fields("ReplOps", "repl-cold", 0, 0, suspend_ms=0))
            assert resp.code == R.SUCCESS and resp.ext_fields["suggestWhichBrokerId"] == "1"
    finally:
        slave.stop()
