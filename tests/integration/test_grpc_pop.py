"""POP consumption over gRPC against the real broker process, with raw MessagingService stubs (the wire the 5.x SDKs
speak): receive / ack / invisibility / redelivery / dead letters / FIFO / restarts, and messages crossing protocols."""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest

from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb

from tests.support.acl import APP, grpc_signed, write_acl
from tests.support.grpc_pop import CLIENT, FAST, GROUP, TOPIC, Pop, collect, remoting_send, run_sdk
from tests.support.wire import WireClient, create_topic, props, pull_records, send_v2_fields


@pytest.fixture
def pop_broker(grpc_broker_factory):
    return grpc_broker_factory(**FAST)


async def create_group(addr: str, group: str, *, orderly: bool = False, retry_max_times: int = 16) -> None:
    import json

    body = json.dumps({"groupName": group, "consumeEnable": True, "consumeMessageOrderly": orderly,
                       "retryQueueNums": 1, "retryMaxTimes": retry_max_times}).encode()
    async with await WireClient.connect(addr) as client:
        resp = await client.request(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
        assert resp.code == R.SUCCESS, resp.remark


async def test_receive_ack_and_redelivery_after_the_invisible_time(pop_broker):
    await create_topic(pop_broker.addr, TOPIC)
    ids = await remoting_send(pop_broker.addr, TOPIC, 3, queue_id=0) + \
        await remoting_send(pop_broker.addr, TOPIC, 3, queue_id=1, prefix="second")
    pop = Pop(pop_broker.grpc_port)
    try:
        first = await collect(pop, 6, invisible_ms=2000)
        assert sorted(m.system_properties.message_id for m in first) == sorted(ids)
        one = next(m for m in first if m.system_properties.message_id == ids[0])
        assert one.topic.name == TOPIC and one.body == b"remoting 0" and one.system_properties.tag == "TagA"
        assert list(one.system_properties.keys) == ["k0"] and dict(one.user_properties) == {"color": "blue"}
        assert one.system_properties.delivery_attempt == 1 and one.system_properties.queue_id == 0
        assert one.system_properties.body_digest.checksum == hashlib.md5(b"remoting 0").hexdigest().upper()
        acked = [m for m in first if m.system_properties.message_id not in (ids[1], ids[4])]
        for message in acked:
            assert (await pop.ack(message)).code == pb.OK
        assert (await pop.ack(acked[0])).code == pb.OK  # acking twice is harmless
        assert await pop.messages(poll_ms=200) == []  # the two unacked ones are invisible
        started = time.monotonic()
        again = await collect(pop, 2, invisible_ms=5000, poll_ms=1000)
        assert time.monotonic() - started > 1.0  # not before their invisible time ran out
        assert sorted(m.system_properties.message_id for m in again) == sorted([ids[1], ids[4]])
        assert {m.system_properties.delivery_attempt for m in again} == {2}
        assert {m.topic.name for m in again} == {TOPIC} and {m.body for m in again} == {b"remoting 1", b"second 1"}
        late = next(m for m in first if m.system_properties.message_id == ids[1])
        expired = await pop.ack(late)  # the first delivery's handle lapsed
        assert expired.code == pb.INVALID_RECEIPT_HANDLE and "expired" in expired.message
        for message in again:
            assert (await pop.ack(message)).code == pb.OK
        assert await pop.messages(poll_ms=200) == []
    finally:
        await pop.close()
    async with await WireClient.connect(pop_broker.addr) as client:  # progress is the group's consumer offset
        for queue_id in (0, 1):
            resp = await client.request(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC,
                                                                   "queueId": str(queue_id)})
            assert resp.code == R.SUCCESS and int(resp.ext_fields["offset"]) == 3


