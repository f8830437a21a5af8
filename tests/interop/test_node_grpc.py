"""Interop: the official RocketMQ 5.x Node.js SDK (npm rocketmq-client-nodejs 1.0.8) against the broker's gRPC endpoint.

Each test starts the real broker process with `enableGrpcProxy=true`, runs one Node script from tests/interop/node
(grpc_*.js, bounded by its own deadline and by a process timeout here) and asserts on the JSON summary it prints.
What the broker stored, or what a remoting producer put in, is checked or fed over the remoting protocol
(tests/integration/wire.py), so both directions of gRPC <-> remoting interoperation are covered.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest
from integration.wire import WireClient, props, pull_records, records, send_v2_fields

from protocol.codes import RequestCode as RC, ResponseCode as R

pytestmark = pytest.mark.interop

NODE_GRACE_S = 5  # on top of a script's own --timeout-ms before the process is killed


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def grpc_broker(broker_factory):
    port = free_port()
    broker = broker_factory(extra={"enableGrpcProxy": "true", "grpcServerPort": port})
    broker.grpc_port = port
    broker.endpoints = f"127.0.0.1:{port}"
    return broker


async def _create_topic(addr: str, topic: str, queues: int = 2) -> None:
    async with await WireClient.connect(addr) as client:
        resp = await client.request(RC.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": str(queues),
                                                                 "writeQueueNums": str(queues), "perm": "6"})
        assert resp.code == R.SUCCESS, resp.remark


async def _run_node(node_runtime, broker, script: str, timeout_s: float, **options) -> dict:
    """Run tests/interop/node/<script> with --endpoints and --<option> value...; its JSON summary (ok must be true)."""
    cmd = [node_runtime.node, str(node_runtime.script(script)), "--endpoints", broker.endpoints,
           "--timeout-ms", str(int(timeout_s * 1000))]
    for name, value in options.items():
        cmd += ["--" + name.replace("_", "-"), str(value)]
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=node_runtime.project_dir, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout_s + NODE_GRACE_S)
    except asyncio.TimeoutError:
        proc.kill()
        stdout, stderr = await proc.communicate()
        pytest.fail(f"{script} hung past {timeout_s + NODE_GRACE_S} s\nstdout:\n{stdout.decode()[-2000:]}\n"
                    f"stderr:\n{stderr.decode()[-4000:]}\nbroker log:\n{broker.log_text()[-4000:]}")
    out, err = stdout.decode(), stderr.decode()
    context = (f"{script} exit {proc.returncode}\nstderr:\n{err[-6000:]}\n"
               f"broker log:\n{broker.log_text()[-4000:] or '<empty broker output>'}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"{script} printed no JSON summary\nstdout:\n{out[-2000:]}\n{context}"
    summary = json.loads(lines[-1])
    assert proc.returncode == 0 and summary["ok"], (
        f"{script} failed: {summary.get('failure')}\nsummary: {json.dumps(summary)[:4000]}\n{context}")
    return summary


async def _stored(broker, topic: str, queues: int) -> list:
    async with await WireClient.connect(broker.addr) as client:
        return [r for q in range(queues) for r in await pull_records(client, topic, q)]


# ---- a. Producer -------------------------------------------------------------------------------------------------

async def test_node_producer_sends_and_a_remoting_pull_reads_tags_keys_and_ids(node_runtime, grpc_broker):
    topic, count = "NodeGrpcProduce", 10
    await _create_topic(grpc_broker.addr, topic)
    summary = await _run_node(node_runtime, grpc_broker, "grpc_produce.js", 20, topic=topic, count=count,
                              prefix="np")
    sent = summary["sent"]
    assert len(sent) == count and len({s["messageId"] for s in sent}) == count
    # The SDK's chosen queue only decides the endpoints (and 1.0.8 only ever picks route queue 0: it compares
    # MessageQueue.id with the master broker id); like the reference proxy, the broker picks the queue itself.

    stored = await _stored(grpc_broker, topic, 2)
    by_id = {r.uniq_key: r for r in stored}
    assert set(by_id) == {s["messageId"] for s in sent}, "UNIQ_KEY of each stored message = the id send() returned"
    for i, s in enumerate(sent):
        record = by_id[s["messageId"]]
        assert record.topic == topic and record.body == f"np body {i}".encode()
        assert record.queue_offset == s["offset"], "the receipt's offset is the queue offset the message got"
        assert record.properties["TAGS"] == ("TagA" if i % 2 == 0 else "TagB")
        assert record.properties["KEYS"] == f"np-key-{i} np-alt-{i}"
        assert record.properties["seq"] == str(i) and record.properties["origin"] == "nodejs"
