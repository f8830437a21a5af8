"""POP over gRPC: ReceiveMessage of 32 + one batched AckMessage, the broker beside a bare grpc.aio floor (issue 30).

    python bench/grpc_pop.py [--messages 20000] [--batch 32] [--limit SECONDS]

Two servers are timed with the same raw MessagingService client (grpc.aio, one call in flight, in this process):

* the floor: a bare grpc.aio server on uvloop (this file with ``--floor PORT``, its own process) that answers every
  ReceiveMessage with a status, ``batch`` prebuilt 128-byte messages (receipt handles included) and the delivery
  timestamp, and every AckMessage with an OK entry per handle: what the library costs for the same frames;
* the real broker (tests/support/broker_process.py, gRPC on a free port), after ``--messages`` 128-byte messages were
  stored over remoting (batches of 32), consumed by a new group: receive(batch, invisible 60 s), then one AckMessage
  naming every handle of that receive.

Prints msgs/s of each, the server's CPU per message (from /proc/<pid>/stat), and broker/floor. The work directory
is under bench/ and removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import grpc  # noqa: E402
from google.protobuf import duration_pb2  # noqa: E402

from protocol.grpc import definition_pb2 as pb  # noqa: E402
from protocol.grpc import service_pb2 as spb  # noqa: E402
from protocol.grpc import service_pb2_grpc  # noqa: E402
from tests.support.broker_process import free_port, prepare_broker  # noqa: E402

TOPIC = "GrpcPopBench"
GROUP = "GrpcPopBenchGroup"
METADATA = (("x-mq-client-id", "grpc-pop-bench@1@1@0"),)


def server_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- the floor: fixed answers ----------------------------------------------------------------------------------
def _fixed_messages(batch: int) -> list[spb.ReceiveMessageResponse]:
    frames = []
    for i in range(batch):
        sp = pb.SystemProperties(
            message_id=f"7F000001000000000000000000{i:06d}", tag="TagA", queue_id=i % 4, queue_offset=i,
            receipt_handle=f"{i} 1700000000000 60000 0 0 bench-broker {i % 4} {i} {i * 300}",
            body_digest=pb.Digest(type=pb.MD5, checksum="0" * 32), born_host="127.0.0.1:1",
            store_host="127.0.0.1:10911", delivery_attempt=1)
        sp.invisible_duration.CopyFrom(duration_pb2.Duration(seconds=60))
        frames.append(spb.ReceiveMessageResponse(message=pb.Message(
            topic=pb.Resource(name=TOPIC), system_properties=sp, body=b"x" * 128)))
    return frames


class FixedService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, batch: int) -> None:
        self.ok = spb.ReceiveMessageResponse(status=pb.Status(code=pb.OK, message="OK"))
        self.messages = _fixed_messages(batch)

    async def ReceiveMessage(self, request, context):
        yield self.ok
        for frame in self.messages[:request.batch_size]:
            yield frame
        yield spb.ReceiveMessageResponse(delivery_timestamp={"seconds": int(time.time())})

    async def AckMessage(self, request, context):
        ok = pb.Status(code=pb.OK, message="OK")
        return spb.AckMessageResponse(status=ok, entries=[
            spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=ok)
            for e in request.entries])


async def serve_floor(port: int, batch: int) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    service_pb2_grpc.add_MessagingServiceServicer_to_server(FixedService(batch), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("READY", flush=True)
    await server.wait_for_termination()


# ---- the client ------------------------------------------------------------------------------------------------
async def consume(port: int, count: int, batch: int, limit: float) -> tuple[int, float, int]:
    """(messages received and acked, seconds, receives) with one call in flight."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=GROUP), message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=batch,
            invisible_duration=duration_pb2.Duration(seconds=60), long_polling_timeout=duration_pb2.Duration(
                seconds=1))
        group, topic = pb.Resource(name=GROUP), pb.Resource(name=TOPIC)
        received = receives = 0
        started = time.perf_counter()
        while received < count and time.perf_counter() - started < limit:
            messages = [f.message async for f in stub.ReceiveMessage(request, metadata=METADATA, timeout=30)
                        if f.WhichOneof("content") == "message"]
            receives += 1
            if not messages:
                continue
            entries = [spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                           receipt_handle=m.system_properties.receipt_handle) for m in messages]
            answer = await stub.AckMessage(spb.AckMessageRequest(group=group, topic=topic, entries=entries),
                                           metadata=METADATA, timeout=30)
            if answer.status.code != pb.OK:
                raise RuntimeError(f"ack refused: {answer.status}")
            received += len(messages)
        return received, time.perf_counter() - started, receives