async def test_change_invisible_duration_and_statuses(pop_broker):
    await create_topic(pop_broker.addr, TOPIC)
    ids = await remoting_send(pop_broker.addr, TOPIC, 1)
    pop = Pop(pop_broker.grpc_port)
    try:
        [message] = await collect(pop, 1, invisible_ms=60_000)
        changed = await pop.change(message, 300)
        assert changed.status.code == pb.OK and changed.receipt_handle != message.system_properties.receipt_handle
        [back] = await collect(pop, 1, invisible_ms=60_000, poll_ms=1000)
        assert back.system_properties.message_id == ids[0] and back.system_properties.delivery_attempt == 2
        longer = await pop.change(back, 60_000)
        assert longer.status.code == pb.OK
        assert await pop.messages(poll_ms=1200) == []  # still invisible
        assert (await pop.ack(back, longer.receipt_handle)).code == pb.OK
        bogus = await pop.ack(back, "not a handle")
        assert bogus.code == pb.INVALID_RECEIPT_HANDLE
        short, _ = await pop.receive(invisible_ms=100)
        assert short.code == pb.ILLEGAL_INVISIBLE_TIME and "500" in short.message
        bad, _ = await pop.receive(sql="a >")
        assert bad.code == pb.ILLEGAL_FILTER_EXPRESSION
        missing, _ = await Pop(pop_broker.grpc_port, topic="NoSuchTopic").receive()
        assert missing.code == pb.TOPIC_NOT_FOUND
    finally:
        await pop.close()


async def test_filters_dead_letters_and_a_restart_keeps_acks(pop_broker):
    await create_topic(pop_broker.addr, TOPIC, queues=1)
    await create_group(pop_broker.addr, GROUP, retry_max_times=1)  # delivered at most twice
    a_ids = await remoting_send(pop_broker.addr, TOPIC, 4, tag="TagA")
    b_ids = await remoting_send(pop_broker.addr, TOPIC, 2, tag="TagB", prefix="bee")
    pop = Pop(pop_broker.grpc_port)
    try:
        tagged = await collect(pop, 2, tag="TagB", invisible_ms=600)
        assert sorted(m.system_properties.message_id for m in tagged) == sorted(b_ids)
        assert await pop.messages(tag="TagA", poll_ms=200) == []  # filtered-out TagA messages are finished
        await asyncio.sleep(0.8)
        again = await collect(pop, 2, tag="TagB", invisible_ms=600)
        assert {m.system_properties.delivery_attempt for m in again} == {2}
        await asyncio.sleep(0.8)
        assert await pop.messages(tag="TagB", poll_ms=1500) == []  # third time: dead-lettered instead
    finally:
        await pop.close()
    async with await WireClient.connect(pop_broker.addr) as client:
        dead = await pull_records(client, f"%DLQ%{GROUP}", 0)
    assert sorted(r.uniq_key for r in dead) == sorted(b_ids)
    assert {r.properties["DLQ_ORIGIN_TOPIC"] for r in dead} == {TOPIC}

    other = Pop(pop_broker.grpc_port, group="PopGroup2")
    try:
        got = await collect(other, 6, invisible_ms=60_000)  # another group gets everything, independently
        assert sorted(m.system_properties.message_id for m in got) == sorted(a_ids + b_ids)
        for message in got[:4]:
            assert (await other.ack(message)).code == pb.OK
    finally:
        await other.close()
    pop_broker.kill()  # kill -9: the acks are in the journal
    pop_broker.start()
    other = Pop(pop_broker.grpc_port, group="PopGroup2")
    try:
        assert await other.messages(poll_ms=300) == []  # two still invisible (60 s), four acked
    finally:
        await other.close()


