"""The gRPC endpoint against the official RocketMQ 5.x Python SDK (PyPI rocketmq-python-client): a 5.x producer sends
to the real broker process, and a remoting consumer reads what it sent. (Consumption over gRPC: test_grpc_pop.py.)"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import grpc
import pytest

from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb
from protocol.grpc import service_pb2_grpc

from tests.support.acl import ADMIN, APP, grpc_signed, write_acl
from tests.support.acl import signed as signed_remoting
from tests.support.wire import WireClient, create_topic, pull_records

TOPIC = "GrpcOrders"


@pytest.fixture
def grpc_broker(grpc_broker_factory):
    return grpc_broker_factory()


SDK_PRODUCER = """
import json, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer

port, topic, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
producer = Producer(ClientConfiguration(f"127.0.0.1:{port}", Credentials()), (topic,))
producer.startup()
try:
    receipts = []
    for i in range(count):
        message = Message()
        message.topic = topic
        message.body = f"from the 5.x SDK {i}".encode()
        message.tag = "TagA" if i % 2 == 0 else "TagB"
        message.keys = f"order-{i}"
        message.add_property("region", "eu")
        receipt = producer.send(message)
        receipts.append([receipt.message_id, receipt.offset])
    print("RECEIPTS " + json.dumps(receipts), flush=True)
finally:
    producer.shutdown()
"""


def _sdk_send(port: int, topic: str, count: int) -> list[tuple[str, int]]:
    """Send `count` messages with the official SDK's Producer, in its own process (it registers the same protobuf
    package as protocol.grpc); (message id, queue offset) of each receipt."""
    proc = subprocess.run([sys.executable, "-c", SDK_PRODUCER, str(port), topic, str(count)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RECEIPTS "))
    return [tuple(r) for r in json.loads(line[len("RECEIPTS "):])]


async def test_a_5x_sdk_producer_sends_and_a_remoting_consumer_reads(grpc_broker):
    await create_topic(grpc_broker.addr, TOPIC)
    receipts = await asyncio.wait_for(asyncio.to_thread(_sdk_send, grpc_broker.grpc_port, TOPIC, 6), 90)
    assert len(receipts) == 6 and len({m for m, _ in receipts}) == 6
    async with await WireClient.connect(grpc_broker.addr) as client:
        stored = [r for q in (0, 1) for r in await pull_records(client, TOPIC, q)]
    by_id = {r.uniq_key: r for r in stored}
    assert set(by_id) == {m for m, _ in receipts}  # the SDK's message ids are the stored UNIQ_KEYs
    for i, (message_id, offset) in enumerate(receipts):
        record = by_id[message_id]
        assert record.body == f"from the 5.x SDK {i}".encode()
        assert record.properties["TAGS"] == ("TagA" if i % 2 == 0 else "TagB")
        assert record.properties["KEYS"] == f"order-{i}" and record.properties["region"] == "eu"
        assert record.queue_offset == offset


async def test_routes_and_statuses(grpc_broker):
    await create_topic(grpc_broker.addr, TOPIC, queues=3)
    metadata = (("x-mq-client-id", "test@1@1@abc"),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_broker.grpc_port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        access = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=grpc_broker.grpc_port)])
        route = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC), endpoints=access),
                                      metadata=metadata, timeout=10)
        assert route.status.code == pb.OK
        assert [(q.id, q.permission, q.broker.id) for q in route.message_queues] == \
               [(0, pb.READ_WRITE, 0), (1, pb.READ_WRITE, 0), (2, pb.READ_WRITE, 0)]
        assert route.message_queues[0].broker.endpoints == access and pb.NORMAL in route.message_queues[0].accept_message_types
        missing = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic"), endpoints=access),
                                        metadata=metadata, timeout=10)
        assert missing.status.code == pb.TOPIC_NOT_FOUND and "NoSuchTopic" in missing.status.message
        beat = await stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=metadata, timeout=10)
        assert beat.status.code == pb.UNRECOGNIZED_CLIENT_TYPE  # no Settings yet
        empty = await stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name=TOPIC), body=b"", system_properties=pb.SystemProperties(message_id="X1"))]),
            metadata=metadata, timeout=10)
        assert empty.entries[0].status.code == pb.MESSAGE_BODY_EMPTY
        reserved = await stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name=TOPIC), body=b"x", user_properties={"UNIQ_KEY": "mine"},
            system_properties=pb.SystemProperties(message_id="X2"))]), metadata=metadata, timeout=10)
        assert reserved.entries[0].status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
        frames = [f async for f in stub.ReceiveMessage(spb.ReceiveMessageRequest(
            group=pb.Resource(name="g"), batch_size=1), metadata=metadata, timeout=10)]
        assert [f.WhichOneof("content") for f in frames] == ["status", "delivery_timestamp"]
        assert frames[0].status.code == pb.ILLEGAL_TOPIC and "blank" in frames[0].status.message


async def test_with_acl_requests_are_signed_and_sends_need_pub(grpc_broker_factory, tmp_path):
    write_acl(tmp_path / "plain_acl.yml")
    broker = grpc_broker_factory(aclEnable="true")
    port = broker.grpc_port
    message = lambda topic, mid: spb.SendMessageRequest(messages=[pb.Message(  # noqa: E731
        topic=pb.Resource(name=topic), body=b"signed", system_properties=pb.SystemProperties(message_id=mid))])
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        anonymous = await stub.SendMessage(message("Orders", "A1"), metadata=(("x-mq-client-id", "x"),), timeout=10)
        assert anonymous.status.code == pb.UNAUTHORIZED
        forged = await stub.SendMessage(message("Orders", "A2"), metadata=grpc_signed(APP[0], "not-the-secret"),
                                        timeout=10)
        assert forged.status.code == pb.UNAUTHORIZED and "signature" in forged.status.message
        ok = await stub.SendMessage(message("Orders", "A3"), metadata=grpc_signed(*APP), timeout=10)
        assert ok.status.code == pb.OK, ok.status.message
        denied = await stub.SendMessage(message("Payroll", "A4"), metadata=grpc_signed(*APP), timeout=10)
        assert denied.status.code == pb.UNAUTHORIZED and "PUB" in denied.status.message
        route = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="Orders")),
                                      metadata=(("x-mq-client-id", "x"),), timeout=10)
        assert route.status.code == pb.UNAUTHORIZED
    async with await WireClient.connect(broker.addr) as client:  # exactly the one allowed send was stored
        stored = 0
        for queue_id in range(4):
            resp = await signed_remoting(client, RC.GET_MAX_OFFSET, {"topic": "Orders", "queueId": str(queue_id)},
                                         creds=ADMIN)
            assert resp.code == R.SUCCESS, resp.remark
            stored += int(resp.ext_fields["offset"])
        assert stored == 1
