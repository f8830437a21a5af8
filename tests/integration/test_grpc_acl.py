"""The gRPC endpoint with aclEnable=true, against the real broker process over loopback: each attack of issue 27 on
it is refused, and the allowed account's call still works.

* signatures expire: x-mq-date-time must be a time within aclTimeToleranceSeconds of the broker's clock;
* NotifyClientTermination is authenticated and ends only the caller's own session;
* every RPC is decided by the broker's one Authorizer on what its request names (PUB-only accounts cannot
  receive, a DENY topic cannot be sent to, published to on Telemetry or ended/recalled);
* a receipt handle reaches only the record it was given for (a forged commit-log offset copies nothing).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time

import grpc
import pytest

from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb
from protocol.grpc import service_pb2_grpc
from protocol.ids import decode_offset_msg_id
from protocol.message import iter_records

from tests.support.acl import signed as signed_remoting
from tests.support.grpc_pop import FAST, Pop, ms
from tests.support.wire import WireClient, props, pull_fields, send_v2_fields

ACL_YAML = """
accounts:
  - accessKey: grpc_admin
    secretKey: grpc-admin-secret
    admin: true
  - accessKey: shop_ak
    secretKey: shop-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Orders=PUB|SUB
      - Secrets=DENY
      - "%DLQ%shop=SUB"
    groupPerms:
      - shop=SUB
  - accessKey: writer_ak
    secretKey: writer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Events=PUB
  - accessKey: other_ak
    secretKey: other-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Orders=PUB|SUB
    groupPerms:
      - shop=SUB
"""
ADMIN = ("grpc_admin", "grpc-admin-secret")
SHOP = ("shop_ak", "shop-secret")
WRITER = ("writer_ak", "writer-secret")
OTHER = ("other_ak", "other-secret")
TOLERANCE_S = 60
DATE = "%Y%m%dT%H%M%SZ"


def meta(creds: tuple[str, str] | None, client_id: str = "acl-test@1@1@abc", *, date: str | None = None) -> tuple:
    """What a 5.x SDK sends: the client id and, with credentials, HMAC-SHA1(secret, x-mq-date-time)."""
    if creds is None:
        return (("x-mq-client-id", client_id),)
    date = date if date is not None else time.strftime(DATE, time.gmtime())
    signature = hmac.new(creds[1].encode(), date.encode(), hashlib.sha1).hexdigest()
    return (("x-mq-client-id", client_id), ("x-mq-date-time", date),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={creds[0]}, SignedHeaders=x-mq-date-time, "
                              f"Signature={signature}"))


def ago(seconds: float) -> str:
    return time.strftime(DATE, time.gmtime(time.time() - seconds))


def message(topic: str, mid: str, body: bytes = b"signed") -> pb.Message:
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(message_id=mid))


@pytest.fixture
def acl_grpc(grpc_broker_factory, tmp_path):
    (tmp_path / "plain_acl.yml").write_text(ACL_YAML)
    return grpc_broker_factory(aclEnable="true", aclTimeToleranceSeconds=TOLERANCE_S, **FAST)


@pytest.fixture
async def stub(acl_grpc):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{acl_grpc.grpc_port}") as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


async def admin_setup(addr: str, *topics: str) -> None:
    async with await WireClient.connect(addr) as client:
        for topic in topics:
            resp = await signed_remoting(client, RC.UPDATE_AND_CREATE_TOPIC, {
                "topic": topic, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}, creds=ADMIN)
            assert resp.code == R.SUCCESS, resp.remark


async def stored(addr: str, topic: str) -> list[bytes]:
    """The bodies of queue 0 of ``topic``, read by the admin over remoting ([] when the topic does not exist)."""
    async with await WireClient.connect(addr) as client:
        resp = await signed_remoting(client, RC.PULL_MESSAGE, pull_fields(topic, "auditors", 0, 0, suspend_ms=0),
                                     creds=ADMIN)
    if resp.code in (R.PULL_NOT_FOUND, R.TOPIC_NOT_EXIST, R.PULL_OFFSET_MOVED):
        return []
    assert resp.code == R.SUCCESS, (resp.code, resp.remark)
    return [r.body for r in iter_records(resp.body)]


async def telemetry(stub, metadata: tuple, settings: pb.Settings) -> pb.Status:
    """Open Telemetry, send one Settings command, return the answer's status (and end the stream)."""
    call = stub.Telemetry(metadata=metadata, timeout=10)
    await call.write(spb.TelemetryCommand(settings=settings))
    answer = await call.read()
    await call.done_writing()
    while await call.read() is not grpc.aio.EOF:
        pass
    return answer.status


