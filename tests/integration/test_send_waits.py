"""What a stored message waits for before it is acknowledged, whichever request stored it, with real processes: a
consumer's send-back (CONSUMER_SEND_MSG_BACK) on a SYNC_MASTER waits for a slave as a send does (replication.md §4,
reference §4.8 step 8), and pipelined sends to a SYNC_FLUSH broker, stored together, are each acknowledged once on
disk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R
from protocol.command import encode_command
from protocol.ids import decode_offset_msg_id
from tests.support.broker_process import BrokerProcess, NamesrvProcess
from tests.support.wire import WireClient, props, send_v2_fields, wait_until


@pytest.fixture
def namesrv():
    server = NamesrvProcess()
    yield server
    server.stop()


def sync_master_and_slave(broker_factory, namesrv, name: str, **master_extra) -> tuple[BrokerProcess, BrokerProcess]:
    """A started SYNC_MASTER (3 s slave timeout, ``master_extra`` more keys) and its slave, not started yet."""
    common = {"brokerClusterName": "WaitCluster", "slaveTimeout": 3000}
    master = broker_factory(name, embedded_namesrv=False, namesrv_addr=namesrv.addr,
                            extra={**common, "brokerRole": "SYNC_MASTER", **master_extra})
    slave_dir = master.workdir / "slave"
    slave_dir.mkdir()
    slave = BrokerProcess(slave_dir, name, embedded_namesrv=False, namesrv_addr=namesrv.addr,
                          extra={**common, "brokerRole": "SLAVE", "brokerId": 1})
    return master, slave


def log_bytes(store_dir: Path) -> bytes:
    return b"".join(f.read_bytes() for f in sorted((store_dir / "commitlog").iterdir()))


async def send(client: WireClient, topic: str, uniq: str, body: bytes):
    return await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0, props(UNIQ_KEY=uniq)), body)


async def send_back(client: WireClient, sent, group: str):
    offset = decode_offset_msg_id(sent.ext_fields["msgId"])[2]
    return await client.request(RC.CONSUMER_SEND_MSG_BACK, {"offset": str(offset), "group": group, "delayLevel": "0"})


async def test_a_send_back_on_a_sync_master_waits_for_a_slave_as_a_send_does(broker_factory, namesrv):
    master, slave = sync_master_and_slave(broker_factory, namesrv, "broker-b")
    async with await WireClient.connect(master.addr) as client:
        alone = await send(client, "BackSync", "B0", b"fail me")
        assert alone.code == R.SLAVE_NOT_AVAILABLE  # stored on the master, but no slave has it
        back = await send_back(client, alone, "backGroup")
        assert back.code == R.SYSTEM_ERROR and back.remark == "SLAVE_NOT_AVAILABLE", (back.code, back.remark)
        slave.start()
        try:
            async def replicated_send():
                resp = await send(client, "BackSync", "B1", b"probe")
                return resp if resp.code == R.SUCCESS else None
            await wait_until(replicated_send, "a SEND_OK once the slave is connected", timeout=20, interval=0.3)
            sent = await send(client, "BackSync", "B2", b"fail me too")
            assert sent.code == R.SUCCESS, sent.remark
            back = await send_back(client, sent, "backGroup")
            assert back.code == R.SUCCESS, back.remark
            # the retry copy names its original: in the slave's log when the answer arrives
            origin = f"ORIGIN_MESSAGE_ID\x01{sent.ext_fields['msgId']}\x02".encode()
            assert origin in log_bytes(slave.store_dir)
        finally:
            slave.stop()


async def test_pipelined_sends_to_a_sync_flush_broker_are_stored_together_and_each_acknowledged(broker_factory):
    broker = broker_factory(extra={"flushDiskType": "SYNC_FLUSH"})
    async with await WireClient.connect(broker.addr) as client:
        cmds = [client.make(RC.SEND_MESSAGE_V2, send_v2_fields("FlushRun", i % 2, props(UNIQ_KEY=f"F{i}")), b"m%d" % i)
                for i in range(16)]
        futures = []
        for cmd in cmds:
            futures.append(asyncio.get_running_loop().create_future())
            client.pending[cmd.opaque] = futures[-1]
        await client.send_raw(b"".join(encode_command(cmd) for cmd in cmds))  # one write: read as one run
        answers = [await asyncio.wait_for(f, 10) for f in futures]
    assert [a.code for a in answers] == [R.SUCCESS] * 16, [a.remark for a in answers]
    assert [(int(a.ext_fields["queueId"]), int(a.ext_fields["queueOffset"])) for a in answers] == [
        (i % 2, i // 2) for i in range(16)]
    assert [a.ext_fields["transactionId"] for a in answers] == [f"F{i}" for i in range(16)]


async def test_a_pop_dead_letter_on_a_sync_master_waits_for_a_slave_as_a_send_does(broker_factory, namesrv):
    """POP's own writes (a 5.x consumer's ForwardMessageToDeadLetterQueue, the retries of lapsed deliveries) are
    stored as a send is: with no slave in sync the forward is not acknowledged (the delivery stays in flight); once
    the slave is up it is, and the dead letter is already in the slave's log."""
    from protocol.grpc import definition_pb2 as pb
    from protocol.grpc import service_pb2 as spb
    from tests.support.broker_process import free_port
    from tests.support.grpc_pop import Pop

    grpc_port = free_port()
    master, slave = sync_master_and_slave(broker_factory, namesrv, "broker-p", enableGrpcProxy="true",
                                          grpcServerPort=grpc_port, grpcClientConsumerMinLongPollingTimeoutMillis=100)
    async with await WireClient.connect(master.addr) as client:
        alone = await send(client, "PopSync", "P0", b"dead soon")
        assert alone.code == R.SLAVE_NOT_AVAILABLE  # stored on the master, but no slave has it
    pop = Pop(grpc_port, group="popGroup", topic="PopSync")
    try:
        status, got = await pop.receive(invisible_ms=60_000, poll_ms=1000)
        assert status.code == pb.OK and [m.body for m in got] == [b"dead soon"], status
        handle = got[0].system_properties.receipt_handle

        async def forward() -> pb.Status:
            return (await pop.stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
                group=pb.Resource(name="popGroup"), topic=pb.Resource(name="PopSync"), receipt_handle=handle,
                message_id="P0", delivery_attempt=1, max_delivery_attempts=16), metadata=pop.metadata,
                timeout=10)).status

        refused = await forward()
        assert refused.code != pb.OK and "SLAVE_NOT_AVAILABLE" in refused.message, refused
        slave.start()
        try:
            async with await WireClient.connect(master.addr) as client:
                async def replicated_send():
                    resp = await send(client, "PopSync", "P1", b"probe")
                    return resp if resp.code == R.SUCCESS else None
                await wait_until(replicated_send, "a SEND_OK once the slave is connected", timeout=20, interval=0.3)
            done = await forward()  # the same delivery: still in flight after the refusal
            assert done.code == pb.OK, done
            assert b"DLQ_ORIGIN_MESSAGE_ID\x01P0\x02" in log_bytes(slave.store_dir)
        finally:
            slave.stop()
    finally:
        await pop.close()
