"""A raw gRPC POP consumer (the MessagingService calls a 5.x SimpleConsumer makes), remoting sends to feed it, and a
runner for scripts of the official 5.x Python SDK, shared by the gRPC suites (POP, ACL, timed messages, names)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import grpc
from google.protobuf import duration_pb2

from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb
from protocol.grpc import service_pb2_grpc

from tests.support.wire import WireClient, props, send_v2_fields

TOPIC = "PopOrders"
GROUP = "PopGroup"
CLIENT = (("x-mq-client-id", "pop-test@1@1@abc"),)
# short minimums, and 1 s retry delays (the push consumer's backoff after a FAILURE), so the tests run fast
FAST = {"minInvisibleTimeMillsForRecv": 500, "grpcClientConsumerMinLongPollingTimeoutMillis": 100,
        "messageDelayLevel": " ".join(["1s"] * 18)}


def ms(value: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=value // 1000, nanos=(value % 1000) * 1_000_000)


async def remoting_send(addr: str, topic: str, count: int, *, queue_id: int = 0, tag: str = "TagA",
                        prefix: str = "remoting") -> list[str]:
    """Send `count` messages over remoting (bodies "<prefix> <i>", tag, keys k<i>, color=blue); their UNIQ_KEYs."""
    ids = []
    async with await WireClient.connect(addr) as client:
        for i in range(count):
            uniq = f"{prefix.upper()}{i:04d}{int(time.time() * 1000) % 100000:05d}"
            fields = send_v2_fields(topic, queue_id, props(TAGS=tag, KEYS=f"k{i}", UNIQ_KEY=uniq, color="blue"))
            resp = await client.request(RC.SEND_MESSAGE_V2, fields, f"{prefix} {i}".encode())
            assert resp.code == R.SUCCESS, resp.remark
            ids.append(uniq)
    return ids


class Pop:
    """A raw gRPC consumer: the calls a SimpleConsumer makes."""

    def __init__(self, port: int, group: str = GROUP, topic: str = TOPIC, metadata=CLIENT) -> None:
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        self.stub = service_pb2_grpc.MessagingServiceStub(self.channel)
        self.group, self.topic, self.metadata = group, topic, metadata

    async def close(self) -> None:
        await self.channel.close()

    async def receive(self, batch: int = 32, invisible_ms: int = 3000, poll_ms: int = 300, *,
                      tag: str = "*", queue_id: int = 0, sql: str | None = None, auto_renew: bool = False,
                      attempt_id: str | None = None) -> tuple[pb.Status, list[pb.Message]]:
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=self.group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=self.topic), id=queue_id),
            filter_expression=pb.FilterExpression(type=pb.SQL if sql else pb.TAG, expression=sql or tag),
            batch_size=batch, auto_renew=auto_renew, long_polling_timeout=ms(poll_ms))
        if not auto_renew:
            request.invisible_duration.CopyFrom(ms(invisible_ms))
        if attempt_id is not None:
            request.attempt_id = attempt_id
        deadline = poll_ms / 1000 + 10
        frames = [f async for f in self.stub.ReceiveMessage(request, metadata=self.metadata, timeout=deadline)]
        assert frames[0].WhichOneof("content") == "status" and frames[-1].WhichOneof("content") == "delivery_timestamp"
        return frames[0].status, [f.message for f in frames[1:-1]]

    async def messages(self, **kwargs) -> list[pb.Message]:
        state, found = await self.receive(**kwargs)
        assert state.code in (pb.OK, pb.MESSAGE_NOT_FOUND), state
        return found

    async def ack(self, message: pb.Message, handle: str | None = None) -> pb.Status:
        entry = spb.AckMessageEntry(message_id=message.system_properties.message_id,
                                    receipt_handle=handle or message.system_properties.receipt_handle)
        resp = await self.stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name=self.group),
                                                                topic=pb.Resource(name=self.topic), entries=[entry]),
                                          metadata=self.metadata, timeout=10)
        return resp.status

    async def change(self, message: pb.Message, invisible_ms: int, handle: str | None = None):
        return await self.stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=self.group), topic=pb.Resource(name=self.topic),
            receipt_handle=handle or message.system_properties.receipt_handle,
            invisible_duration=ms(invisible_ms), message_id=message.system_properties.message_id),
            metadata=self.metadata, timeout=10)


async def collect(pop: Pop, want: int, *, within: float = 15.0, **kwargs) -> list[pb.Message]:
    """Receive until `want` messages came (bounded)."""
    got: list[pb.Message] = []
    deadline = time.monotonic() + within
    while len(got) < want and time.monotonic() < deadline:
        got += await pop.messages(**kwargs)
    return got


def run_sdk(script: str, *args: object, timeout: float = 90) -> object:
    """Run an SDK script in its own process (the SDK registers the same protobuf package as protocol.grpc); the JSON
    it printed after RESULT."""
    proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])