PRODUCER = lambda topic: pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(  # noqa: E731
    topics=[pb.Resource(name=topic)]))


# ---- signatures expire ------------------------------------------------------------------------------------------
async def test_a_signature_expires_and_its_date_must_be_a_time(acl_grpc, stub):
    """A correctly signed call is taken within aclTimeToleranceSeconds (60 here) of the broker's clock only; a
    replayed capture from 2001, one from the future and a date that is not a time are refused, and store nothing."""
    await admin_setup(acl_grpc.addr, "Orders")
    cases = [("now", time.strftime(DATE, time.gmtime()), pb.OK, ""),
             ("30 s old", ago(30), pb.OK, ""),
             ("5 min old", ago(300), pb.UNAUTHORIZED, "aclTimeToleranceSeconds=60"),
             ("5 min ahead", ago(-300), pb.UNAUTHORIZED, "aclTimeToleranceSeconds=60"),
             ("2001", "20010909T014640Z", pb.UNAUTHORIZED, "aclTimeToleranceSeconds=60"),
             ("garbage", "x", pb.UNAUTHORIZED, "not a time"),
             ("empty", "", pb.UNAUTHORIZED, "not a time")]
    for i, (name, date, code, text) in enumerate(cases):
        sent = await stub.SendMessage(spb.SendMessageRequest(messages=[message("Orders", f"T{i}", name.encode())]),
                                      metadata=meta(SHOP, date=date), timeout=10)
        assert sent.status.code == code and text in sent.status.message, (name, sent.status)
        route = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="Orders")),
                                      metadata=meta(SHOP, date=date), timeout=10)
        assert route.status.code == code, (name, route.status)
    assert await stored(acl_grpc.addr, "Orders") == [b"now", b"30 s old"]


