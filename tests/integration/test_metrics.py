"""Prometheus endpoint (metricsPort) scraped after real traffic."""

from __future__ import annotations

import asyncio
import time


from tests.support.broker_process import free_port
from protocol.codes import RequestCode as RC
from protocol.ids import decode_offset_msg_id

from tests.support.admin import http_get, scrape
from tests.support.wire import WireClient, props, pull_fields, send_v2_fields

SUB, SUSPEND = 0x4, 0x2


async def test_metrics_after_traffic(broker_factory):
    port = free_port()
    broker = broker_factory("broker-m", extra={"metricsPort": port, "flushIntervalCommitLog": 50})
    async with await WireClient.connect(broker.addr) as client:
        sent = []
        for i in range(6):
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("MTopic", 0, props(TAGS="a")),
                                        b"x" * 100)
            assert resp.code == 0
            sent.append(resp.ext_fields["msgId"])
        refused = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("SCHEDULE_TOPIC_XXXX", 0), b"no")
        assert refused.code != 0
        pulled = await client.request(RC.PULL_MESSAGE, pull_fields("MTopic", "mgroup", 0, 0, max_nums=4))
        assert pulled.code == 0
        await client.request(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "mgroup", "topic": "MTopic",
                                                         "queueId": "0", "commitOffset": "4"})
        dead = await client.request(RC.CONSUMER_SEND_MSG_BACK, {
            "offset": str(decode_offset_msg_id(sent[0])[2]), "group": "mgroup", "delayLevel": "-1",
            "originMsgId": sent[0], "originTopic": "MTopic"})
        assert dead.code == 0
        held = asyncio.ensure_future(client.request(
            RC.PULL_MESSAGE, pull_fields("MTopic", "mgroup", 0, 6, sys_flag=SUB | SUSPEND, suspend_ms=10_000),
            timeout=15))
        await asyncio.sleep(0.3)

        deadline = time.monotonic() + 10
        while True:
            m = await scrape(port)
            if m.get(("rocketmq_flush_latency_seconds_count", ()), 0) > 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)

        assert m[("rocketmq_messages_in_total", (("topic", "MTopic"),))] == 6
        assert m[("rocketmq_bytes_in_total", (("topic", "MTopic"),))] == 600
        assert m[("rocketmq_messages_out_total", (("topic", "MTopic"),))] == 4
        assert m[("rocketmq_bytes_out_total", (("topic", "MTopic"),))] > 400
        assert m[("rocketmq_send_latency_seconds_count", ())] == 7  # per request, refused one included
        assert m[("rocketmq_pull_latency_seconds_count", ())] >= 1
        assert m[("rocketmq_requests_rejected_total", (("code", "NO_PERMISSION"), ("family", "send")))] == 1
        assert m[("rocketmq_consumer_lag", (("group", "mgroup"), ("topic", "MTopic")))] == 2
        assert m[("rocketmq_dlq_messages_total", (("group", "mgroup"),))] == 1
        assert m[("rocketmq_suspended_pulls", ())] == 1
        assert m[("rocketmq_connections", ())] >= 1
        assert m[("rocketmq_store_commitlog_bytes", ())] > 600
        assert m[("rocketmq_store_size_bytes", (("part", "commitlog"),))] > 0
        assert 0.0 < m[("rocketmq_store_disk_used_ratio", ())] < 1.0  # a fraction, as brokerStatus's commitLogDiskRatio
        assert m[("rocketmq_flush_latency_seconds_count", ())] > 0

        await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("MTopic", 0), b"wake")
        assert (await asyncio.wait_for(held, 10)).code == 0
        after = await scrape(port)
        assert after[("rocketmq_suspended_pulls", ())] == 0
        assert after[("rocketmq_messages_out_total", (("topic", "MTopic"),))] == 5

    status, _, _ = await asyncio.get_running_loop().run_in_executor(
        None, http_get, f"http://127.0.0.1:{port}/nothing-here")
    assert status == 404
    assert "rejected SEND_MESSAGE_V2" in broker.log_text()  # warnings reach the log even at WARNING level


async def test_grpc_sends_count_as_remoting_sends(grpc_broker_factory):
    """A gRPC SendMessage goes straight to the messaging core: it is counted once per request (latency, bytes in, or
    the refusal) as a remoting send is, and a remoting send beside it is not counted twice."""
    import grpc

    from protocol.grpc import definition_pb2 as pb
    from protocol.grpc import service_pb2 as spb
    from protocol.grpc import service_pb2_grpc

    port = free_port()
    broker = grpc_broker_factory(metricsPort=port)
    metadata = (("x-mq-client-id", "metrics-test@1@1@abc"),)

    def message(topic: str, i: int) -> pb.Message:
        return pb.Message(topic=pb.Resource(name=topic), body=b"g" * 100, system_properties=pb.SystemProperties(
            message_id=f"METRICS{i:04d}", message_type=pb.NORMAL, body_encoding=pb.IDENTITY))

    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        sent = await stub.SendMessage(spb.SendMessageRequest(messages=[message("GTopic", i) for i in range(3)]),
                                      metadata=metadata, timeout=10)
        assert sent.status.code == pb.OK, sent.status.message
        refused = await stub.SendMessage(spb.SendMessageRequest(messages=[message("SCHEDULE_TOPIC_XXXX", 9)]),
                                         metadata=metadata, timeout=10)
        assert refused.status.code == pb.FORBIDDEN, refused.status
        empty = message("GTopic", 10)
        empty.body = b""  # refused by the 5.x shape checks, before the core: counted all the same
        shape = await stub.SendMessage(spb.SendMessageRequest(messages=[empty]), metadata=metadata, timeout=10)
        assert shape.status.code == pb.MESSAGE_BODY_EMPTY, shape.status
    async with await WireClient.connect(broker.addr) as client:
        resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("GTopic", 0), b"r" * 50)
        assert resp.code == 0

    m = await scrape(port)
    assert m[("rocketmq_messages_in_total", (("topic", "GTopic"),))] == 4
    assert m[("rocketmq_bytes_in_total", (("topic", "GTopic"),))] == 350  # 3 x 100 over gRPC, 50 over remoting
    assert m[("rocketmq_send_latency_seconds_count", ())] == 4  # per request: three gRPC, one remoting
    assert m[("rocketmq_requests_rejected_total", (("code", "NO_PERMISSION"), ("family", "send")))] == 1
    assert m[("rocketmq_requests_rejected_total", (("code", "MESSAGE_ILLEGAL"), ("family", "send")))] == 1
    assert "rejected a send of 1 message(s) to topic SCHEDULE_TOPIC_XXXX" in broker.log_text()
