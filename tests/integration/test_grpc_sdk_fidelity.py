"""What the official RocketMQ 5.x Python SDK (PyPI rocketmq-python-client) checks, answered as the reference answers
(issue 32): topic message types (the route's accept_message_types, the server's refusal of a mismatched send, the
enableTopicMessageTypeCheck switch), transaction ids (= message ids) and __transactionId__, user properties filtered
by exactly the reference's system set, the closing delivery_timestamp of a long poll, and the reference's remarks
for an unknown topic and a wrong signature. Each SDK script runs in its own process (tests.support.grpc_pop.run_sdk)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import grpc

from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb
from protocol.grpc import service_pb2_grpc

from tests.support.acl import APP, signed, write_acl
from tests.support.grpc_pop import run_sdk
from tests.support.wire import WireClient, create_topic, props, send_v2_fields

CLIENT = (("x-mq-client-id", "fidelity@1@1@abc"),)

SDK_TYPES = """
import json, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer

port, fifo, normal = int(sys.argv[1]), sys.argv[2], sys.argv[3]
import logging
class Keep(logging.Handler):  # what the SDK logs (it logs a failed call's status message rather than raise it)
    lines = []
    def emit(self, record):
        Keep.lines.append(record.getMessage())
logging.getLogger("rocketmq-python-client").addHandler(Keep())
out = {}
def message(topic, body, group=None):
    m = Message()
    m.topic, m.body = topic, body.encode()
    if group:
        m.message_group = group
    return m
producer = Producer(ClientConfiguration(f"127.0.0.1:{port}", Credentials()), (fifo, normal))
producer.startup()
if len(sys.argv) > 4:  # the server's Settings reach the SDK asynchronously: wait (bounded) for its validation flag
    import time
    wanted, deadline = sys.argv[4] == "true", time.monotonic() + 10
    while producer._Producer__validate_message_type != wanted and time.monotonic() < deadline:
        time.sleep(0.05)
try:
    for name, m in (("plain_to_fifo", message(fifo, "plain")), ("fifo_to_fifo", message(fifo, "grouped", "g1")),
                    ("fifo_to_normal", message(normal, "grouped", "g1")), ("plain_to_normal", message(normal, "p"))):
        try:
            receipt = producer.send(m)
            out[name] = {"message_id": receipt.message_id, "transaction_id": receipt.transaction_id}
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        producer.send(message("NoSuchTopicForSdk", "x"))
        out["unknown"] = None
    except Exception as exc:
        out["unknown"] = f"{type(exc).__name__}: {exc} " + " | ".join(Keep.lines)
finally:
    producer.shutdown()
print("RESULT " + json.dumps(out), flush=True)
"""


async def test_topic_message_types_as_the_sdk_sees_them(grpc_broker_factory):
    broker = grpc_broker_factory()
    await create_topic(broker.addr, "SdkFifo", message_type="FIFO")
    await create_topic(broker.addr, "SdkPlain")  # created without a type: NORMAL, as the reference treats it
    out = await asyncio.to_thread(run_sdk, SDK_TYPES, broker.grpc_port, "SdkFifo", "SdkPlain")
    # the route advertises each topic's type: the SDK itself refuses what the topic does not accept
    assert "accept message types" in out["plain_to_fifo"]["error"] and "FIFO" in out["plain_to_fifo"]["error"]
    assert "accept message types" in out["fifo_to_normal"]["error"]
    for ok in ("fifo_to_fifo", "plain_to_normal"):
        # a normal send's transaction_id is its message id, as the reference's
        assert out[ok]["transaction_id"] == out[ok]["message_id"], out
    assert "No topic route info in name server for the topic: NoSuchTopicForSdk" in out["unknown"], out
    # the server refuses a mismatch too (an SDK that does not check), with the reference's status and text
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        route = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="SdkFifo")), metadata=CLIENT,
                                      timeout=10)
        assert {tuple(q.accept_message_types) for q in route.message_queues} == {(pb.FIFO,)}
        sent = await stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name="SdkFifo"), body=b"plain",
            system_properties=pb.SystemProperties(message_id="RAW1", message_type=pb.NORMAL))]),
            metadata=CLIENT, timeout=10)
        assert sent.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        assert sent.status.message == ("TopicMessageType validate failed, the expected type is FIFO, "
                                       "but actual type is NORMAL")
    async with await WireClient.connect(broker.addr) as client:  # remoting: MESSAGE_ILLEGAL, the same text
        plain = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("SdkFifo", 0, props(UNIQ_KEY="RAW2")), b"x")
        assert plain.code == R.MESSAGE_ILLEGAL and "the expected type is FIFO" in plain.remark
        grouped = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(
            "SdkFifo", 0, props(UNIQ_KEY="RAW3", __SHARDINGKEY="g")), b"x")
        assert grouped.code == R.SUCCESS, grouped.remark
        # a topic without a type takes what 4.x producers send over remoting, as before types existed
        delayed = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(
            "SdkPlain", 0, props(UNIQ_KEY="RAW4", DELAY="1")), b"x")
        assert delayed.code == R.SUCCESS, delayed.remark


async def test_with_the_check_off_the_sdk_is_told_not_to_validate(grpc_broker_factory):
    broker = grpc_broker_factory(enableTopicMessageTypeCheck="false")
    await create_topic(broker.addr, "SdkFifo", message_type="FIFO")
    await create_topic(broker.addr, "SdkPlain")
    out = await asyncio.to_thread(run_sdk, SDK_TYPES, broker.grpc_port, "SdkFifo", "SdkPlain", "false")
    # Settings.publishing.validate_message_type = false: the SDK sends anything, and the broker takes it
    assert all("message_id" in out[k] for k in ("plain_to_fifo", "fifo_to_fifo", "fifo_to_normal")), out


SDK_ROUND_TRIP = """
import json, sys, threading, time
from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer,
                      TransactionChecker, TransactionResolution)

