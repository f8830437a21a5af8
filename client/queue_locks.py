"""Broker-side queue locks of an orderly CLUSTERING consumer: LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42).

A queue is consumed in order only while one member of the group holds the broker's lock on it. The consumer locks a
queue before it starts pulling it (rebalance), renews all its locks every 20 s (the broker drops a lock after 60 s
without renewal; the client itself treats a lock older than 30 s as lost, see ProcessQueue.holds_lock), and unlocks a
queue after it stopped consuming it (rebalance moved it away, shutdown).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Protocol

from client.consumer_ops import ConsumerOps
from client.message import MessageQueue
from client.process_queue import ProcessQueue
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.jsonlenient import dumps_compact, loads_lenient

log = logging.getLogger(__name__)

__all__ = ["LOCK_RENEW_INTERVAL", "BatchLocks", "LockKeeper", "QueueLocks"]

LOCK_RENEW_INTERVAL = 20.0


def _queue_json(mq: MessageQueue) -> dict:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}


def _by_broker(mqs: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
    groups: dict[str, list[MessageQueue]] = defaultdict(list)
    for mq in mqs:
        groups[mq.broker_name].append(mq)
    return groups


class QueueLocks:
    """Lock / unlock batches of queues for one consumer group and client id, one request per broker."""

    def __init__(self, ops: ConsumerOps, client_id: str, timeout: float = 3.0) -> None:
        self.ops = ops
        self.client_id = client_id
        self.timeout = timeout

    def _body(self, mqs: list[MessageQueue]) -> bytes:
        return dumps_compact(
            {
                "consumerGroup": self.ops.group,
                "clientId": self.client_id,
                "onlyThisBroker": False,
                "mqSet": [_queue_json(mq) for mq in mqs],
            }
        )

    async def lock(self, mqs: Iterable[MessageQueue]) -> set[MessageQueue]:
        """The subset of mqs this client now holds (newly granted or renewed); unreachable brokers grant nothing."""
        groups = _by_broker(mqs)
        if not groups:
            return set()
        results = await asyncio.gather(*(self._lock_on_broker(queues) for queues in groups.values()))
        granted: set[MessageQueue] = set()
        for part in results:
            granted |= part
        return granted

    async def _lock_on_broker(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        try:
            addr = await self.ops.broker_addr(mqs[0])
            reply = await self.ops.instance.invoke_broker(
                addr, RemotingCommand(code=RequestCode.LOCK_BATCH_MQ, ext_fields={}, body=self._body(mqs)),
                self.timeout,
            )
        except Exception as exc:
            log.debug("LOCK_BATCH_MQ for %d queue(s) of %s failed: %s", len(mqs), mqs[0].broker_name, exc)
            return set()
        if reply.code != ResponseCode.SUCCESS:
            log.debug("LOCK_BATCH_MQ refused by %s: %s %s", mqs[0].broker_name, reply.code, reply.remark)
            return set()
        try:
            data = loads_lenient(reply.body) if reply.body else {}
            entries = (data.get("lockOKMQSet") if isinstance(data, dict) else None) or []
            granted = {
                MessageQueue(str(e["topic"]), str(e["brokerName"]), int(e["queueId"])) for e in entries
            }
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable LOCK_BATCH_MQ answer from %s: %s", mqs[0].broker_name, exc)
            return set()
        asked = set(mqs)
        return granted & asked

    async def unlock(self, mqs: Iterable[MessageQueue]) -> None:
        """Release locks (acknowledged, errors only logged: an unreleased lock simply expires on the broker)."""
        groups = _by_broker(mqs)
        if groups:
            await asyncio.gather(*(self._unlock_on_broker(queues) for queues in groups.values()))

    async def _unlock_on_broker(self, mqs: list[MessageQueue]) -> None:
        try:
            addr = await self.ops.broker_addr(mqs[0])
            reply = await self.ops.instance.invoke_broker(
                addr, RemotingCommand(code=RequestCode.UNLOCK_BATCH_MQ, ext_fields={}, body=self._body(mqs)),
                self.timeout,
            )
            if reply.code != ResponseCode.SUCCESS:
                log.debug("UNLOCK_BATCH_MQ refused by %s: %s %s", mqs[0].broker_name, reply.code, reply.remark)
        except Exception as exc:
            log.debug("UNLOCK_BATCH_MQ for %d queue(s) of %s failed: %s", len(mqs), mqs[0].broker_name, exc)


class BatchLocks(Protocol):
    """What LockKeeper needs of QueueLocks (tests give a fake)."""

    async def lock(self, mqs: Iterable[MessageQueue]) -> set[MessageQueue]: ...

    async def unlock(self, mqs: Iterable[MessageQueue]) -> None: ...


class LockKeeper:
    """Keeps the broker locks of an orderly CLUSTERING consumer's assigned queues: periodic renewal, and relocking
    a queue whose lock lapsed (asked by the orderly consume service).

    `guard` is the lock that serialises changes to the assignment (the rebalance coordinator holds it while it adds
    or drops queues), so a queue being dropped and unlocked is never locked again behind the coordinator's back."""

    def __init__(self, locks: BatchLocks, assignment: Mapping[MessageQueue, ProcessQueue], guard: asyncio.Lock,
                 group: str = "") -> None:
        self.locks = locks
        self.assignment = assignment
        self.guard = guard
        self.group = group
        self.stopping = False

    async def run(self, interval: float = LOCK_RENEW_INTERVAL) -> None:
        """Renew every interval seconds until cancelled; a queue the broker no longer grants stops being consumed."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.renew()
            except Exception:
                log.exception("renewing the queue locks of group %s failed", self.group)

    async def renew(self) -> None:
        async with self.guard:
            queues = list(self.assignment.items())
            if not queues or self.stopping:
                return
            now = time.monotonic()
            granted = await self.locks.lock(mq for mq, _ in queues)
        for mq, pq in queues:
            if mq in granted:
                pq.lock_granted(now)
            elif pq.locked:
                log.warning("lost the lock on %s; its consumption pauses until it is locked again", mq)
                pq.locked = False

    async def relock(self, pq: ProcessQueue) -> bool:
        """Lock one queue whose lock lapsed; False when refused or the queue was dropped meanwhile."""
        if pq.dropped or self.stopping:
            return False
        now = time.monotonic()
        if pq.mq not in await self.locks.lock([pq.mq]):
            return False
        if pq.dropped or self.stopping:  # dropped meanwhile: do not keep the queue from its next owner
            await self.locks.unlock([pq.mq])
            return False
        pq.lock_granted(now)
        return True
