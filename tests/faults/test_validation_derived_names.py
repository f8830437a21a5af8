"""Names the broker derives from a consumer group (%RETRY%<group>, %DLQ%<group>, the POP retry topic
%RETRY%<group>_<topic>) are checked when the group is first used (issue 27): one clear error to the client, never a
failure later that nobody hears of but the log. Before: a legal 240-character group receiving over POP made lapsed
deliveries never come back, and the broker logged an ERROR every 0.5 s, forever."""

from __future__ import annotations

import asyncio
import json

from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb

from tests.support.grpc_pop import FAST, Pop, collect, remoting_send
from tests.support.wire import WireClient, create_topic, pull_fields, send_v2_fields

TOPIC = "PopOrders"  # 9 characters


async def max_offset(client: WireClient, topic: str) -> int:
    resp = await client.request(RC.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})
    return int(resp.ext_fields["offset"]) if resp.code == R.SUCCESS else -1


async def topic_names(client: WireClient) -> set[str]:
    resp = await client.request(RC.GET_ALL_TOPIC_CONFIG, {})
    return set(json.loads(resp.body)["topicConfigTable"])


async def test_a_group_too_long_for_its_pop_retry_topic_is_refused_at_receive(grpc_broker_factory):
    broker = grpc_broker_factory(**FAST)
    await create_topic(broker.addr, TOPIC, queues=1)
    await remoting_send(broker.addr, TOPIC, 1)
    long_group = "L" * 240  # a legal group: %RETRY%<group>_PopOrders would have 257 characters
    pop = Pop(broker.grpc_port, group=long_group)
    try:
        refused, messages = await pop.receive(invisible_ms=500)
        assert refused.code == pb.ILLEGAL_CONSUMER_GROUP and not messages
        assert "POP retry topic" in refused.message and "257 characters" in refused.message and \
            "at most 247 characters together" in refused.message, refused.message
        assignment = await pop.stub.QueryAssignment(spb.QueryAssignmentRequest(
            group=pb.Resource(name=long_group), topic=pb.Resource(name=TOPIC)), metadata=pop.metadata, timeout=10)
        assert assignment.status.code == pb.ILLEGAL_CONSUMER_GROUP
    finally:
        await pop.close()
    # the allowed case: a 230-character group and a 4-character topic (242): its lapsed delivery comes back
    await create_topic(broker.addr, "PopT", queues=1)
    [sent] = await remoting_send(broker.addr, "PopT", 1)
    allowed = Pop(broker.grpc_port, group="A" * 230, topic="PopT")
    try:
        [first] = await collect(allowed, 1, invisible_ms=500)
        assert first.system_properties.message_id == sent and first.system_properties.delivery_attempt == 1
        [again] = await collect(allowed, 1, invisible_ms=5000, poll_ms=1000)
        assert again.system_properties.message_id == sent and again.system_properties.delivery_attempt == 2
        assert (await allowed.ack(again)).code == pb.OK
    finally:
        await allowed.close()
    async with await WireClient.connect(broker.addr) as client:
        assert f"%RETRY%{'A' * 230}_PopT" in await topic_names(client)
    await asyncio.sleep(1.2)  # two revive passes
    assert "POP retry topic" not in broker.log_text() and "Traceback" not in broker.log_text()


async def test_state_from_before_the_check_goes_to_the_dead_letter_topic_without_logging_forever(grpc_broker_factory):
    """A delivery in flight for a group the check now refuses (accepted by an older version): the revive loop puts
    it in the group's dead-letter topic and says so once, instead of failing and logging every 0.5 s."""
    broker = grpc_broker_factory(**FAST)
    await create_topic(broker.addr, TOPIC, queues=1)
    [sent] = await remoting_send(broker.addr, TOPIC, 1)
    short_group, old_group = "U" + "g" * 229, "U" + "g" * 239  # 230 (allowed) and 240 (its retry name: 257)
    pop = Pop(broker.grpc_port, group=short_group)
    try:
        [message] = await collect(pop, 1, invisible_ms=60_000)
        assert message.system_properties.message_id == sent
    finally:
        await pop.close()
    broker.stop()  # a clean stop writes popState.json; make it the state an older version would have left
    state_path = broker.store_dir / "config" / "popState.json"
    state = json.loads(state_path.read_text())
    [queue] = [q for q in state["queues"] if q["g"] == short_group and q["t"] == TOPIC]
    queue["g"] = old_group
    assert len(queue["f"]) == 1
    queue["f"][0][4] = 0  # its invisible time ran out
    state_path.write_text(json.dumps(state))
    broker.output.clear()
    broker.start()
    async with await WireClient.connect(broker.addr) as client:
        dlq = f"%DLQ%{old_group}"
        for _ in range(60):
            if await max_offset(client, dlq) == 1:
                break
            await asyncio.sleep(0.1)
        assert await max_offset(client, dlq) == 1, broker.log_text()[-2000:]
        assert f"%RETRY%{old_group}_{TOPIC}" not in await topic_names(client)
    await asyncio.sleep(2.0)  # four revive passes more
    log = broker.log_text()
    assert log.count("cannot create the POP retry topic") == 1, log[-3000:]
    assert "Traceback" not in log


async def test_remoting_first_uses_of_a_consumer_group_refuse_a_group_its_retry_topic_cannot_fit(broker_factory):
    broker = broker_factory()
    await create_topic(broker.addr, "NamesTopic", queues=1)
    too_long, longest = "T" * 249, "M" * 248  # %RETRY%<249> has 256 characters; %RETRY%<248> exactly 255
    async with await WireClient.connect(broker.addr) as client:
        beat = await client.heartbeat("names@1", consumer_group=too_long, topic="NamesTopic")
        assert beat.code == R.INVALID_PARAMETER
        assert "retry topic" in beat.remark and "would have 256" in beat.remark and "at most 248" in beat.remark
        pull = await client.request(RC.PULL_MESSAGE, pull_fields("NamesTopic", too_long, suspend_ms=0))
        assert pull.code == R.INVALID_PARAMETER and "at most 248" in pull.remark
        back = await client.request(RC.CONSUMER_SEND_MSG_BACK, {"offset": "0", "group": too_long, "delayLevel": "0",
                                                                "originMsgId": "X", "originTopic": "NamesTopic"})
        assert back.code == R.INVALID_PARAMETER and "at most 248" in back.remark
        body = json.dumps({"groupName": too_long, "consumeEnable": True}).encode()
        created = await client.request(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
        assert created.code == R.INVALID_PARAMETER and "at most 248" in created.remark
        # the allowed cases: the longest consumer group that fits, and a long producer group (nothing derived)
        beat = await client.heartbeat("names@1", consumer_group=longest, topic="NamesTopic",
                                      producer_group="P" * 255)
        assert beat.code == R.SUCCESS, beat.remark
        sent = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("NamesTopic", 0, group="P" * 255), b"p")
        assert sent.code == R.SUCCESS, sent.remark
        body = json.dumps({"groupName": "S" * 248, "consumeEnable": True}).encode()
        assert (await client.request(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)).code == R.SUCCESS
        pull = await client.request(RC.PULL_MESSAGE, pull_fields("NamesTopic", longest, suspend_ms=0))
        assert pull.code == R.SUCCESS, pull.remark  # the message the producer group sent
        names = await topic_names(client)
        assert f"%RETRY%{longest}" in names and f"%RETRY%{too_long}" not in names
        groups = await client.request(RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
        assert too_long.encode() not in groups.body and longest.encode() in groups.body
