"""The push consumer's rebalance coordinator: which queues this member consumes, and moving queues in and out.

CLUSTERING: for every subscribed topic the group's member list (from the brokers) and the allocate strategy decide
this member's queues; BROADCASTING takes every queue. A rebalance runs every `rebalance_interval` seconds and as soon
as it is triggered (the broker's NOTIFY_CONSUMER_IDS_CHANGED, a subscription change, an offset reset). A new queue
gets a ProcessQueue, its start offset and a pull loop; a queue that moved away stops pulling and has its offset
committed (acknowledged). Orderly CLUSTERING consumers lock a queue on the broker before its first pull and release
the lock only after its offset is committed, so the next owner starts exactly where this one stopped.

Kept apart from the pull loops (client.pull_fetcher) and the offset policy (client.consume_offsets): it only decides
and orchestrates, through the narrow collaborators it is built with.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from client.allocate import AllocateStrategy, sort_queues
from client.consume_offsets import ConsumeOffsets
from client.message import MessageQueue
from client.process_queue import ProcessQueue
from client.pull_fetcher import PullFetcher
from client.queue_locks import BatchLocks
from client.route import TopicRoute
from client.subscription_state import SubscriptionState
from client.waiting import wait_event

log = logging.getLogger(__name__)

__all__ = ["MemberSource", "RebalanceCoordinator", "RouteSource"]


class RouteSource(Protocol):
    """Cached topic routes and a way to fetch a missing one (client.instance.ClientInstance)."""

    routes: dict[str, TopicRoute]

    async def update_route(self, topic: str) -> TopicRoute: ...


class MemberSource(Protocol):
    """The group's member list as the brokers of a topic know it (client.consumer_ops.ConsumerOps)."""

    async def consumer_ids(self, topic: str, timeout: float | None = None,
                           answers: dict | None = None) -> list[str]: ...


Quiesce = Callable[[ProcessQueue, float], Awaitable[bool]]