async def test_fifo_groups_get_their_queue_in_order_one_batch_at_a_time(pop_broker):
    await create_topic(pop_broker.addr, TOPIC, queues=1)
    await create_group(pop_broker.addr, "FifoGroup", orderly=True)
    ids = await remoting_send(pop_broker.addr, TOPIC, 6)
    pop = Pop(pop_broker.grpc_port, group="FifoGroup")
    try:
        first = await pop.messages(batch=3, invisible_ms=800, attempt_id="attempt-1")
        assert [m.system_properties.message_id for m in first] == ids[:3]
        assert await pop.messages(batch=3, poll_ms=200, attempt_id="attempt-2") == []  # blocked while in flight
        lost = await pop.messages(batch=3, invisible_ms=800, attempt_id="attempt-1")  # the answer was lost: again
        assert [m.system_properties.message_id for m in lost] == ids[:3]
        assert [m.system_properties.delivery_attempt for m in lost] == [1, 1, 1]
        await asyncio.sleep(1.0)
        again = await collect(pop, 3, batch=3, invisible_ms=5000)
        assert [m.system_properties.message_id for m in again] == ids[:3]  # lapsed: the same, in order
        assert [m.system_properties.delivery_attempt for m in again] == [2, 2, 2]
        assert (await pop.ack(lost[0])).code == pb.INVALID_RECEIPT_HANDLE  # the lapsed delivery's handle
        for message in again[:2]:
            assert (await pop.ack(message)).code == pb.OK
        assert await pop.messages(batch=3, poll_ms=200) == []  # one of the batch is still in flight
        assert (await pop.ack(again[2])).code == pb.OK
        rest = await collect(pop, 3, batch=3, invisible_ms=5000)
        assert [m.system_properties.message_id for m in rest] == ids[3:]
        assert [m.system_properties.delivery_attempt for m in rest] == [1, 1, 1]
    finally:
        await pop.close()


async def test_grpc_sent_messages_reach_remoting_and_remoting_sent_reach_grpc(pop_broker):
    await create_topic(pop_broker.addr, TOPIC, queues=1)
    pop = Pop(pop_broker.grpc_port)
    try:
        sent = await pop.stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name=TOPIC), body=b"over grpc", user_properties={"size": "L"},
            system_properties=pb.SystemProperties(message_id="GRPC0001", tag="TagG", keys=["kg"]))]),
            metadata=CLIENT, timeout=10)
        assert sent.status.code == pb.OK
        [message] = await collect(pop, 1)
        assert message.system_properties.message_id == "GRPC0001" and message.user_properties["size"] == "L"
        assert message.system_properties.tag == "TagG" and list(message.system_properties.keys) == ["kg"]
    finally:
        await pop.close()
    async with await WireClient.connect(pop_broker.addr) as client:
        [record] = await pull_records(client, TOPIC, 0)
    assert record.uniq_key == "GRPC0001" and record.properties["TAGS"] == "TagG" and record.body == b"over grpc"


# ---- the official Python 5.x SDK (PyPI rocketmq-python-client), in its own process ------------------------------
SDK_SIMPLE = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

port, topic, group, want = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
consumer = SimpleConsumer(ClientConfiguration(f"127.0.0.1:{port}", Credentials()), group,
                          {topic: FilterExpression("*")}, await_duration=1)
consumer.startup()
out = {"first": [], "again": [], "changed": None}
try:
    deadline = time.monotonic() + 30
    held = []
    while len(out["first"]) < want and time.monotonic() < deadline:
        for m in consumer.receive(16, 1):  # invisible 1 s (the broker's minimum is lowered for the test)
            out["first"].append([m.message_id, m.body.decode(), m.tag, list(m.keys), dict(m.properties),
                                 m.delivery_attempt, bool(m.corrupted)])
            if m.body.decode().endswith(" 0"):
                held.append(m)  # not acked: comes back
            else:
                consumer.ack(m)
    while not out["again"] and time.monotonic() < deadline:
        for m in consumer.receive(16, 30):
            out["again"].append([m.message_id, m.delivery_attempt])
            consumer.change_invisible_duration(m, 1)
            out["changed"] = m.receipt_handle
            consumer.ack(m)  # with the handle the change returned
    time.sleep(1.5)
    out["after_ack"] = [m.message_id for m in consumer.receive(16, 30)]
    print("RESULT " + json.dumps(out), flush=True)
