"""Issue 28, the smaller faults of a real deployment over loopback, each with real processes: a slave started before
its master learns the master's HA address at once; a consumer group's allocation does not collapse onto one client
when a master restarts; offsets committed to a slave while its master was down reach the master; a clean shutdown of
a master, a slave and a name server logs no ERROR."""

from __future__ import annotations

import asyncio
import time

from conftest import BrokerProcess

from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R

from .test_issue2_cluster import NamesrvProcess
from .wire import WireClient, props, send_v2_fields

import pytest


@pytest.fixture
def namesrv():
    server = NamesrvProcess()
    yield server
    server.stop()


def group_of(tmp_path, name: str, namesrv_addr: str, role: str = "ASYNC_MASTER", **extra) -> tuple:
    """A master and a slave of brokerName ``name`` (not started)."""
    common = {"brokerClusterName": "FaultCluster", **extra}
    master = BrokerProcess(tmp_path, name, embedded_namesrv=False, namesrv_addr=namesrv_addr,
                           extra={**common, "brokerRole": role})
    slave_dir = tmp_path / f"{name}-slave"
    slave_dir.mkdir()
    slave = BrokerProcess(slave_dir, name, embedded_namesrv=False, namesrv_addr=namesrv_addr,
                          extra={**common, "brokerRole": "SLAVE", "brokerId": 1})
    return master, slave


# -- 1. a slave that registers before its master ---------------------------------------------------------------------
async def test_a_slave_started_before_its_sync_master_is_in_sync_within_seconds(tmp_path, namesrv):
    master, slave = group_of(tmp_path, "broker-s", namesrv.addr, role="SYNC_MASTER", slaveTimeout=3000)
    try:
        slave.start()  # registers first: the name server knows no master yet, its answer names none
        master.start()
        started = time.monotonic()
        async with await WireClient.connect(master.addr) as client:
            codes = []
            while True:
                resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("FaultSync", 0, props(UNIQ_KEY="P")),
                                            b"probe")
                codes.append(resp.code)
                if resp.code == R.SUCCESS or time.monotonic() - started > 40:
                    break
                await asyncio.sleep(0.2)
        elapsed = time.monotonic() - started
        print(f"SEND_OK after {elapsed:.2f} s (answers before it: {sorted(set(codes[:-1]))})")
        assert resp.code == R.SUCCESS, f"no SEND_OK after {elapsed:.1f} s"
        assert elapsed < 8.0, f"the slave learned its master's HA address only after {elapsed:.1f} s"
        # control: the acknowledging replica is that slave: once it stops, the master answers SLAVE_NOT_AVAILABLE again
        slave.stop()
        async with await WireClient.connect(master.addr) as client:
            alone = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("FaultSync", 0, props(UNIQ_KEY="Q")),
                                         b"alone")
        assert alone.code == R.SLAVE_NOT_AVAILABLE
    finally:
        master.stop()
        slave.stop()


# -- 4. a clean shutdown logs no ERROR -------------------------------------------------------------------------------
def _errors(output: str) -> list[str]:
    """Lines at ERROR or worse, and tracebacks (a clean shutdown has none)."""
    return [line for line in output.splitlines()
            if " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback")]


async def test_sigterm_of_a_master_a_slave_and_a_name_server_logs_no_error(tmp_path, namesrv):
    master, slave = group_of(tmp_path, "broker-t", namesrv.addr, role="SYNC_MASTER", slaveTimeout=3000)
    try:
        master.start()
        slave.start()
        async with await WireClient.connect(master.addr) as client:
            async def replicated() -> bool:
                resp = await client.request(RC.SEND_MESSAGE_V2,
                                            send_v2_fields("FaultStop", 0, props(UNIQ_KEY="S")), b"s")
                return resp.code == R.SUCCESS
            deadline = time.monotonic() + 20
            while not await replicated():
                assert time.monotonic() < deadline, "the slave never acknowledged"
                await asyncio.sleep(0.3)
            for i in range(200):  # replication traffic in flight around the stop
                await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("FaultStop", i % 2, props(UNIQ_KEY=f"T{i}")),
                                     b"t" * 500)
        assert master.stop() == 0  # SIGTERM with the slave connected
        await asyncio.sleep(1.0)  # the slave notices the closed replication connection
        master.start()
        await asyncio.sleep(1.0)
        assert slave.stop() == 0  # SIGTERM of the slave with its master up
        await asyncio.sleep(0.5)
        namesrv.stop()  # SIGTERM of the name server with the master registered
        assert namesrv.proc.returncode == 0
        await asyncio.sleep(1.0)
        assert master.stop() == 0  # its name server gone: unregistration fails quietly
        for who, output in (("master", master.log_text()), ("slave", slave.log_text()),
                            ("name server", "".join(namesrv.output))):
            assert _errors(output) == [], f"{who} logged errors on a clean shutdown:\n{output[-3000:]}"
        # control: the check sees real errors (the same helper on a line the broker writes at ERROR level)
        assert _errors("2026-01-01 00:00:00,000 ERROR broker.ha.master - boom")
    finally:
        master.stop()
        slave.stop()