port, fifo, tx, late, group = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
config = lambda: ClientConfiguration(f"127.0.0.1:{port}", Credentials())
out = {}

class Checker(TransactionChecker):
    def check(self, message):
        return TransactionResolution.COMMIT

def message(topic, body, group=None):
    m = Message()
    m.topic, m.body = topic, body.encode()
    m.add_property("app", "fidelity")
    if group:
        m.message_group = group
    return m

producer = Producer(config(), (fifo, tx, late), Checker())
producer.startup()
consumer = SimpleConsumer(config(), group, {fifo: FilterExpression("*"), tx: FilterExpression("*"),
                                            late: FilterExpression("*")}, await_duration=5)
consumer.startup()
try:
    r = producer.send(message(fifo, "in a group", "g-7"))
    out["fifo"] = [r.message_id, r.transaction_id]
    transaction = producer.begin_transaction()
    r = producer.send(message(tx, "committed"), transaction)
    transaction.commit()
    out["tx"] = [r.message_id, r.transaction_id]
    got = {}
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        for m in consumer.receive(16, 30):
            got[m.body.decode()] = {"message_id": m.message_id, "properties": dict(m.properties),
                                    "message_group": m.message_group}
            consumer.ack(m)
    out["received"] = got
    # a long poll that a send ends: the closing delivery_timestamp is the time the answer was complete
    sent = {}
    def send_later():
        time.sleep(1.5)
        sent["ms"] = int(time.time() * 1000)
        sent["id"] = producer.send(message(late, "late")).message_id
    threading.Thread(target=send_later).start()
    started = int(time.time() * 1000)
    polled = []
    while not polled and time.monotonic() < deadline:
        polled = consumer.receive(1, 30)
    out["late"] = {"started_ms": started, "sent_ms": sent.get("ms"), "sent_id": sent.get("id"),
                   "got_id": polled[0].message_id if polled else None,
                   "delivery_ms": polled[0].transport_delivery_timestamp if polled else None}
    for m in polled:
        consumer.ack(m)
finally:
    consumer.shutdown()
    producer.shutdown()
print("RESULT " + json.dumps(out), flush=True)
"""


async def test_transaction_ids_properties_and_the_closing_timestamp_as_the_sdk_sees_them(grpc_broker_factory):
    broker = grpc_broker_factory()
    await create_topic(broker.addr, "SdkRtFifo", message_type="FIFO")
    await create_topic(broker.addr, "SdkRtTx", message_type="TRANSACTION")
    await create_topic(broker.addr, "SdkRtLate")
    out = await asyncio.to_thread(run_sdk, SDK_ROUND_TRIP, broker.grpc_port, "SdkRtFifo", "SdkRtTx", "SdkRtLate",
                                  "sdk_fidelity", timeout=120)
    fifo_id, fifo_tx = out["fifo"]
    tx_id, tx_tx = out["tx"]
    assert fifo_tx == fifo_id and tx_tx == tx_id  # transaction ids are message ids, as the reference's
    grouped, committed = out["received"]["in a group"], out["received"]["committed"]
    # user properties: the application's and what the reference's system set does not hide
    assert grouped["message_group"] == "g-7"
    assert grouped["properties"] == {"app": "fidelity", "__SHARDINGKEY": "g-7"}, grouped
    assert committed["message_id"] == tx_id
    assert committed["properties"]["__transactionId__"] == tx_id, committed  # written into the half message
    assert committed["properties"]["app"] == "fidelity"
    late = out["late"]
    assert late["got_id"] == late["sent_id"], late
    # stamped when the answer was complete (after the send that ended the poll), not when the call arrived
    assert late["delivery_ms"] >= late["sent_ms"] - 50 > late["started_ms"] + 1000, late


async def test_a_wrong_signature_gets_the_reference_text(grpc_broker_factory, tmp_path):
    write_acl(tmp_path / "plain_acl.yml")
    broker = grpc_broker_factory(aclEnable="true")
    script = """
import json, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer
port, ak, sk = int(sys.argv[1]), sys.argv[2], sys.argv[3]
import logging
class Keep(logging.Handler):  # what the SDK logs (it logs a failed call's status message rather than raise it)
    lines = []
    def emit(self, record):
        Keep.lines.append(record.getMessage())
logging.getLogger("rocketmq-python-client").addHandler(Keep())
producer = Producer(ClientConfiguration(f"127.0.0.1:{port}", Credentials(ak, sk), request_timeout=5), ("Orders",))
error = None
try:
    producer.startup()
    m = Message()
    m.topic, m.body = "Orders", b"x"
    producer.send(m)
except Exception as exc:
    error = f"{type(exc).__name__}: {exc} " + " | ".join(Keep.lines)
finally:
    producer.shutdown()
print("RESULT " + json.dumps(error), flush=True)
"""
    env = dict(os.environ, TZ="UTC")  # the SDK signs local time with a 'Z'
    proc = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", script, str(broker.grpc_port), APP[0],
                                                    "not-the-secret"], capture_output=True, text=True, timeout=120,
                                   env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-3000:]
    error = json.loads(line[len("RESULT "):])
    assert error and f"Check signature failed for accessKey={APP[0]}" in error, error
    # remoting: the same text (in the reference broker's AclException remark)
    async with await WireClient.connect(broker.addr) as client:
        refused = await signed(client, RC.GET_MAX_OFFSET, {"topic": "Orders", "queueId": "0"},
                               creds=(APP[0], "not-the-secret"))
        assert refused.code == R.SYSTEM_ERROR and f"Check signature failed for accessKey={APP[0]}" in refused.remark

