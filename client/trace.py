"""Message traces written by this client in the reference clients' format (protocol/trace.py), `enable_trace=True`.

A producer records one Pub record per sent message (group, topic, msgId, tags, keys, store host, body length, cost,
status); a push consumer records SubBefore/SubAfter for each listener call (group, msgId, retry times, per-message
cost, success and why not). Records go to a `TraceDispatcher`: a bounded in-memory queue drained by one background
task that sends them, up to `batch_size` records per trace message, through its own producer to the trace topic, with
the traced msgIds and keys as the trace message's KEYS (so QUERY_MESSAGE by key finds them). Nothing on the send or
consume path waits for a trace: appending is a deque append; a full queue drops the record (counted) rather than
slow the application down. Traces of messages whose TRACE_ON property is "false" are not recorded, and the trace
topic itself is never traced.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from client.consume_context import ListenerInfo
from client.message import ConsumeOrderlyResult, ConsumeResult, Message, SendResult, SendStatus
from client.send_hooks import SendContext
from protocol.trace import (
    MAX_TRACE_BODY, TRACE_TOPIC, ContextCode, MessageType, TraceRecord, encode_records, trace_keys)

if TYPE_CHECKING:
    from client.producer import Producer

log = logging.getLogger(__name__)

__all__ = ["TraceDispatcher", "PubTraceHook", "trace_producer", "traced_listener", "TRACE_PRODUCER_PREFIX"]

TRACE_PRODUCER_PREFIX = "_INNER_TRACE_PRODUCER"
DEFAULT_REGION = "DefaultRegion"
_SUCCESS = (ConsumeResult.SUCCESS, ConsumeOrderlyResult.SUCCESS, ConsumeOrderlyResult.COMMIT)
_WARN_EVERY_S = 60.0


def _ms() -> int:
    return int(time.time() * 1000)


class TraceDispatcher:
    """Collects trace records from any thread and sends them in batches from one background task.

    `owner_group` names the traced producer or consumer group (the trace producer's group is
    ``_INNER_TRACE_PRODUCER-<owner_group>``); `trace_topic` is the broker's msgTraceTopicName; `producer_options`
    are passed to the internal producer (credentials, tls, ...)."""

    def __init__(self, owner_group: str, namesrv_addr: str, *, trace_topic: str = TRACE_TOPIC, batch_size: int = 20,
                 flush_interval: float = 1.0, max_pending: int = 2048,
                 make_producer: "Callable[..., Producer] | None" = None, **producer_options: Any) -> None:
        self.owner_group = owner_group
        # the trace producer is an ordinary producer without tracing: its class comes from the caller (client.producer
        # imports this module, so it cannot be imported from here)
        self.make_producer = make_producer
        self.namesrv_addr = namesrv_addr
        self.trace_topic = trace_topic
        self.batch_size = max(1, min(batch_size, 100))
        self.flush_interval = max(0.01, flush_interval)
        self.max_pending = max(1, max_pending)
        self.producer_options = producer_options
        self.dropped = 0  # records refused because the queue was full
        self.sent_records = 0
        self.failed_records = 0
        self._pending: deque[TraceRecord] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._producer: Producer | None = None
        self._warned_at = 0.0
        self._closing = False

    # ---- recording (any thread) -----------------------------------------------------------------
    def append(self, record: TraceRecord) -> None:
        """Queue one record; never blocks (a full queue drops it)."""
        pending = self._pending
        if len(pending) >= self.max_pending or self._closing:
            self.dropped += 1
            return
        pending.append(record)
        if len(pending) >= self.batch_size and self._wake is not None:
            loop = self._loop
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                self._wake.set()
            elif loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self._wake.set)

    # ---- lifetime -------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._task is not None:
            return
        if self.make_producer is None:
            raise RuntimeError("TraceDispatcher needs make_producer (the Producer class) to start")
        options = dict(self.producer_options)
        options.setdefault("instance_name", f"trace-{uuid.uuid4().hex[:12]}")
        self._producer = self.make_producer(f"{TRACE_PRODUCER_PREFIX}-{self.owner_group}", self.namesrv_addr, **options)
        await self._producer.start()
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = self._loop.create_task(self._run(), name=f"trace-{self.owner_group}")

    async def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (for at most `timeout` seconds), then stop."""
        task, self._task = self._task, None
        if task is not None:
            self._closing = True
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            deadline = time.monotonic() + timeout
            while self._pending and time.monotonic() < deadline:
                await self._flush_one(max(0.1, deadline - time.monotonic()))
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.shutdown()

    async def flush(self, timeout: float = 5.0) -> None:
        """Send everything queued now (tests, and applications about to exit)."""
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            await self._flush_one(max(0.1, deadline - time.monotonic()))

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            try:
                await asyncio.wait_for(wake.wait(), self.flush_interval)
            except asyncio.TimeoutError:
                pass
            wake.clear()
            while self._pending:
                await self._flush_one(5.0)

    async def _flush_one(self, timeout: float) -> None:
        """Send one batch: up to batch_size records, fewer when the body would pass MAX_TRACE_BODY."""
        pending = self._pending
        batch: list[TraceRecord] = []
        body = b""
        while pending and len(batch) < self.batch_size:
            candidate = batch + [pending[0]]
            encoded = encode_records(candidate)
            if batch and len(encoded) > MAX_TRACE_BODY:
                break
            batch, body = candidate, encoded
            pending.popleft()
        if not batch or self._producer is None:
            return
        try:
            await self._producer.send(Message(self.trace_topic, body, keys=trace_keys(batch)), timeout=timeout)
            self.sent_records += len(batch)
        except Exception as exc:  # a trace is never worth failing the application for
            self.failed_records += len(batch)
            now = time.monotonic()
            if now - self._warned_at >= _WARN_EVERY_S:
                self._warned_at = now
                log.warning("message traces of %s not sent to %s (%d record(s) dropped so far): %s",
                            self.owner_group, self.trace_topic, self.failed_records, exc)

    # ---- what is recorded -----------------------------------------------------------------------
    def record_pub(self, group: str, msg: Message, result: SendResult, began_ms: int, store_host: str,
                   delay_level: int | None = None) -> None:
        if msg.topic == self.trace_topic or msg.properties.get("TRACE_ON") == "false" or not result.trace_on:
            return  # the broker's traceOn=false (TRACE_ON in its answer) turns the producer's traces off, as the
            # reference client's send hook does
        self.append(_pub(group, msg, result, result.msg_id, result.offset_msg_id or "", began_ms, store_host,
                         max(0, _ms() - began_ms), delay_level))

    def record_pub_batch(self, group: str, msgs: list[Message], result: SendResult, began_ms: int,
                         store_host: str) -> None:
        """One Pub per message of a batch (each findable by its own msgId; the batch's ids are comma-joined in the
        result, in order), the batch's cost shared between them as the reference's hook shares it between beans."""
        if not msgs or msgs[0].topic == self.trace_topic or not result.trace_on:
            return
        ids = result.msg_id.split(",")
        offset_ids = (result.offset_msg_id or "").split(",")
        if len(offset_ids) != len(ids):
            offset_ids = [""] * len(ids)
        cost = max(0, _ms() - began_ms) // len(msgs)
        for msg, msg_id, offset_id in zip(msgs, ids, offset_ids):
            if msg.properties.get("TRACE_ON") != "false":
                self.append(_pub(group, msg, result, msg_id, offset_id, began_ms, store_host, cost, None))


