"""Transactional and delayed messages over gRPC, against the real broker process: the official RocketMQ 5.x Python SDK
(rocketmq-python-client, in its own process: it registers the same protobuf package as protocol.grpc) commits, rolls
back and answers the broker's transaction check pushed on its Telemetry stream; a remoting consumer reads what became
visible; raw stubs check EndTransaction's statuses and the delay path."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import grpc

from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb
from protocol.grpc import service_pb2_grpc

from broker.grpc.transactions import transaction_id
from protocol.ids import offset_msg_id, pack_host
from tests.support.wire import WireClient, create_topic, pull_records


METADATA = (("x-mq-client-id", "tx-test@1@1@abc"),)


async def _visible(addr: str, topic: str, queues: int = 2) -> dict:
    """What a remoting consumer pulls from the topic, by UNIQ_KEY."""
    async with await WireClient.connect(addr) as client:
        return {r.uniq_key: r for q in range(queues) for r in await pull_records(client, topic, q, timeout=10)}


async def _wait_visible(addr: str, topic: str, message_id: str, timeout: float) -> int:
    """Poll until the message is pullable; the wall-clock ms at which the first poll that saw it began (so a
    message seen at that poll was not visible much before that time: earlier polls missed it)."""
    deadline = time.monotonic() + timeout
    while True:
        started_ms = int(time.time() * 1000)
        if message_id in await _visible(addr, topic):
            return started_ms
        assert time.monotonic() < deadline, f"{message_id} did not become visible on {topic} within {timeout} s"
        await asyncio.sleep(0.1)


SDK_TRANSACTIONS = """
import json, sys, threading
from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker, TransactionResolution

port, topic, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
checked = threading.Event()
seen = []

class Checker(TransactionChecker):
    def check(self, message):
        seen.append({"topic": message.topic, "body": message.body.decode(), "message_id": message.message_id,
                     "message_type": message.message_type, "tag": message.tag, "keys": sorted(message.keys),
                     "properties": dict(message.properties), "corrupted": message.corrupted})
        checked.set()
        return TransactionResolution.COMMIT if mode == "orphan" else TransactionResolution.ROLLBACK

def message(body):
    m = Message()
    m.topic = topic
    m.body = body.encode()
    m.tag = "TagT"
    m.keys = "order-" + body.split()[0]
    m.add_property("region", "eu")
    return m

producer = Producer(ClientConfiguration(f"127.0.0.1:{port}", Credentials()), (topic,), Checker())
producer.startup()
try:
    if mode == "resolve":
        out = {}
        for body, resolve in (("commit me", "commit"), ("rollback me", "rollback")):
            transaction = producer.begin_transaction()
            receipt = producer.send(message(body), transaction)
            getattr(transaction, resolve)()
            out[resolve] = [receipt.message_id, receipt.transaction_id]
        print("RESULT " + json.dumps(out), flush=True)
    else:  # orphan: send a half message, never resolve it; the broker's check asks the checker
        transaction = producer.begin_transaction()
        receipt = producer.send(message("orphan one"), transaction)
        print("SENT " + json.dumps([receipt.message_id, receipt.transaction_id]), flush=True)
        if not checked.wait(30):
            print("NO CHECK", flush=True)
            sys.exit(3)
        print("CHECKED " + json.dumps(seen[0]), flush=True)
        sys.stdin.readline()  # keep the producer (and its EndTransaction answer) alive until the test has seen it
finally:
    producer.shutdown()
