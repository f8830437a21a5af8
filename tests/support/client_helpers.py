"""Helpers for the client integration tests: bounded waits, a recording listener, a test-tuned push consumer and
reading back every stored message of a topic."""

from __future__ import annotations

import asyncio
import collections
import time

from client import ConsumeResult, PullConsumer, PullStatus, PushConsumer
from client.errors import MQBrokerError

# short delay levels (level n = n * 100 ms up to 900 ms, then 1 s, level 18 = 2 s): the retry_broker fixture's
DELAY_LEVELS = " ".join([f"{100 * (i + 1)}ms" for i in range(9)] + ["1s"] * 8 + ["2s"])


async def wait_for(condition, what: str, timeout: float = 10.0, interval: float = 0.05):
    """Poll condition() (sync or async) until truthy; AssertionError naming `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


class Recorder:
    """An async listener that records every delivery (body, topic, reconsume_times, queue, offset)."""

    def __init__(self, fail_first: int = 0) -> None:
        self.deliveries: list[tuple] = []
        self.counts: collections.Counter = collections.Counter()
        self.fail_first = fail_first

    async def __call__(self, msgs):
        for m in msgs:
            self.deliveries.append((m.body, m.topic, m.reconsume_times, m.queue_id, m.queue_offset))
            self.counts[m.body] += 1
        if self.fail_first and any(self.counts[m.body] <= self.fail_first for m in msgs):
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    @property
    def bodies(self) -> set[bytes]:
        return set(self.counts)

    def duplicates(self) -> dict[bytes, int]:
        return {b: n for b, n in self.counts.items() if n > 1}


def push_consumer(group: str, namesrv: str, topic: str, listener, expression="*", **kwargs) -> PushConsumer:
    """A PushConsumer tuned for tests: fast rebalance and offset persistence, short long-polls."""
    options = dict(rebalance_interval=1.0, persist_offset_interval=0.3, suspend_timeout=3.0, shutdown_grace=3.0,
                   consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    options.update(kwargs)
    consumer = PushConsumer(group, namesrv, **options)
    consumer.subscribe(topic, expression)
    consumer.register_listener(listener)
    return consumer


async def read_queue(ns: str, group: str, topic: str) -> list:
    """Every message currently stored in topic (all queues), read with a PullConsumer."""
    out = []
    async with PullConsumer(group + "-reader", ns) as pull:
        try:
            queues = await pull.fetch_message_queues(topic)
        except MQBrokerError:
            return out  # the topic was never created
        for mq in queues:
            offset = 0
            for _ in range(50):
                result = await pull.pull(mq, "*", offset, 32)
                if result.status is not PullStatus.FOUND:
                    break
                out.extend(result.messages)
                offset = result.next_begin_offset
    return out