class RebalanceCoordinator:
    """Owns the changes to subscription.assignment; `guard` serialises them with lock renewal and offset resets."""

    def __init__(
        self,
        group: str,
        client_id: str,
        allocate_strategy: AllocateStrategy,
        subscription: SubscriptionState,
        routes: RouteSource,
        members: MemberSource,
        offsets: ConsumeOffsets,
        fetcher: PullFetcher,
        new_queue: Callable[[MessageQueue], ProcessQueue],
        guard: asyncio.Lock,
        *,
        locks: BatchLocks | None = None,
        quiesce: Quiesce | None = None,
        quiesce_grace: float = 5.0,
    ) -> None:
        self.group = group
        self.client_id = client_id
        self.allocate_strategy = allocate_strategy
        self.subscription = subscription
        self.routes = routes
        self.members = members
        self.offsets = offsets
        self.fetcher = fetcher
        self.new_queue = new_queue
        self.guard = guard
        self.locks = locks  # orderly CLUSTERING only: queues are locked before they are pulled
        self.quiesce = quiesce  # orderly only: wait for a dropped queue's running listener call
        self.quiesce_grace = quiesce_grace
        self.wake = asyncio.Event()
        self.stopping = False

    @property
    def process_queues(self) -> dict[MessageQueue, ProcessQueue]:
        return self.subscription.assignment

    def trigger(self) -> None:
        """Rebalance now (at the service loop's next turn)."""
        self.wake.set()

    async def run(self, interval: float) -> None:
        """Rebalance every interval seconds or when triggered, until stopping."""
        while not self.stopping:
            await wait_event(self.wake, interval)
            self.wake.clear()
            try:
                await self.rebalance()
            except Exception:
                log.exception("rebalance of group %s failed", self.group)

    async def _wanted_queues(self) -> set[MessageQueue]:
        wanted: set[MessageQueue] = set()
        held = self.subscription.assignment
        consumer_lists: dict = {}  # broker address -> its list of the group, asked once per rebalance
        for topic in self.subscription.all_subscriptions():
            route = self.routes.routes.get(topic)
            if route is None:
                try:
                    route = await self.routes.update_route(topic)
                except Exception as exc:
                    log.debug("rebalance: no route for %s: %s", topic, exc)
                    continue
            queues = sort_queues(route.subscribe_queues(topic))
            if not self.subscription.clustering:
                wanted.update(queues)
                continue
            try:
                cids = sorted(await self.members.consumer_ids(topic, answers=consumer_lists))
            except Exception as exc:
                log.debug("rebalance: consumer list for %s unavailable: %s", topic, exc)
                wanted.update(mq for mq in held if mq.topic == topic)  # keep until it answers
                continue
            try:
                mine = self.allocate_strategy(self.group, self.client_id, queues, cids)
            except Exception:
                log.exception("allocate strategy %r failed for topic %s", self.allocate_strategy, topic)
                mine = [mq for mq in held if mq.topic == topic]
            known = set(queues)
            wanted.update(mq for mq in mine if mq in known)
        return wanted

    async def rebalance(self) -> None:
        async with self.guard:
            if self.stopping:
                return
            held = self.subscription.assignment
            wanted = await self._wanted_queues()
            subs = self.subscription.all_subscriptions()
            gone = [mq for mq in held if mq not in wanted or mq.topic not in subs]
            if gone:
                await asyncio.gather(*(self._drop_queue(mq) for mq in gone))
            new = sort_queues(wanted - set(held))
            locked_at = 0.0
            if new and self.locks is not None:
                # Orderly: only queues this client could lock; the others are tried again next rebalance.
                granted = await self.locks.lock(new)
                locked_at = time.monotonic()
                new = [mq for mq in new if mq in granted]
            for mq in new:
                if self.stopping:
                    return
                await self._add_queue(mq, locked_at)

    async def _add_queue(self, mq: MessageQueue, locked_at: float) -> None:
        try:
            offset = await self.offsets.initial_offset(mq)  # orderly: read after the lock, as required
        except Exception as exc:
            log.debug("cannot compute the start offset of %s: %s", mq, exc)
            if self.locks is not None:
                await self.locks.unlock([mq])
            return
        pq = self.new_queue(mq)
        if self.locks is not None:
            pq.lock_granted(locked_at)
        pq.advance_to(offset)
        self.subscription.assignment[mq] = pq
        self.offsets.store.update(mq, offset)
        self.fetcher.start(pq, offset)

    async def _drop_queue(self, mq: MessageQueue) -> None:
        """A queue moved away: stop pulling it, commit its offset (acknowledged), forget it.

        Orderly: first wait for its running listener call to settle, and release the broker lock only after the
        offset is committed, so the next owner starts exactly where this one stopped."""
        pq = self.subscription.assignment.pop(mq, None)
        if pq is not None:
            pq.dropped = True
        await self.fetcher.stop(mq)
        settled = True
        if self.quiesce is not None and pq is not None:
            settled = await self.quiesce(pq, self.quiesce_grace)
        await self.offsets.commit_and_forget(mq)
        if self.locks is not None and pq is not None and pq.locked:
            if settled:
                await self.locks.unlock([mq])
            else:
                log.warning("listener still running on dropped %s; its lock is left to expire on the broker", mq)

    async def reset_offsets(self, offsets: dict[tuple[str, str, int], int]) -> None:
        """Drop each reset queue (its in-flight messages are not committed), store the new offset, rebalance: the
        queue is then pulled again from the offset the broker now holds."""
        async with self.guard:
            held = self.subscription.assignment
            for mq in [mq for mq in held if (mq.topic, mq.broker_name, mq.queue_id) in offsets]:
                pq = held.pop(mq)
                pq.dropped = True
                await self.fetcher.stop(mq)
                await self.offsets.store_reset(mq, offsets[(mq.topic, mq.broker_name, mq.queue_id)])
        self.trigger()