# ---- sessions -----------------------------------------------------------------------------------------------
async def test_notify_client_termination_ends_only_the_callers_own_session(acl_grpc, stub):
    """Before: an anonymous NotifyClientTermination naming a client id dropped that client's settings and released
    its auto-renewed deliveries (redelivered to others at once). Now it needs a signature, and the account that has
    been using the client id."""
    await admin_setup(acl_grpc.addr, "Orders")
    victim = "victim-host@42@1@k1"
    shop = meta(SHOP, victim)
    sent = await stub.SendMessage(spb.SendMessageRequest(messages=[message("Orders", "HELD", b"held")]),
                                  metadata=meta(SHOP), timeout=10)
    assert sent.status.code == pb.OK, sent.status
    consumer = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(group=pb.Resource(
        name="shop"), subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="Orders"))]))
    assert (await telemetry(stub, shop, consumer)).code == pb.OK
    pop = Pop(acl_grpc.grpc_port, group="shop", topic="Orders", metadata=shop)
    try:
        state, held = await pop.receive(auto_renew=True)
        assert state.code == pb.OK and [m.body for m in held] == [b"held"]
        beat = spb.HeartbeatRequest(group=pb.Resource(name="shop"), client_type=pb.SIMPLE_CONSUMER)
        ending = spb.NotifyClientTerminationRequest(group=pb.Resource(name="shop"))
        for who, metadata, text in [("anonymous", meta(None, victim), "No accessKey"),
                                    ("a stale signature", meta(SHOP, victim, date=ago(3600)), "expired"),
                                    ("another account", meta(OTHER, victim), "belongs to another account")]:
            refused = await stub.NotifyClientTermination(ending, metadata=metadata, timeout=10)
            assert refused.status.code == pb.UNAUTHORIZED and text in refused.status.message, (who, refused.status)
        # nor can another account take the session over (re-register its settings, keep it alive)
        hijack = await stub.Heartbeat(beat, metadata=meta(OTHER, victim), timeout=10)
        assert hijack.status.code == pb.UNAUTHORIZED and "another account" in hijack.status.message
        assert (await telemetry(stub, meta(OTHER, victim), consumer)).code == pb.UNAUTHORIZED
        # the victim's session is intact: its settings are known and its delivery stays invisible
        assert (await stub.Heartbeat(beat, metadata=shop, timeout=10)).status.code == pb.OK
        other_consumer = Pop(acl_grpc.grpc_port, group="shop", topic="Orders", metadata=meta(SHOP, "bystander@1"))
        try:
            state, again = await other_consumer.receive(poll_ms=1500)
            assert state.code == pb.MESSAGE_NOT_FOUND and not again, (state, again)
            # control: the owner ends its own session; its delivery is released and comes back
            ended = await stub.NotifyClientTermination(ending, metadata=shop, timeout=10)
            assert ended.status.code == pb.OK, ended.status
            assert (await stub.Heartbeat(beat, metadata=shop, timeout=10)).status.code == \
                pb.UNRECOGNIZED_CLIENT_TYPE
            back: list[pb.Message] = []
            deadline = time.monotonic() + 15
            while not back and time.monotonic() < deadline:
                back = (await other_consumer.receive(poll_ms=500))[1]
            assert [m.body for m in back] == [b"held"]
        finally:
            await other_consumer.close()
    finally:
        await pop.close()


# ---- resources ------------------------------------------------------------------------------------------------
async def test_a_pub_only_account_cannot_consume(acl_grpc, stub):
    await admin_setup(acl_grpc.addr, "Events")
    writer = meta(WRITER)
    sent = await stub.SendMessage(spb.SendMessageRequest(messages=[message("Events", "E1", b"event")]),
                                  metadata=writer, timeout=10)
    assert sent.status.code == pb.OK, sent.status  # control: it may publish
    topic, group = pb.Resource(name="Events"), pb.Resource(name="writers")
    pop = Pop(acl_grpc.grpc_port, group="writers", topic="Events", metadata=writer)
    try:
        state, found = await pop.receive(invisible_ms=5000)
        assert state.code == pb.UNAUTHORIZED and "No SUB permission for topic:Events" in state.message
        assert not found
    finally:
        await pop.close()
    handle = "0 0 60000 0 0 broker-a 0 0 0"
    calls = [
        stub.QueryAssignment(spb.QueryAssignmentRequest(topic=topic, group=group), metadata=writer, timeout=10),
        stub.AckMessage(spb.AckMessageRequest(topic=topic, group=group, entries=[spb.AckMessageEntry(
            message_id="E1", receipt_handle=handle)]), metadata=writer, timeout=10),
        stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
            topic=topic, group=group, receipt_handle=handle, invisible_duration=ms(0), message_id="E1"),
            metadata=writer, timeout=10),
        stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
            topic=topic, group=group, receipt_handle=handle, message_id="E1"), metadata=writer, timeout=10),
    ]
    for answer in await asyncio.gather(*calls):
        assert answer.status.code == pb.UNAUTHORIZED and "SUB permission for topic:Events" in answer.status.message
    subscriber = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=group, subscriptions=[pb.SubscriptionEntry(topic=topic)]))
    assert (await telemetry(stub, writer, subscriber)).code == pb.UNAUTHORIZED
    auditor = Pop(acl_grpc.grpc_port, group="auditors", topic="Events", metadata=meta(ADMIN, "auditor@1"))
    try:  # control: the message is there for an account that may read it
        assert [m.body for m in (await auditor.receive(invisible_ms=5000))[1]] == [b"event"]
    finally:
        await auditor.close()


