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
"""

from __future__ import annotations

import asyncio
import inspect
import logging
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
        self._queue: asyncio.Queue[tuple[ProcessQueue, list[MessageExt]]] = asyncio.Queue()
        self._workers: list[asyncio.Task] = []
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
        self._workers = [
            asyncio.create_task(self._worker(), name=f"consume-{self.group}-{i}") for i in range(self.thread_max)
        ]

    async def shutdown(self, grace: float) -> None:
        """Hand back queued chunks (their offsets stay uncommitted), let running listeners finish within grace."""
        self.running = False
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        while not self._queue.empty():
            self._queue.get_nowait()
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

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    # ------------------------------------------------------------------ intake
    def submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        """Queue a pulled batch (already recorded in pq) for consumption, in chunks of batch_max_size."""
        if pq.mq.topic == self.retry_topic:
            restore_retry_topics(messages)
        put = self._queue.put_nowait
        size = self.batch_max_size
        if size == 1:
            for m in messages:
                put((pq, [m]))
        elif len(messages) <= size:
            put((pq, messages))
        else:
            for i in range(0, len(messages), size):
                put((pq, messages[i : i + size]))

    # ------------------------------------------------------------------ consuming
    async def _worker(self) -> None:
        get = self._queue.get
        consume = self.consume
        while True:
            pq, messages = await get()
            self._busy += 1
            self._idle.clear()
            try:
                await consume(pq, messages)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not kill the worker
                log.exception("consume of %d message(s) from %s failed", len(messages), pq.mq)
            finally:
                self._busy -= 1
                if not self._busy:
                    self._idle.set()

    async def consume(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        """Run the listener on one chunk and settle the outcome."""
        if pq.dropped:
            return  # the queue moved to another consumer: it resumes from the committed offset
        context = ConsumeConcurrentlyContext(pq.mq)
        deadline = asyncio.timeout(self.consume_timeout)  # cancels an async listener; a thread's result is dropped
        try:
            async with deadline:
                result = await invoke_listener(self.listener_info, messages, context, self._pool)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, TimeoutError) and deadline.expired():
                await self._expire(pq, messages)
                return
            log.exception("listener of group %s raised on %d message(s); treating as RECONSUME_LATER",
                          self.group, len(messages))
            result = ConsumeResult.RECONSUME_LATER
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
        await self._send_back_or_retry(pq, messages, failed, context.delay_level_when_next_consume)

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
                self._queue.put_nowait((pq, messages))

        timer = loop.call_later(LOCAL_RETRY_DELAY, resubmit)
        self._timers.add(timer)

    def _advance(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        offset = pq.remove(messages)
        if offset >= 0 and not pq.dropped:
            self.offset_store.update(pq.mq, offset)