async def fill(namesrv: str, addr: str, count: int) -> None:
    from client import Message, Producer
    from client.admin import AdminClient
    from protocol.config_bodies import TopicConfig

    async with AdminClient(namesrv) as admin:
        await admin.create_topic(addr, TopicConfig(TOPIC, 4, 4))
    async with Producer("grpc-pop-bench", namesrv) as producer:
        sent = 0
        while sent < count:
            n = min(32, count - sent)
            await producer.send_batch([Message(TOPIC, b"x" * 128, tags="TagA") for _ in range(n)])
            sent += n


def run_floor(args: argparse.Namespace) -> tuple[int, float, float]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--floor", str(port), "--batch",
                             str(args.batch)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        asyncio.run(consume(port, 64, args.batch, args.limit))  # warm-up
        cpu0 = server_cpu(proc.pid)
        received, seconds, _ = asyncio.run(consume(port, args.messages, args.batch, args.limit))
        return received, seconds, server_cpu(proc.pid) - cpu0
    finally:
        proc.kill()
        proc.wait()


def run_broker(args: argparse.Namespace, work: str) -> tuple[int, float, float]:
    entry = ["-m", "cProfile", "-o", os.path.abspath(args.profile), "-m", "broker"] if args.profile else None
    broker, namesrv_port = prepare_broker(work, 256 << 20, None, entry)
    grpc_port = free_port()
    with open(broker.conf_path, "a", encoding="utf-8") as f:
        f.write(f"enableGrpcProxy=true\ngrpcServerPort={grpc_port}\n")
    broker.start()
    try:
        with open(broker.conf_path, encoding="utf-8") as f:
            listen = next(line.split("=", 1)[1].strip() for line in f if line.startswith("listenPort="))
        asyncio.run(fill(f"127.0.0.1:{namesrv_port}", f"127.0.0.1:{listen}", args.messages))
        cpu0 = server_cpu(broker.pid)
        received, seconds, _ = asyncio.run(consume(grpc_port, args.messages, args.batch, args.limit))
        return received, seconds, server_cpu(broker.pid) - cpu0
    finally:
        broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--limit", type=float, default=30.0)
    parser.add_argument("--profile", help="write a cProfile of the broker process (its whole life) to this file")
    parser.add_argument("--floor", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor:
        import uvloop

        uvloop.run(serve_floor(args.floor, args.batch))
        return 0
    work = os.path.join(REPO_ROOT, "bench", f".grpc-pop-{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    try:
        rows = [("bare grpc.aio floor (fixed answers)", *run_floor(args)),
                ("broker: POP receive + batched ack", *run_broker(args, work))]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'server':<40} {'messages':>9} {'msgs/s':>9} {'server CPU µs/msg':>18}")
    for name, count, seconds, cpu in rows:
        print(f"{name:<40} {count:>9,} {count / seconds:>9,.0f} {cpu / max(1, count) * 1e6:>18,.1f}")
    floor_rate = rows[0][1] / rows[0][2]
    broker_rate = rows[1][1] / rows[1][2]
    print(f"broker / floor: {broker_rate / floor_rate:.2f}x")
    return 0 if rows[1][1] >= args.messages else 1


if __name__ == "__main__":
    raise SystemExit(main())
