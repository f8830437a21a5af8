"""gRPC sends and receives from the official RocketMQ 5.x Python SDK beside the project's own remoting client (issue 19).

    python bench/grpc_send.py [--messages 2000] [--limit SECONDS]

Starts the real broker (tests/support/broker_process.py) with its gRPC endpoint on a free port, creates the topic over
remoting, then times, one after the other: the SDK's `Producer.send` (synchronous, one message in flight, in its own
process: it registers the same protobuf package as protocol.grpc) and this project's `client.Producer.send` (one in
flight, remoting); then consumption of everything sent, by a new group each: the SDK's SimpleConsumer (POP:
`receive(32, 30)`, then `ack` of each message) and this project's PushConsumer (remoting pulls, one listener call
per message). 128-byte bodies with a tag. Prints msgs/s of each and the broker CPU per message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

from pull_phases import phase_push

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from tests.support.broker_process import free_port, prepare_broker  # noqa: E402

SDK = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, Message, Producer
port, topic, count, limit = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
producer = Producer(ClientConfiguration(f"127.0.0.1:{port}", Credentials()), (topic,))
producer.startup()
body = b"x" * 128
def one():
    m = Message(); m.topic = topic; m.body = body; m.tag = "TagA"
    return producer.send(m)
one()  # warm-up: route, channel, settings
started = time.perf_counter(); sent = 0
while sent < count and time.perf_counter() - started < limit:
    one(); sent += 1
elapsed = time.perf_counter() - started
producer.shutdown()
print("RESULT " + json.dumps({"sent": sent, "seconds": elapsed}), flush=True)
"""


SDK_RECEIVE = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
port, topic, count, limit = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
consumer = SimpleConsumer(ClientConfiguration(f"127.0.0.1:{port}", Credentials()), "BenchSimpleGroup",
                          {topic: FilterExpression("*")}, await_duration=5)
consumer.startup()
started = time.perf_counter(); ids = set(); received = 0
while received < count and time.perf_counter() - started < limit:
    for m in consumer.receive(32, 30):
        consumer.ack(m); ids.add(m.message_id); received += 1
elapsed = time.perf_counter() - started
consumer.shutdown()
print("RESULT " + json.dumps({"received": received, "distinct": len(ids), "seconds": elapsed}), flush=True)
"""


def broker_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def remoting_single(namesrv: str, topic: str, count: int, limit: float) -> tuple[int, float]:
    from client import Message, Producer

    async with Producer("bench-remoting", namesrv) as producer:
        await producer.send(Message(topic, b"x" * 128, tags="TagA"))
        started = time.perf_counter()
        sent = 0
        while sent < count and time.perf_counter() - started < limit:
            await producer.send(Message(topic, b"x" * 128, tags="TagA"))
            sent += 1
        return sent, time.perf_counter() - started


async def create_topic(namesrv: str, addr: str, topic: str) -> None:
    from client.admin import AdminClient
    from protocol.config_bodies import TopicConfig

    async with AdminClient(namesrv) as admin:
        await admin.create_topic(addr, TopicConfig(topic, 4, 4))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--limit", type=float, default=30.0)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="mq-grpc-bench-")
    broker, namesrv_port = prepare_broker(work, 256 << 20, None)
    grpc_port = free_port()
    with open(broker.conf_path, "a", encoding="utf-8") as f:
        f.write(f"enableGrpcProxy=true\ngrpcServerPort={grpc_port}\n")
    print(broker.start().boot_line)
    try:
        with open(broker.conf_path, encoding="utf-8") as f:
            listen = next(line.split("=", 1)[1].strip() for line in f if line.startswith("listenPort="))
        addr = f"127.0.0.1:{listen}"
        topic = "GrpcBench"
        asyncio.run(create_topic(f"127.0.0.1:{namesrv_port}", addr, topic))
        cpu0 = broker_cpu(broker.pid)
        proc = subprocess.run([sys.executable, "-c", SDK, str(grpc_port), topic, str(args.messages), str(args.limit)],
                              capture_output=True, text=True, timeout=args.limit + 120)
        cpu1 = broker_cpu(broker.pid)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        grpc_result = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[7:])
        sent, seconds = asyncio.run(remoting_single(f"127.0.0.1:{namesrv_port}", topic, args.messages, args.limit))
        cpu2 = broker_cpu(broker.pid)
        total = grpc_result["sent"] + sent + 2  # and the two warm-up sends
        proc = subprocess.run([sys.executable, "-c", SDK_RECEIVE, str(grpc_port), topic, str(total),
                               str(args.limit)], capture_output=True, text=True, timeout=args.limit + 120)
        cpu3 = broker_cpu(broker.pid)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        pop = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[7:])
        push = asyncio.run(phase_push(f"127.0.0.1:{namesrv_port}", topic, total, args.limit, 32, 1, 20))
        cpu4 = broker_cpu(broker.pid)
        rows = [("5.x Python SDK send over gRPC, 1 in flight", grpc_result["sent"], grpc_result["seconds"], cpu1 - cpu0),
                ("client.Producer send over remoting, 1 in flight", sent, seconds, cpu2 - cpu1),
                ("5.x SDK SimpleConsumer receive(32) + ack (POP)", pop["received"], pop["seconds"], cpu3 - cpu2),
                ("client.PushConsumer over remoting", push.messages, push.seconds, cpu4 - cpu3)]
        print(f"{'client':<48} {'messages':>9} {'msgs/s':>9} {'broker CPU µs/msg':>18}")
        for name, count, secs, cpu in rows:
            print(f"{name:<48} {count:>9,} {count / secs:>9,.0f} {cpu / max(1, count) * 1e6:>18,.0f}")
        if pop["distinct"] != total or pop["received"] != total:
            print(f"POP COUNT MISMATCH: {pop['received']} received, {pop['distinct']} distinct, {total} sent")
        print(f"remoting push: {push.note}")
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