"""


class _Sdk:
    """The SDK script in its own process; lines read with a time limit."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    @classmethod
    async def start(cls, port: int, topic: str, mode: str) -> "_Sdk":
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", SDK_TRANSACTIONS, str(port), topic, mode,
                                                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        return cls(proc)

    async def line(self, prefix: str, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {prefix!r} line from the SDK within {timeout} s: {self.lines[-20:]}"
            raw = await asyncio.wait_for(self.proc.stdout.readline(), remaining)
            if not raw:
                err = (await self.proc.stderr.read()).decode(errors="replace")
                raise AssertionError(f"the SDK process ended without {prefix!r}: {self.lines[-20:]} {err[-3000:]}")
            text = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(text)
            if text.startswith(prefix + " "):
                return json.loads(text[len(prefix) + 1:])

    async def finish(self, timeout: float = 20) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.write(b"done\n")
            await self.proc.stdin.drain()
            self.proc.stdin.close()
        try:
            _, err = await asyncio.wait_for(self.proc.communicate(), timeout)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError("the SDK process did not shut down")
        assert self.proc.returncode == 0, err.decode(errors="replace")[-3000:]


async def test_sdk_transaction_commit_is_visible_and_rollback_never(grpc_broker_factory):
    broker = grpc_broker_factory()
    topic = "GrpcTxOrders"
    await create_topic(broker.addr, topic, message_type="TRANSACTION")
    sdk = await _Sdk.start(broker.grpc_port, topic, "resolve")
    result = await sdk.line("RESULT", 60)
    await sdk.finish()
    committed_id, committed_tx = result["commit"]
    rolled_back_id, rolled_back_tx = result["rollback"]
    # the transaction id is the message id, as the reference's
    assert (committed_tx, rolled_back_tx) == (committed_id, rolled_back_id)
    visible = await _visible(broker.addr, topic)
    assert set(visible) == {committed_id}  # the committed message exactly once, the rolled back one never
    record = visible[committed_id]
    assert record.body == b"commit me" and record.properties["TAGS"] == "TagT"
    assert record.properties["KEYS"] == "order-commit" and record.properties["region"] == "eu"
    assert record.properties["PGROUP"] == topic  # gRPC producers use the topic as producer group
    assert record.properties["__transactionId__"] == committed_id  # written into the half message, kept on commit
    async with await WireClient.connect(broker.addr) as client:  # nothing left open
        resp = await client.request(RC.GET_PENDING_TRANSACTIONS, {})
        assert resp.code == R.SUCCESS, resp.remark
        state = json.loads(resp.body)
        assert state["pending"] == [] and state["counters"]["commits"] == 1 and state["counters"]["rollbacks"] == 1


async def test_an_unresolved_half_message_is_checked_over_telemetry_and_committed(grpc_broker_factory):
    broker = grpc_broker_factory(transactionCheckInterval=500, transactionTimeOut=1000)
    topic = "GrpcTxOrphans"
    await create_topic(broker.addr, topic, message_type="TRANSACTION")
    sdk = await _Sdk.start(broker.grpc_port, topic, "orphan")
    try:
        message_id, _ = await sdk.line("SENT", 60)
        assert message_id not in await _visible(broker.addr, topic)  # a half message: invisible
        seen = await sdk.line("CHECKED", 30)
        # the message in RecoverOrphanedTransactionCommand, as the SDK's checker got it: the application's
        # properties and what the reference's system set does not hide (the transaction id, the check count)
        assert seen == {"topic": topic, "body": "orphan one", "message_id": message_id, "message_type": pb.TRANSACTION,
                        "tag": "TagT", "keys": ["order-orphan"], "corrupted": False,
                        "properties": {"region": "eu", "__transactionId__": message_id,
                                       "TRANSACTION_CHECK_TIMES": "1"}}
        await _wait_visible(broker.addr, topic, message_id, 15)  # the checker's COMMIT (SOURCE_SERVER_CHECK)
    finally:
        await sdk.finish()
    visible = await _visible(broker.addr, topic)
    assert list(visible) == [message_id] and visible[message_id].body == b"orphan one"


def _message(topic: str, message_id: str, message_type: int, body: bytes = b"half", **system) -> pb.Message:
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(
        message_id=message_id, message_type=message_type, body_encoding=pb.IDENTITY, **system))


async def test_end_transaction_statuses(grpc_broker_factory):
    broker = grpc_broker_factory()
    topic, other = "GrpcTxRaw", "GrpcTxOther"
    await create_topic(broker.addr, topic, message_type="TRANSACTION")
    await create_topic(broker.addr, other, message_type="TRANSACTION")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)

        async def end(message_id: str, tx: str, resolution=pb.COMMIT, on: str = topic) -> pb.Status:
            response = await stub.EndTransaction(spb.EndTransactionRequest(
                topic=pb.Resource(name=on), message_id=message_id, transaction_id=tx, resolution=resolution,
                source=pb.SOURCE_CLIENT), metadata=METADATA, timeout=10)
            return response.status

        route = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=METADATA,
                                      timeout=10)
        assert list(route.message_queues[0].accept_message_types) == [pb.TRANSACTION]
        sent = await stub.SendMessage(spb.SendMessageRequest(messages=[_message(topic, "TX-RAW-1", pb.TRANSACTION)]),
                                      metadata=METADATA, timeout=10)
        entry = sent.entries[0]
        assert sent.status.code == pb.OK and entry.status.code == pb.OK and entry.message_id == "TX-RAW-1"
        tx = entry.transaction_id
        assert tx == "TX-RAW-1"  # the message id, as the reference answers
        assert "TX-RAW-1" not in await _visible(broker.addr, topic)

        empty = await end("TX-RAW-1", "")
        assert empty.code == pb.INVALID_TRANSACTION_ID and "empty" in empty.message
        garbage = await end("TX-RAW-1", "not-a-transaction")
        assert garbage.code == pb.INVALID_TRANSACTION_ID and "not-a-transaction" in garbage.message
        # an id of the older form (offset message id + half-queue offset) naming no half message
        unknown_offset = transaction_id(offset_msg_id(pack_host("127.0.0.1", 10911), 10**12), 0)
        unknown = await end("TX-RAW-1", unknown_offset)
        assert unknown.code == pb.INVALID_TRANSACTION_ID and "no half message" in unknown.message
        wrong_message = await end("TX-RAW-2", tx)
        assert wrong_message.code == pb.INVALID_TRANSACTION_ID and "TX-RAW-1" in wrong_message.message
        wrong_topic = await end("TX-RAW-1", tx, on=other)
        assert wrong_topic.code == pb.INVALID_TRANSACTION_ID and topic in wrong_topic.message
        bad_topic = await end("TX-RAW-1", tx, on="bad topic!")
        assert bad_topic.code == pb.ILLEGAL_TOPIC
        assert "TX-RAW-1" not in await _visible(broker.addr, topic)  # none of these changed anything

        committed = await end("TX-RAW-1", tx)
        assert committed.code == pb.OK, committed.message
        assert list(await _visible(broker.addr, topic)) == ["TX-RAW-1"]
        again = await end("TX-RAW-1", tx, resolution=pb.ROLLBACK)  # decided: the id names nothing open now
        assert again.code == pb.INVALID_TRANSACTION_ID and "no open transaction" in again.message
        assert list(await _visible(broker.addr, topic)) == ["TX-RAW-1"]
