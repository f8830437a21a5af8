"""gRPC calls against the broker beside the library's own floor, in one run (issue 30).

    python bench/grpc_core.py [--seconds 4] [--rounds 2] [--json]

Starts the real broker (tests/support/broker_process.py, ASYNC_FLUSH, uvloop) with its gRPC endpoint, and the floor:
a bare grpc.aio server in its own process on uvloop, with the broker's server options, whose MessagingService answers
every call with a fixed, prebuilt reply (no checks, no store). The same grpc.aio client (this process, uvloop) then
drives each workload against both, one after the other, ``--rounds`` times:

  send1     SendMessage of one 128-byte message (tag, message id, born time/host), 1 call in flight
  send16    the same with 16 calls in flight
  receive   ReceiveMessage of up to 32 (a server stream), then one AckMessage with every receipt handle received

The floor's fixed replies carry the fields the broker's do (a send entry's transaction id; a delivery's digest,
store time and host, queue, receipt handle and invisible time).

For each: calls (or messages) per second and the server's CPU per call (from /proc), and two ratios to the floor:
throughput (ours / floor) and CPU (floor CPU per call / ours). The issue's target is >= 0.8x. Medians of the rounds
are printed. Before each receive run the broker's topic is topped up (untimed, remoting batches) with more messages
than the run can take, so the broker never runs dry: an empty POP receive waits out its long poll (the broker holds
it at least 5 s, as the reference's proxy does), which would be timed as idle time. The timing also ends with the
last non-empty receive. The work directory is under bench/ and removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import shutil
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from tests.support.broker_process import free_port, prepare_broker  # noqa: E402

from profiling import process_cpu_seconds  # noqa: E402

TOPIC = "GrpcCoreBench"
GROUP = "GrpcCoreBenchGroup"
BODY = b"x" * 128
SERVER_OPTIONS = [("grpc.max_receive_message_length", 130 * 1024 * 1024),
                  ("grpc.max_send_message_length", 130 * 1024 * 1024), ("grpc.so_reuseport", 0)]


# ---- the floor: a bare grpc.aio server with fixed replies ---------------------------------------------------------
def fixed_servicer():
    """A MessagingService answering SendMessage, ReceiveMessage and AckMessage with fixed, prebuilt replies (no checks,
    no store): the floor's servicer, and what bench/fixed_grpc_broker.py puts in the real broker."""
    from protocol.grpc import definition_pb2 as pb
    from protocol.grpc import service_pb2 as spb
    from protocol.grpc import service_pb2_grpc

    ok = pb.Status(code=pb.OK, message="OK")
    send_reply = spb.SendMessageResponse(status=ok, entries=[spb.SendResultEntry(
        status=ok, message_id="01C0A8000100002A9F0000000000000001", offset=1,
        transaction_id="01C0A8000100002A9F0000000000000001")])
    # a delivery with the fields the broker's carry (digest, store time and host, queue, receipt handle, invisible
    # time), so both sides frame and serialize the same amount
    message = sample_message(pb)
    sp = message.system_properties
    sp.receipt_handle = "12345 1700000000000 30000 0 0 bench-broker 1 12345 3703500"
    sp.queue_id, sp.queue_offset, sp.delivery_attempt = 1, 12345, 1
    sp.born_host = "127.0.0.1:50000"
    sp.body_digest.type, sp.body_digest.checksum = pb.MD5, "0" * 32
    sp.store_timestamp.seconds, sp.store_host = sp.born_timestamp.seconds, "127.0.0.1:10911"
    sp.invisible_duration.seconds = 30
    received = [spb.ReceiveMessageResponse(status=ok)] + \
        [spb.ReceiveMessageResponse(message=message) for _ in range(32)] + \
        [spb.ReceiveMessageResponse(delivery_timestamp=message.system_properties.born_timestamp)]

    class Fixed(service_pb2_grpc.MessagingServiceServicer):
        async def SendMessage(self, request, context):
            return send_reply

        async def ReceiveMessage(self, request, context):
            for frame in received:
                yield frame

        async def AckMessage(self, request, context):
            return spb.AckMessageResponse(status=ok, entries=[spb.AckMessageResultEntry(
                message_id=e.message_id, receipt_handle=e.receipt_handle, status=ok) for e in request.entries])

    return Fixed


