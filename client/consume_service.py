"""Concurrent consumption for the push consumer: a fixed pool of `consume_thread_max` workers.

Pulled messages are cut into chunks of at most `consume_message_batch_max_size` and queued; each worker takes one
chunk at a time and calls the listener, as ``listener(msgs)`` or, when it takes two parameters,
``listener(msgs, context)`` with a ConsumeConcurrentlyContext. An `async def` listener runs on the event loop (up to
consume_thread_max at once); a plain function runs in a thread pool of consume_thread_max threads, so blocking code
never stalls pulling. Outcomes, as in the reference client:
  * SUCCESS: the chunk is done and the queue's committable offset moves forward, except the messages after
    ``context.ack_index`` (partial success), which are handled as failed;
  * RECONSUME_LATER, an exception, or None (a forgotten return; warned about once per consumer): CLUSTERING sends
    each message back (client.consumer_ops.ConsumerOps.send_message_back: CONSUMER_SEND_MSG_BACK with
    ``context.delay_level_when_next_consume``, else a new message on %RETRY%<group>), which redelivers it through
    %RETRY%<group> after a delay. Only when both ways fail is it consumed again locally 5 s later, the queue's offset
    pinned before it meanwhile. BROADCASTING has no retry: a warning is logged and the messages count as consumed.
  * A call that holds its messages longer than ``consume_timeout`` seconds: the messages are sent back with delay
    level 3 and the queue moves on; an ``async`` listener is cancelled, a thread's eventual result is ignored.
    One sweep per second (or per consume_timeout / 10 when shorter) finds such calls, as the reference's
    cleanExpireMsg does, so no timer is armed per call.

The per-message path is kept short on purpose (a push consumer calls it for every message): chunks wait in a deque,
not an asyncio.Queue; a context is made only for a listener that takes one.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from client.consume_context import ConsumeConcurrentlyContext, ListenerInfo
from client.message import ConsumeResult, MessageExt
from client.offset_store import OffsetStore
from client.process_queue import ProcessQueue
from client.waiting import wait_event

log = logging.getLogger(__name__)

__all__ = ["ConsumeService", "invoke_listener", "restore_retry_topics"]

RETRY_PREFIX = "%RETRY%"
LOCAL_RETRY_DELAY = 5.0
TIMEOUT_DELAY_LEVEL = 3  # the reference's delay level for messages whose consumption timed out

Listener = Callable[[list[MessageExt]], "ConsumeResult | None | Awaitable[ConsumeResult | None]"]
SendBack = Callable[[ProcessQueue, MessageExt, int], Awaitable[bool]]


def restore_retry_topics(messages: list[MessageExt]) -> None:
    """Messages pulled from %RETRY%<group>: listeners see the topic each was first sent to (RETRY_TOPIC)."""
    for m in messages:
        original = m.properties.get("RETRY_TOPIC")
        if original:
            m.topic = original


async def invoke_listener(info: ListenerInfo, messages: list[MessageExt], context: object,
                          pool: ThreadPoolExecutor | None):
    """Call a user listener with (messages) or (messages, context) as its signature asks: plain functions run in the
    consume thread pool (when there is one), coroutine functions on the loop. Exceptions propagate to the caller,
    which decides what a failure means."""
    listener = info.listener
    if pool is not None:
        loop = asyncio.get_running_loop()
        if info.takes_context:
            result = await loop.run_in_executor(pool, listener, messages, context)
        else:
            result = await loop.run_in_executor(pool, listener, messages)
    else:
        result = listener(messages, context) if info.takes_context else listener(messages)
    if inspect.isawaitable(result):
        result = await result
    return result


class ConsumeService:
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
        consume_timeout: float = 900.0,
    ) -> None:
        self.group = group
        self.consume_timeout = consume_timeout
        self.listener = listener
        self.listener_info = ListenerInfo(listener)
        self.offset_store = offset_store
        self.send_back = send_back
        self.thread_max = max(1, thread_max)
        self.batch_max_size = max(1, batch_max_size)
        self.clustering = clustering
        self.retry_topic = RETRY_PREFIX + group
        self._chunks: deque[tuple[ProcessQueue, list[MessageExt]]] = deque()
        self._wake: list[asyncio.Future] = []  # one future per worker waiting for a chunk
        self._workers: list[asyncio.Task] = []
        self._started: list[float] = []  # per worker: loop time its listener call began, 0.0 when not in one
        self._expiring: set[int] = set()  # workers cancelled by the sweep for holding a chunk too long
        self._sweeper: asyncio.TimerHandle | None = None
        self._busy = 0
        self._idle: asyncio.Event = asyncio.Event()
        self._idle.set()
        self._pool: ThreadPoolExecutor | None = None
        self._timers: set[asyncio.TimerHandle] = set()
        self.running = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self.running:
            return
        self.running = True
        if not self.listener_info.is_async:
            self._pool = ThreadPoolExecutor(self.thread_max, thread_name_prefix=f"consume-{self.group}")
        self._started = [0.0] * self.thread_max
        self._workers = [
            asyncio.create_task(self._worker(i), name=f"consume-{self.group}-{i}") for i in range(self.thread_max)
        ]
        self._sweeper = asyncio.get_running_loop().call_later(self._sweep_interval(), self._sweep)

    async def shutdown(self, grace: float) -> None:
        """Hand back queued chunks (their offsets stay uncommitted), let running listeners finish within grace."""
        self.running = False
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self._chunks.clear()
        if self._busy:
            if not await wait_event(self._idle, grace):
                log.warning("group %s: %d consume call(s) still running after %.1fs; their messages will be "
                            "redelivered", self.group, self._busy, grace)
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def call_listener(self, messages: list[MessageExt], context: object) -> object:
        """The listener's result for messages, outside the queues (CONSUME_MESSAGE_DIRECTLY): no offset moves, nothing
        is sent back; an exception propagates."""
        return await invoke_listener(self.listener_info, messages, context, self._pool)

    @property
    def queued(self) -> int:
        return len(self._chunks)

    # ------------------------------------------------------------------ intake
    def submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        """Queue a pulled batch (already recorded in pq) for consumption, in chunks of batch_max_size."""
        if pq.mq.topic == self.retry_topic:
            restore_retry_topics(messages)
        chunks = self._chunks
        size = self.batch_max_size
        if size == 1:
            chunks.extend([(pq, [m]) for m in messages])
        elif len(messages) <= size:
            chunks.append((pq, messages))
        else:
            chunks.extend([(pq, messages[i : i + size]) for i in range(0, len(messages), size)])
        self._wake_workers()

    def _put(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        self._chunks.append((pq, messages))
        self._wake_workers()

    def _wake_workers(self) -> None:
        """Wake as many waiting workers as there are chunks (each waiter's future is resolved once)."""
        wake = self._wake
        n = min(len(wake), len(self._chunks))
        if n:
            for fut in wake[:n]:
                if not fut.done():
                    fut.set_result(None)
            del wake[:n]

    # ------------------------------------------------------------------ consuming
    async def _worker(self, index: int) -> None:
        chunks = self._chunks
        consume = self.consume
        loop = asyncio.get_running_loop()
        while True:
            if not chunks:
                waiter = loop.create_future()
                self._wake.append(waiter)
                await waiter
                continue
            pq, messages = chunks.popleft()
            self._busy += 1
            self._idle.clear()
            try:
                await consume(pq, messages, index)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not kill the worker
                log.exception("consume of %d message(s) from %s failed", len(messages), pq.mq)
            finally:
                self._busy -= 1
                if not self._busy:
                    self._idle.set()

    def _sweep_interval(self) -> float:
        return max(0.05, min(1.0, self.consume_timeout / 10))

    def _sweep(self) -> None:
        """Cancel listener calls older than consume_timeout (their worker sends the messages back)."""
        self._sweeper = None
        if not self.running:
            return
        loop = asyncio.get_running_loop()
        limit = loop.time() - self.consume_timeout
        for index, started in enumerate(self._started):
            if started and started <= limit and index not in self._expiring:
                self._expiring.add(index)
                self._workers[index].cancel()
        self._sweeper = loop.call_later(self._sweep_interval(), self._sweep)

    async def consume(self, pq: ProcessQueue, messages: list[MessageExt], worker: int = -1) -> None:
        """Run the listener on one chunk and settle the outcome (worker: the calling worker's index, so the sweep
        can cancel a call that holds the chunk past consume_timeout)."""
        if pq.dropped:
            return  # the queue moved to another consumer: it resumes from the committed offset
        info = self.listener_info
        context = ConsumeConcurrentlyContext(pq.mq) if info.takes_context else None
        started = self._started
        if worker >= 0:
            started[worker] = asyncio.get_running_loop().time() or 1e-9
        try:
            if self._pool is None and not info.takes_context:
                result = info.listener(messages)
                if info.is_async or inspect.isawaitable(result):
                    result = await result
            else:
                result = await invoke_listener(info, messages, context, self._pool)
        except asyncio.CancelledError:
            if worker < 0 or worker not in self._expiring:
                raise
            self._expiring.discard(worker)
            started[worker] = 0.0
            asyncio.current_task().uncancel()
            await self._expire(pq, messages)
            return
        except Exception:
            log.exception("listener of group %s raised on %d message(s); treating as RECONSUME_LATER",
                          self.group, len(messages))
            result = ConsumeResult.RECONSUME_LATER
        finally:
            if worker >= 0:
                started[worker] = 0.0
        if result is ConsumeResult.SUCCESS and (context is None or context.ack_index >= len(messages) - 1):
            self._advance(pq, messages)
            return
        if result is None:
            self.listener_info.warn_none_once(self.group, "RECONSUME_LATER")
            result = ConsumeResult.RECONSUME_LATER
        if result is ConsumeResult.SUCCESS:
            ack_index = min(context.ack_index, len(messages) - 1)
        else:
            if not isinstance(result, ConsumeResult):
                log.warning("listener of group %s returned %r, not a ConsumeResult; treating as RECONSUME_LATER",
                            self.group, result)
            ack_index = -1
        if ack_index >= len(messages) - 1:
            self._advance(pq, messages)
            return
        failed = messages[ack_index + 1:] if ack_index >= 0 else messages
        if not self.clustering:
            log.warning("group %s (broadcasting): %d message(s) failed and are not retried, e.g. %s",
                        self.group, len(failed), failed[0].msg_id)
            self._advance(pq, messages)
            return
        delay_level = context.delay_level_when_next_consume if context is not None else 0
        await self._send_back_or_retry(pq, messages, failed, delay_level)

    async def _send_back_or_retry(self, pq: ProcessQueue, messages: list[MessageExt], failed: list[MessageExt],
                                  delay_level: int) -> None:
        """Send the failed messages back; the chunk's offset moves past all but those no way could hand back."""
        refused = []
        for m in failed:
            if not await self.send_back(pq, m, delay_level):
                m.reconsume_times = m.reconsume_times + 1  # counted locally, as the Java client does
                refused.append(m)
        if refused:
            done = [m for m in messages if m not in refused]
            if done:
                self._advance(pq, done)
            self._retry_locally(pq, refused)
            return
        self._advance(pq, messages)

    async def _expire(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        """The listener held the chunk past consume_timeout: send it back (delay level 3) and move on."""
        log.warning("listener %s of group %s held %d message(s) of %s for more than %.0f s (consume_timeout); "
                    "sending them back, e.g. %s", self.listener_info.name, self.group, len(messages), pq.mq,
                    self.consume_timeout, messages[0].msg_id)
        if pq.dropped:
            return
        if not self.clustering:
            self._advance(pq, messages)
            return
        await self._send_back_or_retry(pq, messages, messages, TIMEOUT_DELAY_LEVEL)

    def _retry_locally(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None

        def resubmit() -> None:
            self._timers.discard(timer)
            if self.running and not pq.dropped:
                self._put(pq, messages)

        timer = loop.call_later(LOCAL_RETRY_DELAY, resubmit)
        self._timers.add(timer)

    def _advance(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        offset = pq.remove(messages)
        if offset >= 0 and not pq.dropped:
            self.offset_store.update(pq.mq, offset)