def _pub(group: str, msg: Message, result: SendResult, msg_id: str, offset_msg_id: str, began_ms: int,
         store_host: str, cost_ms: int, delay_level: int | None) -> TraceRecord:
    """The Pub record of one stored message (of a single send, or one of a batch)."""
    if msg.properties.get("TRAN_MSG") == "true":
        msg_type = MessageType.TRANS_HALF
    elif delay_level or msg.delay_level or msg.deliver_time_ms:
        msg_type = MessageType.DELAY
    else:
        msg_type = MessageType.NORMAL
    body = msg.body
    return TraceRecord("Pub", began_ms, result.region_id or DEFAULT_REGION, group, msg.topic, msg_id, msg.tags or "",
                       " ".join(msg.keys), store_host, len(body) if body is not None else 0, cost_ms, msg_type,
                       offset_msg_id, result.status is SendStatus.SEND_OK)


class PubTraceHook:
    """The producer's send hook of message traces: a Pub record per message each successful send stored (the
    reference client's trace SendMessageHook)."""

    def __init__(self, dispatcher: TraceDispatcher) -> None:
        self.dispatcher = dispatcher

    def send_before(self, context: SendContext) -> None:
        pass  # the context's began_ms is all a Pub needs from before the send

    def send_after(self, context: SendContext) -> None:
        result = context.result
        if result is None:
            return  # failed sends leave no Pub
        if context.batch:
            self.dispatcher.record_pub_batch(context.group, context.messages, result, context.began_ms,
                                             context.broker_addr)
        else:
            self.dispatcher.record_pub(context.group, context.messages[0], result, context.began_ms,
                                       context.broker_addr, context.delay_level)