def floor_server(port: int) -> None:
    """Serve MessagingService on 127.0.0.1:port with fixed replies until killed (run in its own process)."""
    import grpc
    import uvloop

    from protocol.grpc import service_pb2_grpc

    servicer = fixed_servicer()()

    async def serve() -> None:
        server = grpc.aio.server(options=SERVER_OPTIONS)
        server.add_insecure_port(f"127.0.0.1:{port}")
        service_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, server)
        await server.start()
        print("READY", flush=True)
        await server.wait_for_termination()

    uvloop.install()
    asyncio.run(serve())


def start_floor(port: int) -> subprocess.Popen:
    """The floor server in its own process (this script with --floor-server), once it serves; the caller kills it."""
    floor = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--floor-server", str(port)],
                             stdout=subprocess.PIPE, text=True)
    if floor.stdout.readline().strip() != "READY":
        floor.kill()
        floor.wait()
        raise RuntimeError("the floor server did not start")
    return floor


def sample_message(pb, topic: str = TOPIC, message_id: str = "01C0A8000100002A9F0000000000000001"):
    """A message as the 5.x SDK sends it: body, tag, message id, born time and host, NORMAL type."""
    now = time.time()
    sp = pb.SystemProperties(tag="TagA", message_id=message_id, body_encoding=pb.IDENTITY, message_type=pb.NORMAL,
                             born_host="127.0.0.1")
    sp.born_timestamp.seconds = int(now)
    return pb.Message(topic=pb.Resource(name=topic), system_properties=sp, body=BODY)


# ---- the client --------------------------------------------------------------------------------------------------
METADATA = (("x-mq-client-id", "bench@1@0@grpc-core"), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"),
            ("x-mq-client-version", "5.0.0"))


async def send_phase(stub, pb, spb, in_flight: int, seconds: float) -> tuple[int, float, int]:
    """(calls, seconds, failures): SendMessage of one message, `in_flight` calls at a time, for `seconds`."""
    counter = [0, 0]
    prefix = f"{os.getpid():08X}{int(time.time()) & 0xFFFF:04X}"
    base = sample_message(pb)
    deadline = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        n = 0
        while time.perf_counter() < deadline:
            message = pb.Message()
            message.CopyFrom(base)
            message.system_properties.message_id = f"{prefix}{w:04X}{n:016X}"
            n += 1
            reply = await stub.SendMessage(spb.SendMessageRequest(messages=[message]), metadata=METADATA)
            counter[0 if reply.status.code == pb.OK else 1] += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(in_flight)))
    return counter[0], time.perf_counter() - started, counter[1]


async def receive_phase(stub, pb, spb, seconds: float) -> tuple[int, float, int]:
    """(messages, seconds, rounds): ReceiveMessage of 32 then one AckMessage of all, for `seconds`."""
    from google.protobuf import duration_pb2

    request = spb.ReceiveMessageRequest(group=pb.Resource(name=GROUP),
                                        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1),
                                        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                                        batch_size=32, invisible_duration=duration_pb2.Duration(seconds=30),
                                        auto_renew=False, long_polling_timeout=duration_pb2.Duration(seconds=1))
    messages = rounds = 0
    deadline = time.perf_counter() + seconds
    started = ended = time.perf_counter()
    while time.perf_counter() < deadline:
        entries = []
        async for frame in stub.ReceiveMessage(request, metadata=METADATA):
            if frame.WhichOneof("content") == "message":
                sp = frame.message.system_properties
                entries.append(spb.AckMessageEntry(message_id=sp.message_id, receipt_handle=sp.receipt_handle))
        if not entries:
            break  # nothing left to receive
        reply = await stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name=GROUP),
                                                            topic=pb.Resource(name=TOPIC), entries=entries),
                                      metadata=METADATA)
        if reply.status.code != pb.OK:
            raise RuntimeError(f"ack refused: {reply.status}")
        messages += len(entries)
        rounds += 1
        ended = time.perf_counter()
    return messages, ended - started, rounds


