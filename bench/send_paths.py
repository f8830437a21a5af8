"""CPU per message of the broker's two send paths, in process (no network, no client): issue 30.

    PYTHONPATH=. python bench/send_paths.py [--messages 30000] [--rounds 5] [--paths run,grpc] [--cold MIB]

Starts a real Broker in this process (ASYNC_FLUSH, its store in a work directory under bench/, removed at the end)
and times, with this thread's CPU clock (``time.thread_time``, so other jobs on the machine barely move it):

  run    the remoting pipelined path: runs of 1,000 SEND_MESSAGE_V2 frames (msgpack headers as client.Producer
         encodes them, 128-byte body, TAGS and UNIQ_KEY) decoded (``decode_command``) and handed to the send
         processor's run handler (``SendProcessor.send_run``): what the server does per read of a pipelining
         connection, answers included;
  grpc   ``MessagingService.SendMessage`` of one 128-byte message (tag, message id, born time and host) awaited
         directly with a stand-in call context (peer and metadata as grpc.aio gives them).

Prints µs of CPU per message for each round and their median. ``--cold MIB`` writes that many MiB of memory between
two gRPC calls (not timed) so each call starts with cold caches, as in a real broker, where grpc.aio's own work runs
between calls: such a call costs 3-5 times a hot one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from tests.support.broker_process import free_port, write_broker_conf  # noqa: E402

TOPIC = "SendPathsBench"
BODY = b"x" * 128
RUN = 1000


class _Channel:
    """What the send processor reads of a remoting connection."""

    def __init__(self) -> None:
        self.remote_addr = "127.0.0.1:50000"
        self.remote_host, self.remote_port = "127.0.0.1", 50000
        self.attrs: dict = {}


class _Context:
    """What MessagingService.SendMessage reads of a grpc.aio call context."""

    _metadata = (("x-mq-client-id", "bench@1@0@send-paths"), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"),
                 ("x-mq-client-version", "5.0.0"))

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50001"

    def invocation_metadata(self) -> tuple:
        return self._metadata


def _frames(count: int, prefix: str) -> list[bytes]:
    """SEND_MESSAGE_V2 frame payloads (after the length field) as client.Producer sends them to this broker."""
    from client.wire import make_send_header_builder
    from protocol.codes import SerializeType

    build = make_send_header_builder(serialize_type=int(SerializeType.MSGPACK), producer_group="send-paths",
                                     topic=TOPIC, broker_name="bench-broker")
    born = int(time.time() * 1000)
    payloads = []
    for n in range(count):
        header = build(n % 4, 0, born, 0, f"TAGS\x01TagA\x02UNIQ_KEY\x01{prefix}{n:016X}\x02", n, 0)
        payloads.append((int(SerializeType.MSGPACK) << 24 | len(header)).to_bytes(4, "big") + header + BODY)
    return payloads


def _grpc_requests(count: int, prefix: str) -> list:
    from protocol.grpc import definition_pb2 as pb
    from protocol.grpc import service_pb2 as spb

    now = int(time.time())
    requests = []
    for n in range(count):
        sp = pb.SystemProperties(tag="TagA", message_id=f"{prefix}{n:016X}", body_encoding=pb.IDENTITY,
                                 message_type=pb.NORMAL, born_host="127.0.0.1")
        sp.born_timestamp.seconds = now
        requests.append(spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=TOPIC),
                                                                    system_properties=sp, body=BODY)]))
    return requests


async def _measure(args: argparse.Namespace, work: str) -> dict[str, list[float]]:
    from broker.broker import Broker
    from broker.config import load_broker_config
    from broker.processors.send import SendProcessor
    from protocol.command import decode_command

    conf = os.path.join(work, "broker.conf")
    paths = [p for p in args.paths.split(",") if p]
    write_broker_conf(conf, os.path.join(work, "store"), free_port(), free_port(), 512 << 20,
                      extra={"enableGrpcProxy": "true" if "grpc" in paths else "false",
                             "grpcServerPort": free_port()})
    broker = Broker(load_broker_config(conf, None))
    await broker.start()
    figures: dict[str, list[float]] = {p: [] for p in paths}
    try:
        broker.topic_config_manager.create_topic_if_absent(TOPIC, 4)
        per_round = max(RUN, args.messages // max(1, args.rounds))
        if "run" in paths:
            processor = SendProcessor(broker.send_service)  # as the broker builds its own
            channel = _Channel()
            processor.send_run(channel, [decode_command(p) for p in _frames(RUN, "AA")])  # warm-up
            for r in range(args.rounds):
                payloads = _frames(per_round, f"{r:08X}00000000")
                started = time.thread_time()
                for k in range(0, len(payloads), RUN):
                    processor.send_run(channel, [decode_command(p) for p in payloads[k:k + RUN]])
                figures["run"].append((time.thread_time() - started) / len(payloads) * 1e6)
        if "grpc" in paths:
            service = getattr(broker.grpc, "_service", None)
            if service is None:
                raise RuntimeError("the broker's gRPC endpoint has no MessagingService (_service) to call")
            context = _Context()
            junk = bytearray(args.cold << 20) if args.cold else None
            for request in _grpc_requests(100, "BB" * 8):  # warm-up
                await service.SendMessage(request, context)
            for r in range(args.rounds):
                requests = _grpc_requests(per_round, f"{r:08X}11111111")
                spent = 0.0
                for request in requests:
                    if junk is not None:
                        junk[::64] = bytes(len(junk) // 64)
                    started = time.thread_time()
                    await service.SendMessage(request, context)
                    spent += time.thread_time() - started
                figures["grpc"].append(spent / len(requests) * 1e6)
    finally:
        await broker.shutdown()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=30_000, help="per path, over all rounds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paths", default="run,grpc")
    parser.add_argument("--cold", type=int, default=0, help="MiB written between two gRPC calls (untimed)")
    args = parser.parse_args()
    import logging

    import uvloop

    logging.basicConfig(level=logging.WARNING)
    work = os.path.join(REPO_ROOT, "bench", f".send-paths-{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    try:
        figures = uvloop.run(_measure(args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for path, rounds in figures.items():
        print(f"{path:<5} µs CPU per message: median {statistics.median(rounds):6.2f}   rounds "
              + " ".join(f"{v:.2f}" for v in rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
