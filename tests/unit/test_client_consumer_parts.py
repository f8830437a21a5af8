"""The push consumer's parts work on their own, with only the narrow collaborators they are built with."""

from __future__ import annotations

import asyncio

from client.allocate import allocate_averagely
from client.consume_offsets import ConsumeOffsets
from client.message import MessageQueue
from client.offset_store import OffsetStore
from client.process_queue import ProcessQueue
from client.rebalance_coordinator import RebalanceCoordinator
from client.subscription_state import SubscriptionState


class MemoryStore(OffsetStore):
    def __init__(self, committed: dict[MessageQueue, int]) -> None:
        super().__init__()
        self.committed = committed

    async def fetch(self, mq, zero_if_not_found=True):
        return self.committed.get(mq, -1)

    async def persist(self, mq):
        if self.offsets.get(mq, -1) >= 0:
            self.committed[mq] = self.offsets[mq]

    async def persist_all(self, final=False):
        for mq in self.offsets:
            await self.persist(mq)


class Bounds:
    async def min_offset(self, mq):
        return 0

    async def max_offset(self, mq):
        return 100

    async def search_offset(self, mq, timestamp_ms):
        return 50


class Route:
    def __init__(self, topic: str, n: int) -> None:
        self.queues = [MessageQueue(topic, "b", i) for i in range(n)]

    def subscribe_queues(self, topic):
        return list(self.queues)


class Routes:
    def __init__(self, **routes: Route) -> None:
        self.routes = dict(routes)

    async def update_route(self, topic):
        raise LookupError(topic)


class Members:
    def __init__(self, ids: list[str]) -> None:
        self.ids = ids

    async def consumer_ids(self, topic, timeout=None, answers=None):
        return list(self.ids)


class Fetcher:
    def __init__(self) -> None:
        self.started: dict[MessageQueue, int] = {}
        self.stopped: list[MessageQueue] = []

    def start(self, pq, offset):
        self.started[pq.mq] = offset

    async def stop(self, mq):
        self.stopped.append(mq)


def test_subscription_state_adds_the_retry_topic_only_when_clustering():
    state = SubscriptionState("cg", clustering=True)
    state.subscribe("T", "A || B")
    assert set(state.all_subscriptions()) == {"T", "%RETRY%cg"}
    assert state.selector("T").tags_set == {"A", "B"} and state.selector("%RETRY%cg").expression == "*"
    broadcast = SubscriptionState("cg", clustering=False)
    broadcast.subscribe("T")
    assert list(broadcast.all_subscriptions()) == ["T"]


async def test_coordinator_takes_its_share_and_commits_what_it_hands_over():
    state = SubscriptionState("cg", clustering=True)
    state.subscribe("T")
    committed = {MessageQueue("T", "b", 0): 7}
    store = MemoryStore(committed)
    offsets = ConsumeOffsets("cg", store, Bounds(), consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                             consume_timestamp=0)
    members = Members(["me"])
    fetcher = Fetcher()
    coordinator = RebalanceCoordinator(
        "cg", "me", allocate_averagely, state, Routes(T=Route("T", 4)), members, offsets, fetcher, ProcessQueue,
        asyncio.Lock())
    await coordinator.rebalance()
    assert state.assigned_queues() == [MessageQueue("T", "b", i) for i in range(4)]
    assert fetcher.started == {MessageQueue("T", "b", 0): 7, **{MessageQueue("T", "b", i): 0 for i in (1, 2, 3)}}
    store.update(MessageQueue("T", "b", 3), 12)  # consumed up to 12 before a second member arrives
    members.ids = ["me", "zz"]
    await coordinator.rebalance()
    assert state.assigned_queues() == [MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)]
    assert set(fetcher.stopped) == {MessageQueue("T", "b", 2), MessageQueue("T", "b", 3)}
    assert committed[MessageQueue("T", "b", 3)] == 12 and MessageQueue("T", "b", 3) not in store.offsets
    state.unsubscribe("T")
    await coordinator.rebalance()
    assert state.assigned_queues() == [] and committed[MessageQueue("T", "b", 0)] == 7