finally:
    consumer.shutdown()
"""

SDK_PUSH = """
import json, sys, threading, time
from rocketmq import ClientConfiguration, ConsumeResult, Credentials, FilterExpression, PushConsumer
from rocketmq.v5.consumer.push.message_listener import MessageListener

port, topic, group, want = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
seen, lock, done = [], threading.Lock(), threading.Event()

class Listener(MessageListener):
    def consume(self, message):
        with lock:
            seen.append([message.message_id, message.delivery_attempt, message.body.decode()])
            first_try = message.body.decode().endswith(" 1") and message.delivery_attempt == 1
            if len(seen) >= want + 1:
                done.set()
        return ConsumeResult.FAILURE if first_try else ConsumeResult.SUCCESS

consumer = PushConsumer(ClientConfiguration(f"127.0.0.1:{port}", Credentials()), group, Listener(),
                        {topic: FilterExpression("*")})
consumer.startup()
try:
    done.wait(40)
    time.sleep(1.0)
    with lock:
        print("RESULT " + json.dumps(seen), flush=True)
finally:
    consumer.shutdown()
"""


async def test_the_python_sdk_simple_consumer(pop_broker):
    await create_topic(pop_broker.addr, TOPIC)
    ids = await remoting_send(pop_broker.addr, TOPIC, 3)
    out = await asyncio.to_thread(run_sdk, SDK_SIMPLE, pop_broker.grpc_port, TOPIC, "SdkSimple", 3)
    first = {row[0]: row for row in out["first"]}
    assert sorted(first) == sorted(ids)
    assert first[ids[1]][1:] == ["remoting 1", "TagA", ["k1"], {"color": "blue"}, 1, False]
    assert out["again"] == [[ids[0], 2]]  # the one not acked came back after its invisible second
    assert out["changed"] and out["after_ack"] == []


async def test_the_python_sdk_push_consumer_acks_and_retries_failures(pop_broker):
    await create_topic(pop_broker.addr, TOPIC)
    await create_group(pop_broker.addr, "SdkPush")
    ids = await remoting_send(pop_broker.addr, TOPIC, 4)
    seen = await asyncio.to_thread(run_sdk, SDK_PUSH, pop_broker.grpc_port, TOPIC, "SdkPush", 4)
    attempts = {}
    for message_id, attempt, _body in seen:
        attempts.setdefault(message_id, []).append(attempt)
    assert sorted(attempts) == sorted(ids)
    assert attempts[ids[1]] == [1, 2]  # FAILURE: redelivered after the backoff, attempt 2
    assert all(attempts[i] == [1] for i in ids if i != ids[1])  # SUCCESS: acked, never again


SDK_FIFO_PUSH = """
import json, sys, threading, time
from rocketmq import ClientConfiguration, ConsumeResult, Credentials, FilterExpression, PushConsumer
from rocketmq.v5.consumer.push.message_listener import MessageListener

port, topic, group, want = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
seen, lock, done = [], threading.Lock(), threading.Event()

class Listener(MessageListener):
    def consume(self, message):
        body = message.body.decode()
        with lock:
            seen.append([body, message.delivery_attempt, message.message_group])
            if body.endswith(f" {want - 1}"):
                done.set()
        return ConsumeResult.FAILURE if body.endswith(" 2") else ConsumeResult.SUCCESS

consumer = PushConsumer(ClientConfiguration(f"127.0.0.1:{port}", Credentials()), group, Listener(),
                        {topic: FilterExpression("*")})
consumer.startup()
try:
    done.wait(40)
    time.sleep(0.5)
    with lock:
        print("RESULT " + json.dumps(seen), flush=True)
finally:
    consumer.shutdown()