async def test_a_denied_topic_is_refused_on_every_rpc_that_names_it(acl_grpc, stub):
    await admin_setup(acl_grpc.addr, "Orders", "Secrets")
    shop = meta(SHOP)
    secrets, orders = pb.Resource(name="Secrets"), pb.Resource(name="Orders")
    sent = await stub.SendMessage(spb.SendMessageRequest(messages=[message("Secrets", "S1")]), metadata=shop,
                                  timeout=10)
    assert sent.status.code == pb.UNAUTHORIZED and "No PUB permission for topic:Secrets" in sent.status.message
    # a producer's Telemetry settings name the topics whose transaction checks (half messages) it is sent
    assert (await telemetry(stub, shop, PRODUCER("Secrets"))).code == pb.UNAUTHORIZED
    assert (await telemetry(stub, meta(SHOP, "producer@2"), PRODUCER("Orders"))).code == pb.OK  # control
    answers = await asyncio.gather(
        stub.QueryRoute(spb.QueryRouteRequest(topic=secrets), metadata=shop, timeout=10),
        stub.EndTransaction(spb.EndTransactionRequest(topic=secrets, message_id="S1", transaction_id="00",
                                                      resolution=pb.COMMIT), metadata=shop, timeout=10),
        stub.RecallMessage(spb.RecallMessageRequest(topic=secrets, recall_handle="x S1"), metadata=shop, timeout=10),
        # a retry topic is its group's resource: %RETRY%billing needs SUB on group billing
        stub.SendMessage(spb.SendMessageRequest(messages=[message("%RETRY%billing", "S2")]), metadata=shop,
                         timeout=10),
        stub.Heartbeat(spb.HeartbeatRequest(group=pb.Resource(name="billing"), client_type=pb.SIMPLE_CONSUMER),
                       metadata=shop, timeout=10),
    )
    for answer in answers:
        assert answer.status.code == pb.UNAUTHORIZED, answer.status
    assert "group:billing" in answers[3].status.message and "group:billing" in answers[4].status.message
    route = await stub.QueryRoute(spb.QueryRouteRequest(topic=orders), metadata=shop, timeout=10)
    assert route.status.code == pb.OK and route.message_queues  # control
    sent = await stub.SendMessage(spb.SendMessageRequest(messages=[message("Orders", "O1")]), metadata=shop,
                                  timeout=10)
    assert sent.status.code == pb.OK  # control
    assert await stored(acl_grpc.addr, "Secrets") == []


