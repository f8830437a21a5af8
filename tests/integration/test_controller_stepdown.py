"""A controller-mode master that steps down acknowledges nothing more (controller.md §6, §8): a write it took after
learning it is no longer master would be in an epoch the new master never sees, cut when it rejoins as a slave --
an acknowledged message lost (the flaky elect-master test of test_controller_failover.py lost such sends).

A real controller process and an in-process broker (allAckInSyncStateSet) elected master by it. The role change is
held at a chosen step by a gate on one of its real calls, so the moment a send arrives is certain."""

from __future__ import annotations

import asyncio

import pytest

from broker.broker import Broker
from broker.config import BrokerConfig
from protocol.codes import RequestCode, ResponseCode
from tests.support.broker_process import free_port
from tests.support.controller import ControllerProcess
from tests.support.wire import WireClient, props, send_v2_fields, wait_until

TOPIC = "StepDown"


@pytest.fixture
async def master(tmp_path):
    """An in-process broker elected master (epoch 1, SyncStateSet of itself) by a real controller."""
    controller = ControllerProcess(tmp_path).start()
    brokers: list[Broker] = []

    async def make(**extra) -> Broker:
        cfg = BrokerConfig(
            broker_name="broker-s", broker_cluster_name="StepCluster", broker_ip1="127.0.0.1",
            listen_host="127.0.0.1", listen_port=free_port(), ha_listen_port=free_port(), namesrv_addr=None,
            enable_embedded_namesrv=False, enable_vip_channel=False, store_path_root_dir=str(tmp_path / "store"),
            mapped_file_size_commit_log=1 << 20, dashboard_port=0, metrics_port=0, enable_controller_mode=True,
            controller_addr=controller.addr, all_ack_in_sync_state_set=True, **extra)
        broker = Broker(cfg)
        brokers.append(broker)
        await broker.start()
        await wait_until(lambda: _is_master(broker), "elected master", timeout=30)
        broker.topic_config_manager.create_topic_if_absent(TOPIC, 1)
        return broker

    yield make
    for b in brokers:
        await b.shutdown()
    controller.stop()


async def _is_master(broker: Broker) -> bool:
    return broker.config.broker_role != "SLAVE" and broker.ha_master is not None


async def _send(addr: str, key: str) -> int:
    async with await WireClient.connect(addr) as client:
        resp = await client.request(RequestCode.SEND_MESSAGE_V2, send_v2_fields(TOPIC, 0, props(UNIQ_KEY=key)),
                                    b"x" * 64, timeout=10.0)
    return resp.code


def _gate(obj: object, name: str) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold obj.name (a coroutine method) until ``release`` is set; ``entered`` tells it was reached."""
    entered, release = asyncio.Event(), asyncio.Event()
    original = getattr(obj, name)

    async def held(*args, **kwargs):
        entered.set()
        await release.wait()
        return await original(*args, **kwargs)

    setattr(obj, name, held)
    return entered, release


async def test_a_send_during_the_step_down_is_not_acknowledged(master):
    """Held while its master services stop (the HA master already gone): a send then is refused, not acknowledged."""
    broker = await master()
    addr = broker.config.broker_addr
    assert await _send(addr, "before") == ResponseCode.SUCCESS
    entered, release = _gate(broker.schedule_service, "stop")
    step_down = asyncio.create_task(broker.roles.become_slave(2, None, 2))
    try:
        await asyncio.wait_for(entered.wait(), 10)
        assert await _send(addr, "during") != ResponseCode.SUCCESS
    finally:
        release.set()
        await step_down
    assert await _send(addr, "after") != ResponseCode.SUCCESS


async def test_a_send_stored_before_the_step_down_is_not_acknowledged_after_it(master):
    """SYNC_FLUSH: a message stored as master whose flush is awaited across the whole step-down is not acknowledged:
    nothing says the new master has it."""
    broker = await master(flush_disk_type="SYNC_FLUSH")
    addr = broker.config.broker_addr
    assert await _send(addr, "before") == ResponseCode.SUCCESS
    end = broker.store.commit_log.max_offset
    entered, release = _gate(broker.store.flush_service, "wait_flushed")
    send = asyncio.create_task(_send(addr, "in-flight"))
    try:
        await asyncio.wait_for(entered.wait(), 10)
        assert broker.store.commit_log.max_offset > end  # stored, its flush held
        await broker.roles.become_slave(2, None, 2)
    finally:
        release.set()
    assert await send != ResponseCode.SUCCESS
