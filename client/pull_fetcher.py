"""The push consumer's fetcher: one long-polling pull loop per assigned queue.

Separated from rebalancing so that the hot path (pull, record in the ProcessQueue, hand to the consume service) sees
only what it uses: the pull RPC, the queue's selector, the offset store and the consume service's submit. A queue's
loop pauses while its ProcessQueue is over the flow-control thresholds and resumes as soon as consumption drains it;
an orderly CLUSTERING queue is pulled only while its broker lock is held; a failed pull is retried after a back-off.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from client.errors import MQBrokerError
from client.message import (
    MessageExt,
    MessageQueue,
    MessageSelector,
    PullResult,
    PullStatus,
)
from client.offset_store import OffsetStore
from client.process_queue import ProcessQueue
from protocol.codes import ResponseCode

log = logging.getLogger(__name__)

__all__ = ["PullFetcher", "Puller"]

PULL_ERROR_BACKOFF = 3.0
FLOW_CONTROL_RECHECK = 1.0
UNLOCKED_PULL_RECHECK = 1.0  # an orderly queue whose lock is lost waits this long before checking again


class Puller(Protocol):
    """The one broker call the fetcher makes (client.consumer_ops.ConsumerOps.pull)."""

    async def pull(self, mq: MessageQueue, selector: MessageSelector, offset: int, max_nums: int, *,
                   timeout: float, suspend_timeout_ms: int = 0, commit_offset: int | None = None) -> PullResult: ...


class PullFetcher:
    """Starts and stops the pull loop of each queue; `stopping` ends every loop at its next turn."""

    def __init__(
        self,
        group: str,
        puller: Puller,
        selector: Callable[[str], MessageSelector],
        offset_store: OffsetStore,
        submit: Callable[[ProcessQueue, list[MessageExt]], None],
        *,
        pull_batch_size: int,
        suspend_timeout: float,
        clustering: bool,
        uses_locks: bool,
    ) -> None:
        self.group = group
        self.puller = puller
        self.selector = selector
        self.offset_store = offset_store
        self.submit = submit
        self.pull_batch_size = pull_batch_size
        self.suspend_timeout = suspend_timeout
        self.clustering = clustering
        self.uses_locks = uses_locks
        self.tasks: dict[MessageQueue, asyncio.Task] = {}
        self.stopping = False
        self._group_missing_reported = False

    def start(self, pq: ProcessQueue, offset: int) -> None:
        self.tasks[pq.mq] = asyncio.create_task(self._pull_loop(pq, offset), name=f"pull-{pq.mq}")

    async def stop(self, mq: MessageQueue) -> None:
        """Stop pulling mq and wait until its loop has ended."""
        task = self.tasks.pop(mq, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def stop_all(self) -> None:
        pulls = list(self.tasks.values())
        for task in pulls:
            task.cancel()
        await asyncio.gather(*pulls, return_exceptions=True)
        self.tasks.clear()

    async def _pull_loop(self, pq: ProcessQueue, offset: int) -> None:
        mq = pq.mq
        pull = self.puller.pull
        submit = self.submit
        store = self.offset_store
        clustering = self.clustering
        timeout = self.suspend_timeout + 15.0
        suspend_ms = int(self.suspend_timeout * 1000)
        uses_locks = self.uses_locks
        while not pq.dropped and not self.stopping:
            if uses_locks and not pq.holds_lock():
                await asyncio.sleep(UNLOCKED_PULL_RECHECK)  # only a locked queue is pulled (renewal relocks it)
                continue
            if pq.over_threshold():
                await pq.wait_until_drained(FLOW_CONTROL_RECHECK)  # flow control: consumption is behind
                continue
            try:
                result = await pull(
                    mq, self.selector(mq.topic), offset, self.pull_batch_size, timeout=timeout,
                    suspend_timeout_ms=suspend_ms, commit_offset=store.read(mq) if clustering else None,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._report_pull_error(mq, exc)
                await asyncio.sleep(PULL_ERROR_BACKOFF)
                continue
            if self._group_missing_reported:
                self._group_missing_reported = False
                log.warning("consumer group %s exists now on broker; consumption resumes", self.group)
            if pq.dropped:
                return
            pq.last_pull_time = time.monotonic()
            status = result.status
            offset = result.next_begin_offset
            if status is PullStatus.FOUND and result.messages:
                messages = result.messages
                pq.add(messages, offset)
                submit(pq, messages)
                continue
            pq.advance_to(offset)
            if status is PullStatus.OFFSET_ILLEGAL:
                log.warning("pull offset of %s was illegal; moving to %d", mq, offset)
                pq.pulled_until = offset
                store.update(mq, offset)
                try:
                    await store.persist(mq)
                except Exception:
                    pass
            elif not pq.inflight:  # NO_NEW_MSG / NO_MATCHED_MSG / everything filtered out client-side
                store.update(mq, pq.commit_offset())

    def _report_pull_error(self, mq: MessageQueue, exc: Exception) -> None:
        """A missing group is reported once (error) until pulls succeed again; other failures at debug level."""
        if isinstance(exc, MQBrokerError) and exc.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
            if not self._group_missing_reported:
                self._group_missing_reported = True
                log.error("consumer group %s receives nothing: broker %s says %s (create the group with "
                          "mqadmin updateSubGroup); pulls are retried every %.0f s", self.group, exc.addr,
                          exc.remark, PULL_ERROR_BACKOFF)
        else:
            log.debug("pull %s failed: %s; retrying in %.0f s", mq, exc, PULL_ERROR_BACKOFF)
