"""Orderly consumption for the push consumer: each message queue is consumed by one task at a time, in queue order.

`PushConsumer.register_listener(listener, orderly=True)` selects this service instead of the concurrent pool.

* One task per queue with messages waiting; at most `consume_thread_max` listener calls run at once over all queues.
  Each call gets the next (up to) `consume_message_batch_max_size` messages of its queue, never skipping ahead.
* CLUSTERING: a queue is consumed only while this client holds the broker's lock on it (ProcessQueue.holds_lock);
  when the lock is lost or has not been renewed for 30 s, consumption of that queue pauses and the service asks for
  the lock again about once a second. BROADCASTING needs no locks (order is per process).
* Outcomes: SUCCESS commits past the messages. SUSPEND_CURRENT_QUEUE_A_MOMENT, RECONSUME_LATER, an exception or
  None (a forgotten return; warned about once per consumer) puts the same messages back at the head of the queue and
  retries them after `suspend_current_queue_time_millis` (or the listener's `context.suspend_current_queue_time_millis`,
  10..30000 ms), counting `reconsume_times` locally. A listener taking (msgs, context) may set `context.auto_commit =
  False`: SUCCESS then moves on without committing, COMMIT commits past everything consumed, ROLLBACK consumes
  everything since the last commit again. A message that already failed
  `max_reconsume_times` times (negative, the default = retry forever, as the reference) goes to `%DLQ%<group>` (CLUSTERING: CONSUMER_SEND_MSG_BACK
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

_SUCCESS = (ConsumeOrderlyResult.SUCCESS, ConsumeResult.SUCCESS, ConsumeOrderlyResult.COMMIT)
_SUSPEND = (ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT, ConsumeResult.RECONSUME_LATER)
_ROLLBACK = (ConsumeOrderlyResult.ROLLBACK,)
_KNOWN = _SUCCESS + _SUSPEND + _ROLLBACK
MIN_SUSPEND_MILLIS = 10  # the reference's bounds on a listener's own suspend time
MAX_SUSPEND_MILLIS = 30000

SendBack = Callable[[ProcessQueue, MessageExt, int], Awaitable[bool]]
Relock = Callable[[ProcessQueue], Awaitable[bool]]


class _QueueState:
    """Messages of one queue waiting for the listener, and the task consuming them."""

    __slots__ = ("pending", "consumed", "task", "busy", "idle")

    def __init__(self) -> None:
        self.pending: deque[MessageExt] = deque()
        # auto_commit=False: consumed with SUCCESS but not yet committed (COMMIT commits them, ROLLBACK redoes them)
        self.consumed: list[MessageExt] = []
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
        max_reconsume_times: int = -1,
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

    async def call_listener(self, messages: list[MessageExt], context: object) -> object:
        """The listener's result for messages, outside the queues (CONSUME_MESSAGE_DIRECTLY): no offset moves, nothing
        is sent back; an exception propagates."""
        return await invoke_listener(self.listener_info, messages, context, self._pool)

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
                        retry, suspend = await self._consume(pq, state, batch)
                    finally:
                        state.busy = False
                        state.idle.set()
                if retry:
                    pending.extendleft(reversed(retry))
                    await asyncio.sleep(suspend)
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
        if result is None:
            self.listener_info.warn_none_once(self.group, "SUSPEND_CURRENT_QUEUE_A_MOMENT")
            return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if result not in _KNOWN:
            log.warning("orderly listener of group %s returned %r; treating as SUSPEND_CURRENT_QUEUE_A_MOMENT",
                        self.group, result)
            return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return result

    def _suspend_seconds(self, context: ConsumeOrderlyContext) -> float:
        """The listener's own suspend time when it set one, else the consumer's, within the reference's bounds."""
        millis = context.suspend_current_queue_time_millis
        if millis == -1:
            return self.suspend_time
        return min(max(millis, MIN_SUSPEND_MILLIS), MAX_SUSPEND_MILLIS) / 1000.0

    async def _consume(self, pq: ProcessQueue, state: _QueueState, batch: list[MessageExt]
                       ) -> tuple[list[MessageExt], float]:
        """One listener call and its outcome; returns the messages to consume again and how long to wait first."""
        context = ConsumeOrderlyContext(pq.mq)
        result = await self._call_listener(batch, context)
        if context.auto_commit:
            if result in _SUCCESS or result in _ROLLBACK:
                if result in _ROLLBACK:
                    log.warning("orderly listener of group %s returned ROLLBACK with auto_commit on; treating it as "
                                "SUCCESS (set context.auto_commit = False to commit or roll back yourself)",
                                self.group)
                self._commit(pq, state.consumed + batch)
                state.consumed.clear()
                return [], 0.0
        else:
            if result in _SUCCESS and result is not ConsumeOrderlyResult.COMMIT:
                state.consumed.extend(batch)  # consumption moves on; the offset waits for COMMIT
                return [], 0.0
            if result is ConsumeOrderlyResult.COMMIT:
                self._commit(pq, state.consumed + batch)
                state.consumed.clear()
                return [], 0.0
            if result in _ROLLBACK:
                redo = state.consumed + batch
                state.consumed.clear()
                return redo, self._suspend_seconds(context)
        return await self._suspend(pq, batch), self._suspend_seconds(context)

    async def _suspend(self, pq: ProcessQueue, batch: list[MessageExt]) -> list[MessageExt]:
        """A failed batch: count its retries; messages past max_reconsume_times go to the DLQ, the rest wait."""
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