def trace_producer(producer: "Producer", dispatcher: TraceDispatcher) -> None:
    """Register the Pub trace hook on the producer: each successful send, send_async and send_batch records a Pub
    per message (a producer without tracing has no hook and pays nothing)."""
    producer.register_send_hook(PubTraceHook(dispatcher))


class _Call:
    """One listener call's SubBefore state."""

    __slots__ = ("request_id", "began_ms", "region", "beans")

    def __init__(self, request_id: str, began_ms: int, region: str, beans: list[tuple[str, str, int]]) -> None:
        self.request_id = request_id
        self.began_ms = began_ms
        self.region = region
        self.beans = beans


def traced_listener(listener: Callable, group: str, dispatcher: TraceDispatcher) -> Callable:
    """A listener with the same shape as `listener` (async or not, with or without a context) that records
    SubBefore before and SubAfter after each call."""
    info = ListenerInfo(listener)
    skip_topic = dispatcher.trace_topic

    def before(messages: list) -> _Call | None:
        beans = []
        region = DEFAULT_REGION
        for m in messages:
            if m is None or m.topic == skip_topic:
                continue
            props = m.properties
            if props.get("TRACE_ON") == "false":
                continue
            region = props.get("MSG_REGION") or region
            beans.append((m.msg_id, " ".join(m.keys), m.reconsume_times))
        if not beans:
            return None
        call = _Call(uuid.uuid4().hex.upper(), _ms(), region, beans)
        for msg_id, keys, retry in beans:
            dispatcher.append(TraceRecord("SubBefore", call.began_ms, region, group, request_id=call.request_id,
                                          msg_id=msg_id, retry_times=retry, keys=keys))
        return call

    def after(call: _Call | None, count: int, result: Any, code: int | None = None) -> None:
        if call is None:
            return
        if code is None:
            if result is None:
                code = ContextCode.RETURN_NULL
            elif result in _SUCCESS:
                code = ContextCode.SUCCESS
            else:
                code = ContextCode.FAILED
        now = _ms()
        cost = (now - call.began_ms) // max(1, count)
        success = code == ContextCode.SUCCESS
        for msg_id, keys, _ in call.beans:
            dispatcher.append(TraceRecord("SubAfter", now, call.region, group, msg_id=msg_id, keys=keys,
                                          cost_ms=cost, success=success, request_id=call.request_id,
                                          context_code=code))

    async def finish_async(call: _Call | None, count: int, pending: Any) -> Any:
        try:
            result = await pending
        except asyncio.CancelledError:
            after(call, count, None, ContextCode.TIME_OUT)
            raise
        except Exception:
            after(call, count, None, ContextCode.EXCEPTION)
            raise
        after(call, count, result)
        return result

    def run_sync(messages: list, *args: Any) -> Any:
        call = before(messages)
        try:
            result = listener(messages, *args)
        except Exception:
            after(call, len(messages), None, ContextCode.EXCEPTION)
            raise
        if inspect.isawaitable(result):
            return finish_async(call, len(messages), result)
        after(call, len(messages), result)
        return result

    async def run_async(messages: list, *args: Any) -> Any:
        call = before(messages)
        return await finish_async(call, len(messages), listener(messages, *args))

    if info.is_async:
        if info.takes_context:
            async def wrapper(messages, context):  # noqa: ANN001, ANN202
                return await run_async(messages, context)
        else:
            async def wrapper(messages):  # noqa: ANN001, ANN202
                return await run_async(messages)
    elif info.takes_context:
        def wrapper(messages, context):  # noqa: ANN001, ANN202
            return run_sync(messages, context)
    else:
        def wrapper(messages):  # noqa: ANN001, ANN202
            return run_sync(messages)
    wrapper.__qualname__ = info.name
    wrapper.__name__ = getattr(listener, "__name__", "listener")
    return wrapper
