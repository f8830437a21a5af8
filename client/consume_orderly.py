"""Orderly consumption for the push consumer: each message queue is consumed by one task at a time, in queue order.

`PushConsumer.register_listener(listener, orderly=True)` selects this service instead of the concurrent pool.

* One task per queue with messages waiting; at most `consume_thread_max` listener calls run at once over all queues.
  Each call gets the next (up to) `consume_message_batch_max_size` messages of its queue, never skipping ahead.
* CLUSTERING: a queue is consumed only while this client holds the broker's lock on it (ProcessQueue.holds_lock);
  when the lock is lost or has not been renewed for 30 s, consumption of that queue pauses and the service asks for
  the lock again about once a second. BROADCASTING needs no locks (order is per process).
* Outcomes: SUCCESS (or None) commits past the messages. SUSPEND_CURRENT_QUEUE_A_MOMENT, RECONSUME_LATER or an
  exception puts the same messages back at the head of the queue and retries them after
  `suspend_current_queue_time_millis`, counting `reconsume_times` locally. A message that already failed
  `max_reconsume_times` times (negative = retry forever) goes to `%DLQ%<group>` (CLUSTERING: CONSUMER_SEND_MSG_BACK
  with delayLevel -1; if the broker refuses, it is suspended and tried again) and the queue moves on past it.
  BROADCASTING has no DLQ: such a message is logged and skipped.
* The committed offset is the smallest offset still pulled but not consumed, so it only moves past messages that were
  consumed (or dead-lettered), in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from client.consume_context import ConsumeOrderlyContext, ListenerInfo
from client.consume_service import RETRY_PREFIX, Listener, invoke_listener, restore_retry_topics
from client.message import ConsumeOrderlyResult, ConsumeResult, MessageExt
from client.offset_store import OffsetStore
from client.process_queue import ProcessQueue
from client.waiting import wait_event

log = logging.getLogger(__name__)

__all__ = ["ConsumeOrderlyService"]

RELOCK_RETRY_INTERVAL = 1.0
DLQ_DELAY_LEVEL = -1  # CONSUMER_SEND_MSG_BACK: straight to %DLQ%<group>

_SUCCESS = (None, ConsumeOrderlyResult.SUCCESS, ConsumeResult.SUCCESS)
_SUSPEND = (ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT, ConsumeResult.RECONSUME_LATER)

SendBack = Callable[[ProcessQueue, MessageExt, int], Awaitable[bool]]
Relock = Callable[[ProcessQueue], Awaitable[bool]]


class _QueueState:
    """Messages of one queue waiting for the listener, and the task consuming them."""

    __slots__ = ("pending", "task", "busy", "idle")

    def __init__(self) -> None:
        self.pending: deque[MessageExt] = deque()
        self.task: asyncio.Task | None = None
        self.busy = False  # inside a listener call or settling its outcome
        self.idle = asyncio.Event()
        self.idle.set()


class ConsumeOrderlyService:
    def __init__(
        self,
        group: str,
        listener: Listener,
        offset_store: OffsetStore,
        send_back: SendBack,
        *,
        thread_max: int = 20,
        batch_max_size: int = 1,
        clustering: bool = True,
        max_reconsume_times: int = 16,
        suspend_time: float = 1.0,
        relock: Relock | None = None,
    ) -> None:
        self.group = group
        self.listener = listener
        self.listener_info = ListenerInfo(listener)
        self.offset_store = offset_store
        self.send_back = send_back
        self.thread_max = max(1, thread_max)
        self.batch_max_size = max(1, batch_max_size)
        self.clustering = clustering
        self.max_reconsume_times = max_reconsume_times
        self.suspend_time = max(0.0, suspend_time)
        self.relock = relock
        self.retry_topic = RETRY_PREFIX + group
        self._states: dict[ProcessQueue, _QueueState] = {}
        self._slots: asyncio.Semaphore | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.running = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self.running:
            return
        self.running = True
        self._slots = asyncio.Semaphore(self.thread_max)
        if not self.listener_info.is_async:
            self._pool = ThreadPoolExecutor(self.thread_max, thread_name_prefix=f"consume-orderly-{self.group}")

    async def shutdown(self, grace: float) -> list[ProcessQueue]:
        """Stop taking new messages, let running listener calls finish within grace (their outcome is settled);
        returns the queues whose call was still running."""
        self.running = False
        busy = [s for s in self._states.values() if s.busy]
        if busy:
            try:
                await asyncio.wait_for(asyncio.gather(*(s.idle.wait() for s in busy)), grace)
            except asyncio.TimeoutError:
                log.warning("group %s: orderly consume call(s) still running after %.1fs; their messages will be "
                            "redelivered", self.group, grace)
        still_busy = [pq for pq, s in self._states.items() if s.busy]
        tasks = [s.task for s in self._states.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._states.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        return still_busy

    @property
    def queued(self) -> int:
        return sum(len(s.pending) for s in self._states.values())

    def is_busy(self, pq: ProcessQueue) -> bool:
        state = self._states.get(pq)
        return state is not None and state.busy

    async def quiesce(self, pq: ProcessQueue, timeout: float) -> bool:
        """Forget a dropped queue once its running listener call (if any) is settled; False if still running after
        timeout (then its broker lock must not be released: it expires on its own)."""
        state = self._states.get(pq)
        if state is None:
            return True
        if state.busy:
            if not await wait_event(state.idle, timeout):
                return False
        self._states.pop(pq, None)
        if state.task is not None:
            state.task.cancel()
        return True

    # ------------------------------------------------------------------ intake
    def submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        """Queue a pulled batch (already recorded in pq, ascending offsets) behind the queue's earlier messages."""
        if not self.running or pq.dropped:
            return
        if pq.mq.topic == self.retry_topic:
            restore_retry_topics(messages)
        state = self._states.get(pq)
        if state is None:
            state = self._states[pq] = _QueueState()
        state.pending.extend(messages)
        if state.task is None:
            state.task = asyncio.create_task(self._run(pq, state), name=f"consume-orderly-{pq.mq}")

    # ------------------------------------------------------------------ consuming
    async def _run(self, pq: ProcessQueue, state: _QueueState) -> None:
        try:
            while self.running and not pq.dropped:
                if self.clustering and not pq.holds_lock():
                    if not await self._try_relock(pq):
                        await asyncio.sleep(RELOCK_RETRY_INTERVAL)
                    continue
                pending = state.pending
                if not pending:
                    return
                batch = [pending.popleft() for _ in range(min(self.batch_max_size, len(pending)))]
                async with self._slots:
                    if pq.dropped or not self.running:
                        pending.extendleft(reversed(batch))
                        return
                    state.busy = True
                    state.idle.clear()
                    try:
                        retry = await self._consume(pq, batch)
                    finally:
                        state.busy = False
                        state.idle.set()
                if retry:
                    pending.extendleft(reversed(retry))
                    await asyncio.sleep(self.suspend_time)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug here must not wedge the queue silently
            log.exception("orderly consumption of %s stopped", pq.mq)
        finally:
            if state.task is asyncio.current_task():
                state.task = None

    async def _try_relock(self, pq: ProcessQueue) -> bool:
        if self.relock is None:
            return False
        try:
            return await self.relock(pq)
        except Exception as exc:
            log.debug("relock of %s failed: %s", pq.mq, exc)
            return False

    async def _call_listener(self, messages: list[MessageExt], context: ConsumeOrderlyContext):
        try:
            result = await invoke_listener(self.listener_info, messages, context, self._pool)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("orderly listener of group %s raised on %d message(s); suspending the queue",
                          self.group, len(messages))
            return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if result not in _SUCCESS and result not in _SUSPEND:
            log.warning("orderly listener of group %s returned %r; treating as SUSPEND_CURRENT_QUEUE_A_MOMENT",
                        self.group, result)
        return result

    async def _consume(self, pq: ProcessQueue, batch: list[MessageExt]) -> list[MessageExt]:
        """One listener call and its outcome; returns the messages to consume again after the suspend time."""
        result = await self._call_listener(batch, ConsumeOrderlyContext(pq.mq))
        if result in _SUCCESS:
            self._commit(pq, batch)
            return []
        limit = self.max_reconsume_times
        retry: list[MessageExt] = []
        dead: list[MessageExt] = []
        for m in batch:
            if 0 <= limit <= m.reconsume_times:
                dead.append(m)
            else:
                m.reconsume_times = m.reconsume_times + 1
                retry.append(m)
        if dead:
            settled = []
            for m in dead:
                if not self.clustering:
                    log.warning("group %s (broadcasting): %s failed %d times; skipped", self.group, m.msg_id,
                                m.reconsume_times + 1)
                    settled.append(m)
                elif await self.send_back(pq, m, DLQ_DELAY_LEVEL):
                    settled.append(m)
                else:
                    retry.append(m)
            if settled:
                self._commit(pq, settled)
            if len(retry) > 1:
                retry.sort(key=lambda m: m.queue_offset)
        return retry

    def _commit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        offset = pq.remove(messages)
        # A queue being dropped waits for this call (quiesce) before it commits its offset, so record it until then.
        if offset >= 0 and (not pq.dropped or pq in self._states):
            self.offset_store.update(pq.mq, offset)
