"""A cap on properties per message (issue 27): count and bytes, refused with MESSAGE_ILLEGAL and a remark naming the
conf key, on every send path (SEND_MESSAGE, SEND_MESSAGE_V2, each message of a batch and the batch's own, gRPC), and
a pipelined flood of messages with thousands of properties no longer starves a bystander."""

from __future__ import annotations

import grpc

from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb
from protocol.grpc import service_pb2_grpc
from protocol.message import BatchEntry, encode_batch_body

from tests.support.wire import WireClient, create_topic, pull_records, send_v1_fields, send_v2_fields

from tests.support.flood import bystander_sends, percentile, with_flooder

SECONDS = 10.0


def many(count: int, value: str = "v") -> str:
    return "".join(f"p{i}\x01{value}\x02" for i in range(count))


async def stored(client: WireClient, topic: str, queues: int = 1) -> int:
    total = 0
    for queue_id in range(queues):
        resp = await client.request(RC.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
        assert resp.code == R.SUCCESS
        total += int(resp.ext_fields["offset"])
    return total


async def test_a_flood_of_messages_with_thousands_of_properties_is_refused_cheaply(broker_factory):
    broker = broker_factory()
    await create_topic(broker.addr, "CalmTopic", queues=4)
    await create_topic(broker.addr, "HeavyTopic", queues=4)
    quiet = await bystander_sends(broker.addr, "CalmTopic", 3.0)
    latencies, result = await with_flooder(broker.addr, "heavy", "CalmTopic", SECONDS)
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    print(f"\nquiet: {len(quiet) / 3:.0f} sends/s, p99 {percentile(quiet, 0.99):.1f} ms; flooded: {len(latencies)} "
          f"sends in {SECONDS:.0f} s, p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(latencies):.1f} ms; "
          f"flooder: {result['codes']}")
    codes = result["codes"]
    assert set(codes) == {str(R.MESSAGE_ILLEGAL)} and codes[str(R.MESSAGE_ILLEGAL)] >= 2048
    remark = result["remarks"][str(R.MESSAGE_ILLEGAL)]
    assert remark == "the message has 4100 properties, more than this broker allows (maxMessagePropertiesCount=256)"
    async with await WireClient.connect(broker.addr) as client:
        assert await stored(client, "HeavyTopic", 4) == 0
    # before the cap: 2,048 messages stored in 10 s; the bystander got 12 sends through, p99 1,664 ms
    assert p99 <= 500.0, p99
    assert len(latencies) >= 150, len(latencies)


async def test_the_cap_on_every_send_path_and_messages_under_it_are_stored_whole(grpc_broker_factory):
    broker = grpc_broker_factory(maxMessagePropertiesCount=32, maxMessagePropertiesBytes=2048)
    await create_topic(broker.addr, "PropsTopic", queues=1)
    count_remark = "has 33 properties, more than this broker allows (maxMessagePropertiesCount=32)"
    bytes_remark = "more than this broker allows (maxMessagePropertiesBytes=2048)"
    async with await WireClient.connect(broker.addr) as client:
        for code, fields in ((RC.SEND_MESSAGE_V2, send_v2_fields), (RC.SEND_MESSAGE, send_v1_fields)):
            too_many = await client.request(code, fields("PropsTopic", 0, many(33)), b"x")
            assert too_many.code == R.MESSAGE_ILLEGAL and too_many.remark == f"the message {count_remark}"
            too_big = await client.request(code, fields("PropsTopic", 0, many(1, "v" * 2100)), b"x")
            assert too_big.code == R.MESSAGE_ILLEGAL and too_big.remark == \
                f"the message's properties are 2104 bytes, {bytes_remark}"
        # a refused message creates no topic either
        new_topic = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("NeverCreated", 0, many(40)), b"x")
        assert new_topic.code == R.MESSAGE_ILLEGAL
        # under the cap: stored with every property
        ok = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("PropsTopic", 0, many(32)), b"ok")
        assert ok.code == R.SUCCESS, ok.remark
        big_ok = await client.request(RC.SEND_MESSAGE, send_v1_fields("PropsTopic", 0, many(1, "w" * 1900)), b"ok")
        assert big_ok.code == R.SUCCESS, big_ok.remark
        # a batch: one inner message over the cap refuses the batch, and nothing of it is stored
        good = [BatchEntry(0, b"b", many(3) + f"UNIQ_KEY\x01B{i}\x02") for i in range(3)]
        bad = encode_batch_body(good + [BatchEntry(0, b"b", many(33))])
        refused = await client.request(RC.SEND_BATCH_MESSAGE, send_v2_fields("PropsTopic", 0), bad)
        assert refused.code == R.MESSAGE_ILLEGAL and refused.remark == f"batch message 3 {count_remark}"
        bad_bytes = encode_batch_body([BatchEntry(0, b"b", many(1, "v" * 2100))] + good)
        refused = await client.request(RC.SEND_BATCH_MESSAGE, send_v2_fields("PropsTopic", 0), bad_bytes)
        assert refused.code == R.MESSAGE_ILLEGAL and refused.remark == \
            f"batch message 0's properties are 2104 bytes, {bytes_remark}"
        batch_level = await client.request(RC.SEND_BATCH_MESSAGE, send_v2_fields("PropsTopic", 0, many(33)),
                                           encode_batch_body(good))
        assert batch_level.code == R.MESSAGE_ILLEGAL and batch_level.remark == f"the batch {count_remark}"
        accepted = await client.request(RC.SEND_BATCH_MESSAGE, send_v2_fields("PropsTopic", 0),
                                        encode_batch_body(good))
        assert accepted.code == R.SUCCESS, accepted.remark
        assert await stored(client, "PropsTopic") == 5
        records = await pull_records(client, "PropsTopic", 0)
        assert [r.body for r in records] == [b"ok", b"ok", b"b", b"b", b"b"]
        assert all(records[0].properties.get(f"p{i}") == "v" for i in range(32))
        assert records[1].properties["p0"] == "w" * 1900
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)

        async def grpc_send(user_properties: dict[str, str], message_id: str) -> pb.Status:
            resp = await stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
                topic=pb.Resource(name="PropsTopic"), body=b"g", user_properties=user_properties,
                system_properties=pb.SystemProperties(message_id=message_id))]),
                metadata=(("x-mq-client-id", "props@1@1@abc"),), timeout=10)
            return resp.entries[0].status

        # 30 user properties and the 4 the endpoint adds (UNIQ_KEY, __BORNHOST, BORN_TIMESTAMP, PGROUP)
        over = await grpc_send({f"u{i}": "v" for i in range(30)}, "G1")
        assert over.code == pb.MESSAGE_PROPERTIES_TOO_LARGE and "maxMessagePropertiesCount=32" in over.message
        heavy = await grpc_send({"u": "v" * 2100}, "G2")
        assert heavy.code == pb.MESSAGE_PROPERTIES_TOO_LARGE and "maxMessagePropertiesBytes=2048" in heavy.message
        fine = await grpc_send({f"u{i}": "v" for i in range(20)}, "G3")
        assert fine.code == pb.OK, fine.message
    async with await WireClient.connect(broker.addr) as client:
        assert await stored(client, "PropsTopic") == 6
        resp = await client.request(RC.GET_ALL_TOPIC_CONFIG, {})
        assert b"NeverCreated" not in resp.body
