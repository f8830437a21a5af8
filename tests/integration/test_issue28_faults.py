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