async def measure(port: int, pid: int, workload: str, seconds: float) -> dict:
    import grpc

    from protocol.grpc import definition_pb2 as pb
    from protocol.grpc import service_pb2 as spb
    from protocol.grpc import service_pb2_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        await send_phase(stub, pb, spb, 1, 0.2)  # warm-up: channel, topic, first files
        cpu0 = process_cpu_seconds(pid)
        if workload == "receive":
            count, elapsed, calls = await receive_phase(stub, pb, spb, seconds)
            calls *= 2
        else:
            count, elapsed, failures = await send_phase(stub, pb, spb, 1 if workload == "send1" else 16, seconds)
            if failures:
                raise RuntimeError(f"{failures} sends failed")
            calls = count
        cpu = process_cpu_seconds(pid) - cpu0
    return {"count": count, "seconds": elapsed, "rate": count / elapsed if elapsed else 0.0,
            "cpu_us_per_call": cpu / max(1, calls) * 1e6}


def create_topic(namesrv: str, addr: str) -> None:
    async def create() -> None:
        from client.admin import AdminClient
        from protocol.config_bodies import TopicConfig

        async with AdminClient(namesrv) as admin:
            await admin.create_topic(addr, TopicConfig(TOPIC, 4, 4))
    asyncio.run(create())


def top_up(namesrv: str, count: int) -> None:
    """Store ``count`` more 128-byte messages (remoting batches of 256, untimed) for the receive workload."""
    async def send() -> None:
        from client import Message, Producer

        async with Producer("grpc-core-bench-fill", namesrv) as producer:
            sent = 0
            while sent < count:
                n = min(256, count - sent)
                await producer.send_batch([Message(TOPIC, BODY, tags="TagA") for _ in range(n)])
                sent += n
    asyncio.run(send())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per workload and server, per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workloads", default="send1,send16,receive")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--floor-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server:
        floor_server(args.floor_server)
        return 0
    import uvloop

    workloads = [w for w in args.workloads.split(",") if w]
    work = os.path.join(REPO_ROOT, "bench", f".grpc-core-{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    try:
        grpc_port, floor_port = free_port(), free_port()
        broker, namesrv_port = prepare_broker(work, 256 << 20, None,
                                              extra={"enableGrpcProxy": "true", "grpcServerPort": grpc_port})
        print(broker.start().boot_line)
        floor = start_floor(floor_port)
        try:
            create_topic(f"127.0.0.1:{namesrv_port}", broker.addr)
            figures: dict[str, dict[str, list[dict]]] = {w: {"floor": [], "ours": []} for w in workloads}
            for _round in range(args.rounds):
                for workload in workloads:
                    for side, port, pid in (("floor", floor_port, floor.pid), ("ours", grpc_port, broker.pid)):
                        if workload == "receive" and side == "ours":  # more than the run can take: never dry
                            top_up(f"127.0.0.1:{namesrv_port}", int(args.seconds * 25_000))
                        result = uvloop.run(measure(port, pid, workload, args.seconds))
                        figures[workload][side].append(result)
            report(figures, args.json)
        finally:
            floor.kill()
            floor.wait()
            broker.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def report(figures: dict[str, dict[str, list[dict]]], as_json: bool) -> None:
    unit = {"send1": "calls/s", "send16": "calls/s", "receive": "msgs/s"}
    print(f"{'workload':<9} {'floor ' + 'rate':>12} {'ours rate':>12} {'ratio':>6}   "
          f"{'floor µs/call':>13} {'ours µs/call':>12} {'CPU ratio':>9}")
    out = {}
    for workload, sides in figures.items():
        med = {side: {key: statistics.median(r[key] for r in runs) for key in ("rate", "cpu_us_per_call")}
               for side, runs in sides.items()}
        ratio = med["ours"]["rate"] / med["floor"]["rate"] if med["floor"]["rate"] else 0.0
        cpu_ratio = med["floor"]["cpu_us_per_call"] / med["ours"]["cpu_us_per_call"] \
            if med["ours"]["cpu_us_per_call"] else 0.0
        print(f"{workload:<9} {med['floor']['rate']:>12,.0f} {med['ours']['rate']:>12,.0f} {ratio:>5.2f}x   "
              f"{med['floor']['cpu_us_per_call']:>13,.0f} {med['ours']['cpu_us_per_call']:>12,.0f} "
              f"{cpu_ratio:>8.2f}x  ({unit[workload]})")
        out[workload] = {"floor": med["floor"], "ours": med["ours"], "ratio": ratio, "cpu_ratio": cpu_ratio}
    if as_json:
        print(json.dumps(out))


if __name__ == "__main__":
    raise SystemExit(main())
