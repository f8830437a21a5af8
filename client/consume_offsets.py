"""Offset persistence of a push consumer: where a newly assigned queue starts, and keeping commits flowing.

The offset store (client.offset_store) only keeps and writes numbers; this part holds the consumer's policy around
it: the start offset of a queue the group has no committed offset for (consume_from_where), the periodic commit, and
the acknowledged commit when a queue leaves this member or an admin resets it. The rebalance coordinator and the
facade use it; the pull loops and consume services write the store directly (hot path).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Protocol

from client.consume_service import RETRY_PREFIX
from client.consumer_ops import ConsumerOps
from client.message import MessageQueue
from client.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    RemoteOffsetStore,
    default_offset_store_dir,
)

log = logging.getLogger(__name__)

__all__ = ["ConsumeOffsets", "OffsetLookup", "make_offset_store"]


class OffsetLookup(Protocol):
    """Broker queries for a queue's bounds (client.consumer_ops.ConsumerOps)."""

    async def min_offset(self, mq: MessageQueue) -> int: ...

    async def max_offset(self, mq: MessageQueue) -> int: ...

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int: ...


def make_offset_store(ops: ConsumerOps, *, clustering: bool, base_dir: str | os.PathLike | None, client_id: str,
                      group: str) -> OffsetStore:
    """CLUSTERING: the group's offsets on the broker; BROADCASTING: this instance's own file."""
    if clustering:
        return RemoteOffsetStore(ops)
    base = base_dir if base_dir is not None else default_offset_store_dir()
    return LocalFileOffsetStore(os.path.join(base, client_id, group, "offsets.json"))


class ConsumeOffsets:
    """Start offsets, periodic commits and acknowledged commits for one consumer's offset store."""

    def __init__(self, group: str, store: OffsetStore, lookup: OffsetLookup, *, consume_from_where: str,
                 consume_timestamp: int) -> None:
        self.group = group
        self.store = store
        self.lookup = lookup
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp

    async def initial_offset(self, mq: MessageQueue) -> int:
        """Where a newly assigned queue starts: its committed offset, else what consume_from_where says."""
        # An explicit start time must not be overridden by the broker's young-queue rule (offset 0 when the queue
        # still holds its first message); LAST_OFFSET keeps that rule, as RocketMQ does, so that a new group on a
        # new topic never skips messages produced before its members registered.
        retry = mq.topic.startswith(RETRY_PREFIX)
        by_time = self.consume_from_where == "CONSUME_FROM_TIMESTAMP" and not retry
        stored = await self.store.fetch(mq, zero_if_not_found=not by_time)
        if stored >= 0:
            return stored
        if retry or self.consume_from_where == "CONSUME_FROM_FIRST_OFFSET":
            return await self.lookup.min_offset(mq)
        if self.consume_from_where == "CONSUME_FROM_TIMESTAMP":
            return await self.lookup.search_offset(mq, self.consume_timestamp)
        return await self.lookup.max_offset(mq)

    async def commit_and_forget(self, mq: MessageQueue) -> None:
        """A queue left this member: commit its offset (acknowledged; failures logged) and drop it from the store."""
        try:
            await self.store.persist(mq)
        except Exception as exc:
            log.warning("offset commit for dropped %s failed: %s", mq, exc)
        self.store.remove(mq)

    async def store_reset(self, mq: MessageQueue, offset: int) -> None:
        """An admin reset mq to offset: commit that (acknowledged) and forget it, so the next start reads it back."""
        self.store.update(mq, offset)
        try:
            await self.store.persist(mq)
        except Exception as exc:
            log.warning("storing the reset offset of %s failed: %s", mq, exc)
        self.store.remove(mq)
        log.info("%s: offset of %s reset to %d", self.group, mq, offset)

    async def run_persist(self, interval: float) -> None:
        """Commit changed offsets every interval seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.store.persist_all()
            except Exception:
                log.exception("persisting offsets of group %s failed", self.group)
