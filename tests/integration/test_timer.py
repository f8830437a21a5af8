"""5.x timed messages against the real broker process: TIMER_DELIVER_MS / TIMER_DELAY_SEC from remoting producers and
delivery_timestamp from gRPC ones wait in rmq_sys_wheel_timer and reach their topic at their own time (not at a
classic delay level), in time order; RecallMessage cancels one; a kill -9 neither loses nor repeats them."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from google.protobuf import timestamp_pb2

from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb
from protocol.grpc import service_pb2_grpc
from protocol.recall import build_recall_handle

from tests.support.grpc_pop import Pop, collect, run_sdk
from tests.support.wire import WireClient, create_topic, props, pull_records, send_v2_fields

TOPIC = "Timed"
CLIENT = (("x-mq-client-id", "timer-test@1@1@abc"),)


def timer_broker(grpc_broker_factory, **extra):
    return grpc_broker_factory(timerMaxDelaySec=600, minInvisibleTimeMillsForRecv=500,
                             grpcClientConsumerMinLongPollingTimeoutMillis=100, recallMessageEnable="true", **extra)


async def send_timed(addr: str, uniq: str, **timer: str) -> object:
    async with await WireClient.connect(addr) as client:
        return await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(TOPIC, 0, props(UNIQ_KEY=uniq, **timer)),
                                    uniq.encode())


async def arrivals(addr: str, want: set[str], timeout: float) -> dict[str, int]:
    """Poll the topic until every id in `want` arrived: id -> wall-clock ms of the first poll that saw it."""
    seen: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    async with await WireClient.connect(addr) as client:
        while not want <= seen.keys() and time.monotonic() < deadline:
            started = int(time.time() * 1000)
            for record in await pull_records(client, TOPIC, 0):
                seen.setdefault(record.uniq_key, started)
            await asyncio.sleep(0.05)
    return seen


async def test_timed_messages_arrive_at_their_own_time_in_time_order(grpc_broker_factory):
    broker = timer_broker(grpc_broker_factory)
    await create_topic(broker.addr, TOPIC, queues=1)
    now = int(time.time() * 1000)
    sent = {"LATE": now + 2300, "EARLY": now + 900}  # stored late-first, due early-first
    assert (await send_timed(broker.addr, "LATE", TIMER_DELIVER_MS=str(sent["LATE"]))).code == R.SUCCESS
    assert (await send_timed(broker.addr, "EARLY", TIMER_DELAY_SEC="1")).code == R.SUCCESS
    assert (await send_timed(broker.addr, "NOW", TIMER_DELIVER_MS=str(now - 5))).code == R.SUCCESS  # due: at once
    seen = await arrivals(broker.addr, {"LATE", "EARLY", "NOW"}, 10)
    assert seen["NOW"] < now + 800
    assert sent["EARLY"] <= seen["EARLY"] + 60 < sent["EARLY"] + 1000  # not a delay level (the first is 1 s)
    assert sent["LATE"] <= seen["LATE"] + 60 < sent["LATE"] + 1000
    async with await WireClient.connect(broker.addr) as client:
        records = {r.uniq_key: r for r in await pull_records(client, TOPIC, 0)}
        bad = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(TOPIC, 0, props(TIMER_DELAY_SEC="soon")), b"x")
        far = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(TOPIC, 0, props(TIMER_DELAY_SEC="601")), b"x")
    assert [r.uniq_key for r in records.values()] == ["NOW", "EARLY", "LATE"]  # stored in delivery order
    assert records["LATE"].properties["TIMER_DELIVER_MS"] == str(sent["LATE"])
    assert "TIMER_OUT_MS" not in records["LATE"].properties and records["LATE"].body == b"LATE"
    assert bad.code == R.MESSAGE_ILLEGAL and "TIMER_DELAY_SEC" in bad.remark
    assert far.code == R.MESSAGE_ILLEGAL and "timerMaxDelaySec" in far.remark


async def test_grpc_delivery_times_recall_and_what_a_5x_consumer_sees(grpc_broker_factory):
    broker = timer_broker(grpc_broker_factory)
    await create_topic(broker.addr, TOPIC, queues=1, message_type="DELAY")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)

        async def send(message_id: str, ahead_ms: int) -> spb.SendResultEntry:
            at = int(time.time() * 1000) + ahead_ms
            response = await stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
                topic=pb.Resource(name=TOPIC), body=message_id.encode(), system_properties=pb.SystemProperties(
                    message_id=message_id, message_type=pb.DELAY,
                    delivery_timestamp=timestamp_pb2.Timestamp(seconds=at // 1000, nanos=at % 1000 * 1_000_000)))]),
                metadata=CLIENT, timeout=10)
            return response.entries[0]

        kept, recalled = await send("KEPT", 1200), await send("RECALLED", 1500)
        assert kept.status.code == recalled.status.code == pb.OK and recalled.recall_handle
        recall = spb.RecallMessageRequest(topic=pb.Resource(name=TOPIC), recall_handle=recalled.recall_handle)
        answer = await stub.RecallMessage(recall, metadata=CLIENT, timeout=10)
        assert answer.status.code == pb.OK and answer.message_id == "RECALLED"
        again = await stub.RecallMessage(recall, metadata=CLIENT, timeout=10)
        assert again.status.code == pb.NOT_FOUND and "recalled already" in again.status.message
        bogus = await stub.RecallMessage(spb.RecallMessageRequest(topic=pb.Resource(name=TOPIC), recall_handle="x y"),
                                         metadata=CLIENT, timeout=10)
        assert bogus.status.code == pb.BAD_REQUEST
        too_far = await send("FAR", 601_000)
        assert too_far.status.code == pb.ILLEGAL_DELIVERY_TIME and "timerMaxDelaySec" in too_far.status.message
    pop = Pop(broker.grpc_port, topic=TOPIC, metadata=CLIENT)
    try:
        assert await pop.messages(poll_ms=300) == []  # not yet
        [message] = await collect(pop, 1, invisible_ms=60_000, poll_ms=2000)
        assert message.system_properties.message_id == "KEPT" and message.system_properties.message_type == pb.DELAY
        assert message.system_properties.HasField("delivery_timestamp")
        assert await pop.messages(poll_ms=1500) == []  # the recalled one never comes
    finally:
        await pop.close()


async def test_remoting_recall_cancels_a_timed_message_and_either_protocol_takes_the_others_handle(
        grpc_broker_factory):
    """RECALL_MESSAGE (370) with the recallHandle a remoting send of a timed message was answered with: the message
    never arrives; a second recall, a handle of another topic or one no broker gave out are refused with a remark.
    A gRPC-sent message is recalled over remoting and a remoting-sent one over gRPC: one core, one handle."""
    broker = timer_broker(grpc_broker_factory)
    await create_topic(broker.addr, TOPIC, queues=1, message_type="DELAY")
    kept, recalled, via_grpc = [await send_timed(broker.addr, uniq, TIMER_DELAY_SEC="2")
                                for uniq in ("R-KEPT", "R-GONE", "R-GRPC")]
    assert kept.code == recalled.code == via_grpc.code == R.SUCCESS
    handle = recalled.ext_fields["recallHandle"]
    plain = await send_timed(broker.addr, "R-PLAIN", TIMER_DELIVER_MS=str(int(time.time() * 1000) - 5))  # due: none
    assert plain.code == R.SUCCESS and "recallHandle" not in plain.ext_fields
    async with await WireClient.connect(broker.addr) as client:
        async def recall(topic: str, text: str):
            return await client.request(RC.RECALL_MESSAGE, {"topic": topic, "recallHandle": text,
                                                            "producerGroup": "P"})
        answer = await recall(TOPIC, handle)
        assert answer.code == R.SUCCESS and answer.ext_fields["msgId"] == "R-GONE"
        again = await recall(TOPIC, handle)
        assert again.code == R.ILLEGAL_OPERATION and "recalled already" in again.remark
        other = await recall("OtherTopic", kept.ext_fields["recallHandle"])
        assert other.code == R.TOPIC_NOT_EXIST and "OtherTopic" in other.remark
        await create_topic(broker.addr, "OtherTopic", queues=1)
        other = await recall("OtherTopic", kept.ext_fields["recallHandle"])
        assert other.code == R.ILLEGAL_OPERATION and "topic not match" in other.remark
        elsewhere = await recall(TOPIC, build_recall_handle(TOPIC, "another-broker", 1, "R-KEPT", "00" * 16))
        assert elsewhere.code == R.ILLEGAL_OPERATION and "another-broker" in elsewhere.remark
        bogus = await recall(TOPIC, "not-a-handle!")
        assert bogus.code == R.ILLEGAL_OPERATION and "recall handle is invalid" in bogus.remark
        missing = await client.request(RC.RECALL_MESSAGE, {"topic": TOPIC})
        assert missing.code == R.INVALID_PARAMETER and "recallHandle" in missing.remark
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        crossed = await stub.RecallMessage(spb.RecallMessageRequest(
            topic=pb.Resource(name=TOPIC), recall_handle=via_grpc.ext_fields["recallHandle"]), metadata=CLIENT,
            timeout=10)
        assert crossed.status.code == pb.OK and crossed.message_id == "R-GRPC"
        at = int(time.time() * 1000) + 2000
        grpc_sent = (await stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name=TOPIC), body=b"x", system_properties=pb.SystemProperties(
                message_id="G-GONE", message_type=pb.DELAY,
                delivery_timestamp=timestamp_pb2.Timestamp(seconds=at // 1000, nanos=at % 1000 * 1_000_000)))]),
            metadata=CLIENT, timeout=10)).entries[0]
    assert grpc_sent.status.code == pb.OK and grpc_sent.recall_handle
    async with await WireClient.connect(broker.addr) as client:
        answer = await client.request(RC.RECALL_MESSAGE, {"topic": TOPIC, "recallHandle": grpc_sent.recall_handle})
    assert answer.code == R.SUCCESS and answer.ext_fields["msgId"] == "G-GONE"
    seen = await arrivals(broker.addr, {"R-KEPT", "R-PLAIN"}, 10)
    await asyncio.sleep(1.0)  # past the recalled ones' time too
    assert set(await arrivals(broker.addr, {"R-GONE", "R-GRPC", "G-GONE"}, 0.3)) == {"R-KEPT", "R-PLAIN"}, seen


async def test_recall_is_off_unless_recall_message_enable(grpc_broker_factory):
    """recallMessageEnable defaults to false, as in the reference: both protocols refuse a recall, saying why."""
    broker = grpc_broker_factory(timerMaxDelaySec=600)
    await create_topic(broker.addr, TOPIC, queues=1, message_type="DELAY")
    sent = await send_timed(broker.addr, "OFF", TIMER_DELAY_SEC="30")
    handle = sent.ext_fields["recallHandle"]
    async with await WireClient.connect(broker.addr) as client:
        answer = await client.request(RC.RECALL_MESSAGE, {"topic": TOPIC, "recallHandle": handle})
    assert answer.code == R.NO_PERMISSION and "recallMessageEnable" in answer.remark
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        refused = await stub.RecallMessage(spb.RecallMessageRequest(topic=pb.Resource(name=TOPIC),
                                                                    recall_handle=handle), metadata=CLIENT, timeout=10)
    assert refused.status.code == pb.FORBIDDEN and "recallMessageEnable" in refused.status.message


async def test_a_kill_neither_loses_nor_repeats_timed_messages(grpc_broker_factory):
    broker = timer_broker(grpc_broker_factory)
    await create_topic(broker.addr, TOPIC, queues=1)
    for i in range(5):
        assert (await send_timed(broker.addr, f"SOON{i}", TIMER_DELAY_MS="300")).code == R.SUCCESS
    for i in range(5):
        assert (await send_timed(broker.addr, f"LATER{i}", TIMER_DELAY_MS="2500")).code == R.SUCCESS
    assert len(await arrivals(broker.addr, {f"SOON{i}" for i in range(5)}, 10)) == 5
    broker.kill()
    broker.start()
    seen = await arrivals(broker.addr, {f"LATER{i}" for i in range(5)}, 15)
    assert len(seen) == 10
    await asyncio.sleep(1.5)
    async with await WireClient.connect(broker.addr) as client:
        stored = [r.uniq_key for r in await pull_records(client, TOPIC, 0)]
    assert sorted(stored) == sorted(seen)  # each exactly once


async def test_the_project_client_sends_recalls_and_receives_timed_messages(grpc_broker_factory):
    from client import Message, Producer
    from client.errors import MQBrokerError, MQClientError

    broker = timer_broker(grpc_broker_factory)
    await create_topic(broker.addr, TOPIC, queues=1)
    deliver_ms = int(time.time() * 1000) + 1200
    async with Producer("timed-producer", broker.namesrv_addr) as producer:
        result = await producer.send(Message(TOPIC, b"at a time", deliver_time_ms=deliver_ms))
        gone = await producer.send(Message(TOPIC, b"recalled", deliver_time_ms=deliver_ms))
        plain = await producer.send(Message(TOPIC, b"now"))
        assert result.recall_handle and gone.recall_handle and plain.recall_handle is None
        assert await producer.recall_message(TOPIC, gone.recall_handle) == gone.msg_id
        with pytest.raises(MQBrokerError) as again:
            await producer.recall_message(TOPIC, gone.recall_handle)
        assert again.value.code == R.ILLEGAL_OPERATION and "recalled already" in again.value.remark
        with pytest.raises(MQClientError, match="recall handle is invalid"):
            await producer.recall_message(TOPIC, "nonsense")
    seen = await arrivals(broker.addr, {result.msg_id, plain.msg_id}, 10)
    assert deliver_ms <= seen[result.msg_id] + 60 < deliver_ms + 1000
    await asyncio.sleep(0.3)
    assert gone.msg_id not in await arrivals(broker.addr, {gone.msg_id}, 0.2)  # never delivered


SDK_TIMED = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

port, topic = int(sys.argv[1]), sys.argv[2]
config = ClientConfiguration(f"127.0.0.1:{port}", Credentials())
producer = Producer(config, (topic,))
producer.startup()
out = {}
try:
    due_s = int(time.time()) + 2  # the 5.x Python SDK (5.1.2) puts this value in Timestamp.seconds: epoch seconds
    kept, recalled = Message(), Message()
    for message, body in ((kept, b"kept"), (recalled, b"recalled")):
        message.topic, message.body, message.delivery_timestamp = topic, body, due_s
    receipt = producer.send(kept)
    out["kept"] = receipt.message_id
    out["recalled"] = producer.recall_message(topic, producer.send(recalled).recall_handle)
finally:
    producer.shutdown()
consumer = SimpleConsumer(config, "SdkTimedGroup", {topic: FilterExpression("*")}, await_duration=1)
consumer.startup()
try:
    seen, deadline = [], time.monotonic() + 12
    while time.monotonic() < deadline and len(seen) < 2:
        for m in consumer.receive(16, 30):
            seen.append([m.message_id, m.body.decode(), int(time.time() * 1000), m.delivery_timestamp])
            consumer.ack(m)
        if seen and time.time() > due_s + 2:
            break
    out["seen"], out["due_ms"] = seen, due_s * 1000
    print("RESULT " + json.dumps(out), flush=True)
finally:
    consumer.shutdown()
"""


async def test_the_python_sdk_sends_recalls_and_receives_timed_messages(grpc_broker_factory):
    broker = timer_broker(grpc_broker_factory)
    await create_topic(broker.addr, TOPIC, queues=2, message_type="DELAY")
    out = await asyncio.to_thread(run_sdk, SDK_TIMED, broker.grpc_port, TOPIC)
    assert out["recalled"] and out["recalled"] != out["kept"]
    [(message_id, body, seen_ms, delivery_ms)] = out["seen"]  # the recalled one never came
    assert (message_id, body, delivery_ms) == (out["kept"], "kept", out["due_ms"])
    assert out["due_ms"] <= seen_ms < out["due_ms"] + 3000