# ---- receipt handles ------------------------------------------------------------------------------------------
async def test_a_forged_receipt_handle_reaches_no_other_topics_record(acl_grpc, stub):
    """A receipt handle ends with the message's commit-log offset. Before: ForwardMessageToDeadLetterQueue copied
    whatever record that offset named into the caller's %DLQ%<group> (a secret topic's body, readable there). Now a
    handle counts only for the record the group popped at the queue offset it names."""
    await admin_setup(acl_grpc.addr, "Orders", "Secrets")
    async with await WireClient.connect(acl_grpc.addr) as client:
        resp = await signed_remoting(client, RC.SEND_MESSAGE_V2, send_v2_fields("Secrets", 0, props(UNIQ_KEY="SEC1")),
                                     b"the payroll", creds=ADMIN)
        assert resp.code == R.SUCCESS, resp.remark
    secret_offset = decode_offset_msg_id(resp.ext_fields["msgId"])[2]
    shop = meta(SHOP, "shop-consumer@1")
    sent = await stub.SendMessage(spb.SendMessageRequest(messages=[message("Orders", "O1", b"an order")]),
                                  metadata=shop, timeout=10)
    assert sent.status.code == pb.OK
    pop = Pop(acl_grpc.grpc_port, group="shop", topic="Orders", metadata=shop)
    try:
        state, got = await pop.receive(invisible_ms=20_000)
        assert state.code == pb.OK and [m.body for m in got] == [b"an order"]
        handle = got[0].system_properties.receipt_handle
        parts = handle.split(" ")
        assert int(parts[-1]) != secret_offset
        forged = " ".join(parts[:-1] + [str(secret_offset)])
        forward = lambda h: pop.stub.ForwardMessageToDeadLetterQueue(  # noqa: E731
            spb.ForwardMessageToDeadLetterQueueRequest(group=pb.Resource(name="shop"), topic=pb.Resource(
                name="Orders"), receipt_handle=h, message_id="O1", delivery_attempt=1, max_delivery_attempts=16),
            metadata=shop, timeout=10)
        refused = await forward(forged)
        assert refused.status.code == pb.INVALID_RECEIPT_HANDLE, refused.status
        changed = await pop.change(got[0], 0, handle=forged)
        assert changed.status.code == pb.INVALID_RECEIPT_HANDLE, changed.status
        assert (await pop.ack(got[0], handle=forged)).code == pb.INVALID_RECEIPT_HANDLE
        assert await stored(acl_grpc.addr, "%DLQ%shop") == []
        # control: the genuine handle still names the delivery (the forgeries changed nothing)
        done = await forward(handle)
        assert done.status.code == pb.OK, done.status
        assert await stored(acl_grpc.addr, "%DLQ%shop") == [b"an order"]
    finally:
        await pop.close()


# ---- the official SDK signs within the tolerance ------------------------------------------------------------
SDK_SIGNED = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

port, ak, sk = int(sys.argv[1]), sys.argv[2], sys.argv[3]
config = lambda: ClientConfiguration(f"127.0.0.1:{port}", Credentials(ak, sk), request_timeout=5)
out = {"sent": [], "received": [], "error": None}
producer = Producer(config(), ("Orders",))
try:
    producer.startup()
    for i in range(3):
        message = Message()
        message.topic, message.body, message.tag = "Orders", f"sdk {i}".encode(), "TagA"
        out["sent"].append(producer.send(message).message_id)
    consumer = SimpleConsumer(config(), "shop", {"Orders": FilterExpression("*")}, await_duration=1)
    consumer.startup()
    deadline = time.monotonic() + 30
    while len(out["received"]) < 3 and time.monotonic() < deadline:
        for m in consumer.receive(16, 15):
            out["received"].append(m.body.decode())
            consumer.ack(m)
    consumer.shutdown()
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
finally:
    producer.shutdown()
print("OUT " + json.dumps(out), flush=True)
"""


def _run_signed_sdk(port: int, creds: tuple[str, str]) -> dict:
    import json
    import os
    import subprocess
    import sys

    # the 5.x Python SDK writes x-mq-date-time from local time with a 'Z': it must run in UTC (README, Security)
    env = dict(os.environ, TZ="UTC")
    proc = subprocess.run([sys.executable, "-c", SDK_SIGNED, str(port), *creds], capture_output=True, text=True,
                          timeout=120, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("OUT ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(line[4:])


async def test_the_python_sdk_with_credentials_sends_and_receives(acl_grpc):
    """Control: the official 5.x SDK's signatures (fresh x-mq-date-time per call) pass the timed check, for
    producing, Telemetry settings, heartbeats, receiving, acking and ending its sessions; a wrong secret does not."""
    await admin_setup(acl_grpc.addr, "Orders")
    out = await asyncio.to_thread(_run_signed_sdk, acl_grpc.grpc_port, SHOP)
    assert out["error"] is None, out
    assert len(out["sent"]) == 3 and sorted(out["received"]) == ["sdk 0", "sdk 1", "sdk 2"]
    refused = await asyncio.to_thread(_run_signed_sdk, acl_grpc.grpc_port, (SHOP[0], "not-the-secret"))
    assert refused["sent"] == [] and refused["error"], refused