"""


async def test_the_python_sdk_fifo_push_consumer_keeps_order_and_dead_letters_a_poison_message(pop_broker):
    await create_topic(pop_broker.addr, TOPIC, queues=2)
    await create_group(pop_broker.addr, "SdkFifo", orderly=True, retry_max_times=1)  # two attempts, then the DLQ
    async with await WireClient.connect(pop_broker.addr) as client:
        for i in range(6):
            fields = send_v2_fields(TOPIC, 1, props(UNIQ_KEY=f"FIFO{i:04d}", __SHARDINGKEY="order-7"))
            assert (await client.request(RC.SEND_MESSAGE_V2, fields, f"step {i}".encode())).code == R.SUCCESS
    seen = await asyncio.to_thread(run_sdk, SDK_FIFO_PUSH, pop_broker.grpc_port, TOPIC, "SdkFifo", 6)
    assert [body for body, _, _ in seen] == ["step 0", "step 1", "step 2", "step 2", "step 3", "step 4", "step 5"]
    assert [attempt for body, attempt, _ in seen if body == "step 2"] == [1, 1]  # the SDK retries it locally
    assert {group for _, _, group in seen} == {"order-7"}
    async with await WireClient.connect(pop_broker.addr) as client:
        dead = await pull_records(client, "%DLQ%SdkFifo", 0)
    assert [r.body for r in dead] == [b"step 2"]


async def test_with_acl_consumers_need_sub_on_the_topic_and_the_group(grpc_broker_factory, tmp_path):
    write_acl(tmp_path / "plain_acl.yml", reports="PUB")
    port = grpc_broker_factory(aclEnable="true", **FAST).grpc_port
    app = grpc_signed(*APP)
    sender = Pop(port, metadata=app)
    try:
        for topic in ("Orders", "Reports"):
            sent = await sender.stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
                topic=pb.Resource(name=topic), body=b"signed",
                system_properties=pb.SystemProperties(message_id=f"ACL-{topic}"))]), metadata=app, timeout=10)
            assert sent.status.code == pb.OK, sent.status.message
    finally:
        await sender.close()
    cases = [("Orders", "shop", app, pb.OK, ""), ("Orders", "billing", app, pb.UNAUTHORIZED, "group:billing"),
             ("Reports", "shop", app, pb.UNAUTHORIZED, "SUB permission for topic:Reports"),
             ("Orders", "shop", CLIENT, pb.UNAUTHORIZED, "No accessKey")]
    for topic, group, metadata, code, text in cases:
        pop = Pop(port, group=group, topic=topic, metadata=metadata)
        try:
            state, found = await pop.receive(invisible_ms=5000)
            assert state.code == code and text in state.message, (topic, group, state)
            if code == pb.OK:
                assert [m.system_properties.message_id for m in found] == ["ACL-Orders"]
                assert (await pop.ack(found[0])).code == pb.OK
        finally:
            await pop.close()


async def test_a_group_switching_between_remoting_pulls_and_pop_shares_its_offset(pop_broker):
    await create_topic(pop_broker.addr, TOPIC, queues=1)
    ids = await remoting_send(pop_broker.addr, TOPIC, 6)
    async with await WireClient.connect(pop_broker.addr) as client:  # a remoting consumer got the first two
        resp = await client.request(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC,
                                                                "queueId": "0", "commitOffset": "2"})
        assert resp.code == R.SUCCESS, resp.remark
    pop = Pop(pop_broker.grpc_port)
    try:
        got = await collect(pop, 4, invisible_ms=60_000)
        assert [m.system_properties.message_id for m in got] == ids[2:]  # from the group's committed offset
        for message in got[:2]:
            assert (await pop.ack(message)).code == pb.OK
        async with await WireClient.connect(pop_broker.addr) as client:
            resp = await client.request(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC,
                                                                   "queueId": "0"})
            assert int(resp.ext_fields["offset"]) == 4  # POP progress is the group's offset for remoting too
            resp = await client.request(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC,
                                                                    "queueId": "0", "commitOffset": "1"})
            assert resp.code == R.SUCCESS
        again = await collect(pop, 5, invisible_ms=60_000)  # an offset reset is followed
        assert [m.system_properties.message_id for m in again] == ids[1:]
    finally:
        await pop.close()


async def test_consumer_settings_heartbeats_and_assignments(pop_broker):
    await create_topic(pop_broker.addr, TOPIC, queues=3)
    await create_group(pop_broker.addr, "Ordered", orderly=True, retry_max_times=4)
    pop = Pop(pop_broker.grpc_port)
    try:
        async def settings(group: str) -> pb.Settings:
            command = spb.TelemetryCommand(settings=pb.Settings(
                client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name=group))))

            async def one():
                yield command

            answers = [a async for a in pop.stub.Telemetry(one(), metadata=CLIENT, timeout=10)]
            assert answers[0].status.code == pb.OK
            return answers[0].settings

        plain, ordered = await settings(GROUP), await settings("Ordered")
        assert not plain.subscription.fifo and ordered.subscription.fifo
        assert plain.subscription.receive_batch_size == 32 and plain.subscription.long_polling_timeout.seconds == 20
        assert plain.backoff_policy.max_attempts == 17 and ordered.backoff_policy.max_attempts == 5
        assert [d.seconds for d in plain.backoff_policy.customized_backoff.next] == [1] * 16  # levels 3..18
        beat = await pop.stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PUSH_CONSUMER,
                                                             group=pb.Resource(name="bad group!")),
                                        metadata=CLIENT, timeout=10)
        assert beat.status.code == pb.ILLEGAL_CONSUMER_GROUP

        async def assignment(group: str, topic: str = TOPIC) -> spb.QueryAssignmentResponse:
            return await pop.stub.QueryAssignment(spb.QueryAssignmentRequest(
                topic=pb.Resource(name=topic), group=pb.Resource(name=group)), metadata=CLIENT, timeout=10)

        assert [a.message_queue.id for a in (await assignment(GROUP)).assignments] == [-1]
        assert [a.message_queue.id for a in (await assignment("Ordered")).assignments] == [0, 1, 2]
        assert (await assignment(GROUP, "NoSuchTopic")).status.code == pb.TOPIC_NOT_FOUND
    finally:
        await pop.close()


async def test_auto_renewed_deliveries_stay_invisible_while_their_client_lives(grpc_broker_factory):
    broker = grpc_broker_factory(**FAST, defaultInvisibleTimeMills=1000, renewAheadTimeMillis=600)
    port = broker.grpc_port
    await create_topic(broker.addr, TOPIC, queues=1)
    ids = await remoting_send(broker.addr, TOPIC, 2)
    holder = Pop(port, metadata=(("x-mq-client-id", "holder@1@1@abc"),))
    other = Pop(port, metadata=(("x-mq-client-id", "other@1@1@abc"),))
    try:
        held = await collect(holder, 2, auto_renew=True)  # a push consumer's receive: no invisible duration
        assert [m.system_properties.message_id for m in held] == ids
        assert held[0].system_properties.invisible_duration.seconds == 1
        for _ in range(6):  # 3 s, three times the invisible time: renewed while the holder keeps calling
            assert await other.messages(poll_ms=300, invisible_ms=60_000) == []
            await holder.stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PUSH_CONSUMER,
                                                             group=pb.Resource(name=GROUP)),
                                        metadata=holder.metadata, timeout=10)
            await asyncio.sleep(0.2)
        assert (await holder.ack(held[0])).code == pb.OK  # its first handle is still good
        await holder.stub.NotifyClientTermination(spb.NotifyClientTerminationRequest(group=pb.Resource(name=GROUP)),
                                                  metadata=holder.metadata, timeout=10)
        back = await collect(other, 1, invisible_ms=60_000, poll_ms=1000, within=5)  # released at once
        assert [(m.system_properties.message_id, m.system_properties.delivery_attempt) for m in back] == [(ids[1], 2)]
    finally:
        await holder.close()
        await other.close()
