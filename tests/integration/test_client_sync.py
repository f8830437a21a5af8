"""The blocking facade (client.sync) from plain synchronous code."""

from __future__ import annotations

import threading
import time

from client import ConsumeResult, Message, PullStatus, SendStatus
from client import sync


def test_sync_producer_pull_and_push_consumers(shared_broker):
    ns, topic = shared_broker.namesrv_addr, "CliSyncFacade"
    with sync.Producer("sync-pg", ns) as producer:
        results = [producer.send(Message(topic, f"s-{i}".encode(), tags="T")) for i in range(10)]
        batch = producer.send_batch(Message(topic, f"b-{i}".encode()) for i in range(10))
        producer.send_oneway(Message(topic, b"oneway"))
    assert all(r.status is SendStatus.SEND_OK for r in results) and batch.status is SendStatus.SEND_OK
    expected = {f"s-{i}".encode() for i in range(10)} | {f"b-{i}".encode() for i in range(10)} | {b"oneway"}

    with sync.PullConsumer("sync-pull-cg", ns) as pull:
        got = set()
        deadline = time.monotonic() + 10
        while got != expected and time.monotonic() < deadline:  # the one-way send may land a moment later
            got = set()
            for mq in pull.fetch_message_queues(topic):
                offset = pull.min_offset(mq)
                while True:
                    res = pull.pull(mq, "*", offset, 32)
                    if res.status is not PullStatus.FOUND:
                        break
                    got.update(m.body for m in res.messages)
                    offset = res.next_offset
            time.sleep(0.05)
        assert got == expected
        pull.update_offset(mq, 1)
        assert pull.fetch_consume_offset(mq) == 1

    seen: set[bytes] = set()
    done = threading.Event()

    def listener(msgs):
        seen.update(m.body for m in msgs)
        if seen >= expected:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = sync.PushConsumer("sync-push-cg", ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                                 rebalance_interval=1.0)
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    consumer.start()
    try:
        assert done.wait(10), f"push consumer got {len(seen)} of {len(expected)}"
    finally:
        consumer.shutdown()
    assert seen == expected
