"""Interop: the official RocketMQ 5.x Node.js SDK (npm rocketmq-client-nodejs 1.0.8) sees the reference's answers
(issue 32): routes advertise each topic's message type (the SDK refuses what the topic does not accept), transaction
ids are message ids, a committed message carries __transactionId__, a FIFO message's __SHARDINGKEY is among its
properties, and an unknown topic or a wrong signature gets the reference's text. Script: node/grpc_fidelity.js."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from tests.support.acl import APP, write_acl
from tests.support.wire import create_topic

pytestmark = pytest.mark.interop


async def _run(node_runtime, broker, home, timeout_s: float = 40, **options) -> dict:
    """grpc_fidelity.js with --endpoints and the options; its JSON summary (ok must be true)."""
    cmd = [node_runtime.node, str(node_runtime.script("grpc_fidelity.js")), "--endpoints", broker.endpoints,
           "--timeout-ms", str(int(timeout_s * 1000))]
    for name, value in options.items():
        cmd += ["--" + name.replace("_", "-"), str(value)]
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=node_runtime.project_dir, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env=dict(os.environ, HOME=str(home), TZ="UTC"))
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout_s + 5)
    except asyncio.TimeoutError:
        proc.kill()
        stdout, stderr = await proc.communicate()
        pytest.fail(f"grpc_fidelity.js hung\n{stderr.decode()[-3000:]}")
    lines = [line for line in stdout.decode().splitlines() if line.startswith("{")]
    context = f"exit {proc.returncode}\nstderr:\n{stderr.decode()[-4000:]}\nbroker log:\n{broker.log_text()[-3000:]}"
    assert lines, f"grpc_fidelity.js printed no JSON summary\n{context}"
    summary = json.loads(lines[-1])
    assert proc.returncode == 0 and summary["ok"], f"{summary.get('failure')}\n{json.dumps(summary)[:3000]}\n{context}"
    return summary


async def test_node_sdk_topic_types_transaction_ids_and_properties(node_runtime, grpc_broker_factory, tmp_path):
    broker = grpc_broker_factory()
    await create_topic(broker.addr, "NodeFidFifo", queues=1, message_type="FIFO")
    await create_topic(broker.addr, "NodeFidPlain", queues=1)  # no type: NORMAL
    await create_topic(broker.addr, "NodeFidTx", queues=1, message_type="TRANSACTION")
    out = await _run(node_runtime, broker, tmp_path, fifo_topic="NodeFidFifo", plain_topic="NodeFidPlain",
                     tx_topic="NodeFidTx", unknown_topic="NodeFidNowhere", group="node_fidelity")
    sends = out["sends"]
    # the route's acceptMessageTypes are the topic's type: the SDK refuses the mismatches itself
    assert "acceptMessageTypes=[2]" in sends["plainToFifo"]["error"], sends  # 2 = FIFO
    assert "acceptMessageTypes=[1]" in sends["fifoToPlain"]["error"], sends  # 1 = NORMAL
    for ok in ("fifoToFifo", "plainToPlain"):
        assert sends[ok]["transactionId"] == sends[ok]["messageId"], sends  # as the reference answers
    assert "No topic route info in name server for the topic: NodeFidNowhere" in sends["unknown"]["error"], sends
    tx = out["transaction"]
    assert tx["transactionId"] == tx["messageId"]
    received = {m["body"]: m for m in out["received"]}
    assert received["grouped"]["messageGroup"] == "g-9"
    assert received["grouped"]["properties"] == {"app": "fidelity", "__SHARDINGKEY": "g-9"}
    assert received["committed"]["messageId"] == tx["messageId"]
    assert received["committed"]["properties"] == {"app": "fidelity", "__transactionId__": tx["messageId"]}


async def test_node_sdk_with_a_wrong_secret_gets_the_reference_text(node_runtime, grpc_broker_factory, tmp_path):
    write_acl(tmp_path / "plain_acl.yml")
    broker = grpc_broker_factory(aclEnable="true")
    out = await _run(node_runtime, broker, tmp_path, mode="signed", plain_topic="Orders", access_key=APP[0],
                     secret_key="not-the-secret")
    assert f"Check signature failed for accessKey={APP[0]}" in out["signed"]["error"], out
