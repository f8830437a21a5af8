"""mqadmin consumerStatus / consumeMessage against a real broker and a running push consumer: the broker relays
GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY to the client, which answers in the reference's formats."""

from __future__ import annotations

import asyncio
import json

from client import ConsumeResult, Message, Producer

from tests.support.client_helpers import push_consumer, wait_for
from tests.support.admin import mqadmin


async def test_consumer_status_and_direct_consumption_through_the_broker(broker):
    ns, topic, group = broker.namesrv_addr, "C13Status", "cg-c13-status"
    seen: list[tuple[bytes, int]] = []

    async def listener(msgs):
        seen.extend((m.body, m.queue_offset) for m in msgs)
        return ConsumeResult.RECONSUME_LATER if msgs[0].body == b"direct-fail" else ConsumeResult.SUCCESS

    async with Producer("c13-status-pg", ns, default_topic_queue_nums=2) as producer:
        first = await producer.send(Message(topic, b"s-0"))
    consumer = push_consumer(group, ns, topic, listener)
    await consumer.start()
    try:
        await wait_for(lambda: (b"s-0", 0) in seen, "the first message", 20)
        status = await asyncio.to_thread(mqadmin, ns, "consumerStatus", "-g", group, "--json")
        assert status.returncode == 0, status.stderr
        [info] = json.loads(status.stdout)["consumers"]
        assert info["clientId"] == consumer.client_id
        assert info["properties"]["consumerGroup"] == group and info["properties"]["PROP_CONSUMEORDERLY"] == "false"
        assert {s["topic"] for s in info["subscriptions"]} == {topic, "%RETRY%" + group}
        queues = {(q["topic"], q["queueId"]): q for q in info["queues"]}
        assert (topic, first.queue_id) in queues and queues[(topic, first.queue_id)]["commitOffset"] == 1
        human = await asyncio.to_thread(mqadmin, ns, "consumerStatus", "-g", group)
        assert human.returncode == 0 and topic in human.stdout and "1 consumer(s)" in human.stdout

        # the listener runs on the stored message again, directly; nothing is sent back, no offset moves
        direct = await asyncio.to_thread(mqadmin, ns, "consumeMessage", "-g", group, "-i", consumer.client_id,
                                         "-m", first.offset_msg_id, "--json")
        assert direct.returncode == 0, direct.stderr
        answer = json.loads(direct.stdout)
        assert answer["consumeResult"] == "CR_SUCCESS" and answer["order"] is False
        assert seen.count((b"s-0", 0)) == 2
        human = await asyncio.to_thread(mqadmin, ns, "consumeMessage", "-g", group, "-i", consumer.client_id,
                                        "-m", first.offset_msg_id)
        assert "CR_SUCCESS" in human.stdout

        offline = await asyncio.to_thread(mqadmin, ns, "consumeMessage", "-g", group, "-i", "10.9.9.9@nobody",
                                          "-m", first.offset_msg_id)
        assert offline.returncode != 0 and "not online" in offline.stderr and "Traceback" not in offline.stderr
        bad_id = await asyncio.to_thread(mqadmin, ns, "consumeMessage", "-g", group, "-i", consumer.client_id,
                                         "-m", "not-an-id")
        assert bad_id.returncode != 0 and "offset message id" in bad_id.stderr and "Traceback" not in bad_id.stderr
    finally:
        await consumer.shutdown()
    gone = await asyncio.to_thread(mqadmin, ns, "consumerStatus", "-g", group)
    assert gone.returncode != 0 and "not online" in gone.stderr
