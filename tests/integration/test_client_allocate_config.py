"""Two push consumers of one group against the real broker, each allocated a fixed list of queues (CONFIG)."""

from __future__ import annotations

from client import AllocateMessageQueueByConfig, Message, MessageQueue, Producer

from tests.support.client_helpers import Recorder, push_consumer, wait_for


async def test_config_allocation_consumes_exactly_the_configured_queues(broker):
    ns, topic, group = broker.namesrv_addr, "C13Config", "cg-c13-config"
    async with Producer("c13-config-pg", ns, default_topic_queue_nums=4) as producer:
        for i in range(40):
            await producer.send(Message(topic, b"q-%d" % i))
    recorders = {}
    consumers = []
    for label, ids in (("first", (0, 3)), ("second", (1, 2))):  # no built-in strategy splits like this
        rec = recorders[label] = Recorder()
        queues = [MessageQueue(topic, broker.name, i) for i in ids]
        consumers.append((push_consumer(group, ns, topic, rec, allocate_strategy=AllocateMessageQueueByConfig(queues)),
                          queues))
    for consumer, _ in consumers:
        await consumer.start()
    try:
        await wait_for(lambda: sum(len(r.deliveries) for r in recorders.values()) >= 40, "all 40 messages", 20)
    finally:
        for consumer, _ in consumers:
            await consumer.shutdown()
    assert {d[3] for d in recorders["first"].deliveries if d[1] == topic} == {0, 3}
    assert {d[3] for d in recorders["second"].deliveries if d[1] == topic} == {1, 2}
    assert len(recorders["first"].bodies | recorders["second"].bodies) == 40
