"""Producer: route look-up, queue selection, retries, batches, compression, one-way sends.

Hot path (`send` of a routed topic on an open connection): validate, build the properties string (one f-string),
encode a header from a per-(topic, broker, serialization) template, write, await one future. No per-message dicts,
no RemotingCommand for the request.
"""

from __future__ import annotations

import ssl
import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

from client.credentials import Credentials
from client.errors import (
    MQBrokerError,
    MQClientError,
    RemotingError,
    RemotingTimeoutError,
)
from client.fault import (
    LATENCY_MAX, NOT_AVAILABLE_DURATION, BrokerDetector, BrokerFault, LatencyFaultTolerance, check_seconds)
from client.instance import ClientLifecycle, ClientInstance, _int
from client.message import SEND_STATUS_BY_CODE, Message, MessageQueue, SendResult, SendStatus
from client.outgoing import DEFAULT_TOPIC, MessageEncoder, PreparedSend
from client.publish_routes import PublishRoutes, QueueSelector
from client.recall import recall_timed_message
from client.send_hooks import SendHook, SendHooks
from client.wire import frame, make_send_header_builder, make_signed_send_header_builder
from protocol.codes import RequestCode
from protocol.ids import UniqKeyGenerator
from protocol.trace import TRACE_TOPIC

log = logging.getLogger(__name__)

__all__ = ["Producer", "RETRYABLE_SEND_CODES"]

# Codes after which another broker/queue may succeed (Java's retryResponseCodes plus busy / flow control / go-away).
RETRYABLE_SEND_CODES = frozenset({1, 2, 14, 16, 17, 204, 205, 215, 1500})
_SEND_CODE = int(RequestCode.SEND_MESSAGE_V2)
_monotonic = time.monotonic
_BATCH_CODE = int(RequestCode.SEND_BATCH_MESSAGE)
# A retry needs at least this much of the send's time left: a sliver would only time out, and could store a copy.
_MIN_ATTEMPT = 0.05
_WARN_INTERVAL = 60.0

class Producer(ClientLifecycle):
    """RocketMQ producer. Use as `async with Producer("pg") as p: await p.send(Message(...))`.

    enable_trace=True records a message trace (a Pub record) for every message `send`/`send_async`/`send_batch`
    stored, sent in batches in the background to `trace_topic` (default RMQ_SYS_TRACE_TOPIC) in the reference
    clients' format."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str = "127.0.0.1:9876",
        *,
        send_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        retry_times_when_send_async_failed: int = 2,
        compress_msg_body_over_howmuch: int = 4096,
        max_message_size: int = 4 * 1024 * 1024,
        instance_name: str | None = None,
        default_topic_queue_nums: int = 4,
        allow_msgpack: bool = True,
        heartbeat_interval: float = 30.0,
        route_refresh_interval: float = 30.0,
        credentials: Credentials | None = None,
        tls: "bool | ssl.SSLContext" = False,
        tls_ca_path: str | None = None,
        retry_another_broker_when_not_store_ok: bool = False,
        send_latency_fault_enable: bool = True,
        start_detector_enable: bool = True,
        detect_interval: float = 2.0,
        detect_timeout: float = 0.5,
        latency_max: Sequence[float] = LATENCY_MAX,
        not_available_duration: Sequence[float] = NOT_AVAILABLE_DURATION,
        send_msg_max_timeout_per_request: float | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
    ) -> None:
        if not group:
            raise ValueError("producer group must not be empty")
        check_seconds(frozenset({"send_msg_max_timeout_per_request"}), detect_interval=detect_interval,
                      detect_timeout=detect_timeout, send_msg_max_timeout_per_request=send_msg_max_timeout_per_request)
        # A stored-but-not-safe answer (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE) is returned as
        # it is unless this is set; then the message is sent again to another broker (it may then exist twice).
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.group = group
        self.namesrv_addr = namesrv_addr
        self.send_timeout = send_timeout
        self.retry_times_when_send_failed = max(0, retry_times_when_send_failed)
        self.retry_times_when_send_async_failed = max(0, retry_times_when_send_async_failed)
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self.max_message_size = max_message_size
        self.credentials = credentials
        self._instance = ClientInstance(
            namesrv_addr,
            instance_name=instance_name,
            heartbeat_data=self._heartbeat_data,
            allow_msgpack=allow_msgpack,
            heartbeat_interval=heartbeat_interval,
            route_refresh_interval=route_refresh_interval,
            rpc_timeout=send_timeout,
            credentials=credentials,
            tls=tls,
            tls_ca_path=tls_ca_path,
        )
        self._routes = PublishRoutes(self._instance, default_topic_queue_nums)
        self._publish = self._routes.table  # topic -> TopicPublishInfo, read directly by send's fast path
        self._encoder = MessageEncoder(
            UniqKeyGenerator(self._instance.client_ip), max_message_size, compress_msg_body_over_howmuch
        )
        self._builders: dict[tuple, Callable] = {}
        self._started = False
        # Fault isolation (controller.md §14): brokers that failed or answered slowly are avoided for a while; with
        # the detector, a failed broker is avoided until it answers a probe. None: off (every send may pick it).
        self.send_msg_max_timeout_per_request = send_msg_max_timeout_per_request
        self._faults: LatencyFaultTolerance | None = None
        self._blocked: dict[str, float] | None = None  # self._faults.blocked, for the hot path
        self._slow = 0.0  # latencies from here on isolate (the tables' first non-zero duration)
        self._detector: BrokerDetector | None = None
        self._warned_at: dict[str, float] = {}
        if send_latency_fault_enable:
            self._faults = LatencyFaultTolerance(latency_max, not_available_duration, detector=start_detector_enable)
            self._blocked = self._faults.blocked
            self._slow = self._faults.first_threshold
            if start_detector_enable:
                self._detector = BrokerDetector(self._faults, self._instance, self._routes.probe_topic, detect_interval,
                                                detect_timeout)
        # called around send, send_async, send_batch (register_send_hook)
        self._send_hooks = SendHooks(group, lambda name: self._instance.master_addr(name))
        # Message traces (client/trace.py): a send hook, registered only when asked for.
        self.trace_dispatcher = None
        if enable_trace:
            from client.trace import TraceDispatcher, trace_producer

            self.trace_dispatcher = TraceDispatcher(group, namesrv_addr, trace_topic=trace_topic or TRACE_TOPIC,
                                                    make_producer=Producer, credentials=credentials, tls=tls,
                                                    tls_ca_path=tls_ca_path)
            trace_producer(self, self.trace_dispatcher)

    def register_send_hook(self, hook: SendHook) -> None:
        """Have hook.send_before/send_after called around every send, send_async and send_batch (client/send_hooks.py;
        message traces use one)."""
        self._send_hooks.register(hook)

    @property
    def default_topic_queue_nums(self) -> int:
        """Queues of a topic the broker creates on its first send (a topic the name server does not know yet)."""
        return self._routes.default_topic_queue_nums

    @default_topic_queue_nums.setter
    def default_topic_queue_nums(self, value: int) -> None:
        self._routes.default_topic_queue_nums = value

    @property
    def send_latency_fault_enable(self) -> bool:
        return self._faults is not None

    def isolated_brokers(self) -> dict[str, BrokerFault]:
        """Brokers unordered sends avoid right now, by name (empty when fault isolation is off)."""
        return {} if self._faults is None else self._faults.isolated()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        await super().start()
        if self.trace_dispatcher is not None:
            await self.trace_dispatcher.start()

    async def shutdown(self) -> None:
        if self.trace_dispatcher is not None:
            await self.trace_dispatcher.close()  # the traces of the last sends go out first
        if self._detector is not None:
            await self._detector.close()
        await super().shutdown()

    def _unregister_entry(self) -> dict[str, str]:
        return {"producerGroup": self.group}

    def _heartbeat_data(self) -> dict:
        return {"producerDataSet": [{"groupName": self.group}, {"groupName": "CLIENT_INNER_PRODUCER"}]}

    # ------------------------------------------------------------------ public API
    def send(
        self,
        msg: Message,
        *,
        selector: QueueSelector | None = None,
        arg: object = None,
        queue: MessageQueue | None = None,
        delay_level: int | None = None,
        timeout: float | None = None,
    ) -> Awaitable[SendResult]:
        """Send one message and wait for the broker's answer (``await producer.send(msg)``: a plain function returning
        the send's coroutine, so a producer without send hooks pays no second coroutine per message).

        Without `queue`/`selector`: round-robin over writable queues, skipping brokers that fault isolation avoids;
        a failure (network error, timeout, retryable broker code) is retried (up to retry_times_when_send_failed
        times, within `timeout` in all) on another queue, of another broker when there is one (RocketMQ's
        synchronous send semantics; `send_oneway` never retries). With `selector(queues, msg, arg) -> MessageQueue`
        or an explicit `queue`: one attempt to that queue, isolation or not (ordered messages must not be
        re-routed: ordering beats availability).
        """
        if self._send_hooks.hooks:
            context = self._send_hooks.before([msg], False, delay_level)
            return self._send_hooks.around(self._send(msg, selector, arg, queue, delay_level, timeout), context)
        return self._send(msg, selector, arg, queue, delay_level, timeout)

    async def _send(self, msg: Message, selector: QueueSelector | None, arg: object, queue: MessageQueue | None,
                    delay_level: int | None, timeout: float | None) -> SendResult:
        if not self._started:
            raise MQClientError("producer is not started; call await producer.start() or use 'async with'")
        prepared = self._encoder.prepare(msg, delay_level)
        timeout = self.send_timeout if timeout is None else timeout
        if queue is None and selector is None:
            started = _monotonic()
            # Fast path, all in this one coroutine frame: routed topic, open connection, first attempt succeeds.
            info = self._publish.get(prepared.topic)
            if info is not None and info.queues:
                mq = info.select()
                blocked = self._blocked
                until = None
                if blocked is not None:  # fault isolation: one dict lookup, usually on an empty dict
                    until = blocked.get(mq.broker_name)
                    if until is not None and until > started:
                        mq = info.select_available(blocked, started)
                addr = self._instance.master_addr(mq.broker_name)
                conn = self._instance.brokers.connected(addr) if addr is not None else None
                if conn is not None:
                    cap = self.send_msg_max_timeout_per_request
                    opaque, fut = self._issue(conn, mq, prepared, timeout if cap is None or cap > timeout else cap)
                    try:
                        reply = await fut
                    except asyncio.CancelledError:
                        conn.cancel(opaque)
                        raise
                    except RemotingError as exc:
                        self._failed(mq.broker_name, exc)
                        return await self._send_with_retries(
                            prepared, timeout - (_monotonic() - started), mq.broker_name, exc
                        )
                    if blocked is not None:
                        latency = _monotonic() - started
                        if until is not None or latency >= self._slow:
                            self._faults.update(mq.broker_name, latency)
                    status = SEND_STATUS_BY_CODE.get(reply.code)
                    if status is not None:
                        result = self._result(status, reply, mq, prepared)
                        if status is SendStatus.SEND_OK or not self._retry_not_ok():
                            return result
                        return await self._send_with_retries(
                            prepared, timeout - (_monotonic() - started), mq.broker_name, not_ok=result
                        )
                    error = MQBrokerError(reply.code, reply.remark, addr)
                    if reply.code not in RETRYABLE_SEND_CODES:
                        raise error
                    self._failed(mq.broker_name, error)
                    if not self.retry_times_when_send_failed:
                        raise error
                    return await self._send_with_retries(
                        prepared, timeout - (_monotonic() - started), mq.broker_name, error
                    )
                # No open connection yet: the slow path opens one, starting with the queue already chosen.
                return await self._send_with_retries(prepared, timeout, first_queue=mq)
            return await self._send_with_retries(prepared, timeout)
        mq = await self._routes.choose_queue(prepared.topic, msg, selector, arg, queue)
        return await self._send_to_queue(mq, prepared, timeout)

    async def send_oneway(
        self,
        msg: Message,
        *,
        selector: QueueSelector | None = None,
        arg: object = None,
        queue: MessageQueue | None = None,
        delay_level: int | None = None,
    ) -> None:
        """Fire-and-forget send (one-way frame, no response, no retry)."""
        if not self._started:
            raise MQClientError("producer is not started")
        prepared = self._encoder.prepare(msg, delay_level)
        if queue is None and selector is None:
            info = await self._routes.publish_info(prepared.topic)
            faults = self._faults
            mq = info.select() if faults is None else info.select_available(faults.blocked, _monotonic())
        else:
            mq = await self._routes.choose_queue(prepared.topic, msg, selector, arg, queue)
        addr = self._instance.master_addr(mq.broker_name) or await self._instance.find_master_addr(
            mq.broker_name, prepared.topic
        )
        brokers = self._instance.brokers
        conn = brokers.connected(addr) or await brokers.connection(addr)
        build = self._builder(prepared.topic, mq.broker_name, conn.serialize_type, False)
        if self.credentials is None:
            header = build(mq.queue_id, prepared.sys_flag, int(time.time() * 1000), prepared.flag, prepared.props,
                           brokers.next_opaque(), 2)
        else:
            header = build(mq.queue_id, prepared.sys_flag, int(time.time() * 1000), prepared.flag, prepared.props,
                           brokers.next_opaque(), 2, prepared.body)
        conn.oneway_frame(frame(conn.serialize_type, header, prepared.body))

    def send_async(
        self,
        msg: Message,
        callback: Callable[[SendResult | None, BaseException | None], None] | None = None,
        *,
        selector: QueueSelector | None = None,
        arg: object = None,
        queue: MessageQueue | None = None,
        delay_level: int | None = None,
        timeout: float | None = None,
    ) -> asyncio.Task:
        """Start a send in the background; returns its task (await it for the SendResult).

        callback(result, None) or callback(None, error) runs when it completes. Validation errors raise here, at
        once. A failed attempt is retried up to `retry_times_when_send_async_failed` times: with fault isolation (the
        default) on another broker when there is one, as the 5.x client; without it on another queue of the SAME
        broker, as before. Ordered sends (queue or selector given) are never retried.
        """
        if not self._started:
            raise MQClientError("producer is not started")
        prepared = self._encoder.prepare(msg, delay_level)
        timeout = self.send_timeout if timeout is None else timeout
        context = self._send_hooks.before([msg], False, delay_level) if self._send_hooks.hooks else None
        task = asyncio.get_running_loop().create_task(self._send_async(prepared, msg, selector, arg, queue, timeout))
        if callback is not None:

            def done(t: asyncio.Task) -> None:
                if t.cancelled():
                    result, error = None, asyncio.CancelledError()
                else:
                    error = t.exception()
                    result = None if error is not None else t.result()
                try:
                    callback(result, error)
                except Exception:
                    log.exception("send_async callback raised")

            task.add_done_callback(done)
        if context is not None:  # after the callback, as a wrapper around send_async would see it
            task.add_done_callback(functools.partial(self._send_hooks.ended_task, context))
        return task

    async def _send_async(self, prepared, msg, selector, arg, queue, timeout: float) -> SendResult:
        if queue is not None or selector is not None:
            mq = await self._routes.choose_queue(prepared.topic, msg, selector, arg, queue)
            return await self._send_to_queue(mq, prepared, timeout)
        info = await self._routes.publish_info(prepared.topic)
        faults = self._faults
        cap = self.send_msg_max_timeout_per_request
        clock = _monotonic
        deadline = clock() + timeout
        mq = info.select() if faults is None else info.select_available(faults.blocked, clock())
        same_broker = [q for q in info.queues if q.broker_name == mq.broker_name]
        index = same_broker.index(mq) if mq in same_broker else 0
        last_error: Exception | None = None
        for attempt in range(1 + self.retry_times_when_send_async_failed):
            now = clock()
            remaining = deadline - now
            if remaining <= 0 or (attempt and remaining < _MIN_ATTEMPT):
                break
            try:
                result = await self._send_to_queue(mq, prepared, remaining if cap is None else min(cap, remaining))
            except MQBrokerError as exc:
                if exc.code not in RETRYABLE_SEND_CODES:
                    raise
                self._failed(mq.broker_name, exc)
                last_error = exc
            except RemotingError as exc:
                self._failed(mq.broker_name, exc)
                last_error = exc
            else:
                if faults is not None:
                    faults.update(mq.broker_name, clock() - now)
                return result
            if faults is not None:  # as the 5.x client: the retry goes to another broker when there is one
                mq = info.select_available(faults.blocked, clock(), mq.broker_name, reset=True)
            else:
                index += 1
                mq = same_broker[index % len(same_broker)]
        raise last_error or RemotingTimeoutError(f"send to topic {prepared.topic!r} timed out after {timeout}s")

    def send_batch(
        self,
        msgs: Iterable[Message],
        *,
        selector: QueueSelector | None = None,
        arg: object = None,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> Awaitable[SendResult]:
        """Send messages of one topic as ONE SEND_BATCH_MESSAGE; msg_id is the comma-joined UNIQ_KEYs (awaitable,
        as ``send``)."""
        messages = list(msgs)
        if self._send_hooks.hooks:
            context = self._send_hooks.before(messages, True, None)
            return self._send_hooks.around(self._send_batch(messages, selector, arg, queue, timeout), context)
        return self._send_batch(messages, selector, arg, queue, timeout)

    async def _send_batch(self, messages: list[Message], selector: QueueSelector | None, arg: object,
                          queue: MessageQueue | None, timeout: float | None) -> SendResult:
        if not self._started:
            raise MQClientError("producer is not started")
        prepared = self._encoder.prepare_batch(messages)
        timeout = self.send_timeout if timeout is None else timeout
        if queue is None and selector is None:
            return await self._send_with_retries(prepared, timeout)
        mq = await self._routes.choose_queue(prepared.topic, messages[0], selector, arg, queue)
        return await self._send_to_queue(mq, prepared, timeout)

    async def recall_message(self, topic: str, recall_handle: str, *, timeout: float | None = None) -> str:
        """Cancel a timed message of ``topic`` before its time, by the ``recall_handle`` its send was answered with
        (``SendResult.recall_handle``); the recalled message's id. The broker needs ``recallMessageEnable=true``."""
        if not self._started:
            raise MQClientError("producer is not started; call await producer.start() or use 'async with'")
        return await recall_timed_message(self._instance, self.group, topic, recall_handle,
                                          self.send_timeout if timeout is None else timeout)

    async def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        """The writable queues the producer would use for topic (loads the route if needed)."""
        info = await self._routes.publish_info(topic)
        return list(info.queues)

    def _builder(self, topic: str, broker_name: str, serialize_type: int, batch: bool) -> Callable:
        key = (topic, broker_name, serialize_type, batch)
        build = self._builders.get(key)
        if build is None:
            options = {
                "serialize_type": serialize_type, "producer_group": self.group, "topic": topic,
                "broker_name": broker_name, "default_topic": DEFAULT_TOPIC,
                "default_topic_queue_nums": self.default_topic_queue_nums, "batch": batch,
            }
            credentials = self.credentials
            if credentials is None:
                build = make_send_header_builder(**options)
            else:
                build = make_signed_send_header_builder(
                    access_key=credentials.access_key, secret_key=credentials.secret_key,
                    security_token=credentials.security_token, **options)
            self._builders[key] = build
        return build

    # ------------------------------------------------------------------ sending
    async def _send_with_retries(
        self,
        prepared: PreparedSend,
        timeout: float,
        failed_broker: str | None = None,
        last_error: Exception | None = None,
        first_queue: MessageQueue | None = None,
        not_ok: SendResult | None = None,
    ) -> SendResult:
        """Attempts on successive queues (avoiding the broker that just failed, and with fault isolation the brokers
        it avoids) within one overall deadline; used by send's slow path, send_batch and transactional half sends.

        failed_broker/last_error (or not_ok, a stored-but-not-safe result when retry_another_broker_when_not_store_ok
        is set): the fast path's first attempt, which counts against the retry budget.
        """
        retried = last_error is not None or not_ok is not None
        if retried and timeout < _MIN_ATTEMPT:  # a timeout used up the send's time: nothing to retry with
            if not_ok is not None:
                return not_ok
            raise last_error
        topic = prepared.topic
        info = await self._routes.publish_info(topic)
        clock = _monotonic
        deadline = clock() + timeout
        attempts = 1 + self.retry_times_when_send_failed - (1 if retried else 0)
        retry_not_ok = self._retry_not_ok()
        faults = self._faults
        cap = self.send_msg_max_timeout_per_request
        for attempt in range(attempts):
            now = clock()
            remaining = deadline - now
            if remaining <= 0 or (retried and remaining < _MIN_ATTEMPT):
                break
            if first_queue is not None:
                mq, first_queue = first_queue, None
            elif faults is not None:
                mq = info.select_available(faults.blocked, now, failed_broker, reset=retried)
            else:
                mq = info.select(failed_broker)
            retried = True
            try:
                result = await self._send_to_queue(mq, prepared, remaining if cap is None else min(cap, remaining))
            except MQBrokerError as exc:
                if exc.code not in RETRYABLE_SEND_CODES:
                    raise
                self._failed(mq.broker_name, exc)
                last_error = exc
            except RemotingError as exc:
                self._failed(mq.broker_name, exc)
                last_error = exc
            else:
                if faults is not None:
                    faults.update(mq.broker_name, clock() - now)
                if result.status is SendStatus.SEND_OK or not retry_not_ok:
                    return result
                not_ok = result  # stored, but not safely: try another broker, keep this answer if none does better
            failed_broker = mq.broker_name
            info = self._publish.get(topic) or info
        if not_ok is not None:
            return not_ok
        if last_error is None:
            raise RemotingTimeoutError(f"send to topic {topic!r} timed out after {timeout}s")
        raise last_error

    def _failed(self, broker: str, exc: Exception) -> None:
        """An attempt on broker failed: with fault isolation, avoid it (until a probe answers, with the detector).
        Non-retryable broker codes are about the message, not the broker, and isolate nothing."""
        faults = self._faults
        if faults is None or (isinstance(exc, MQBrokerError) and exc.code not in RETRYABLE_SEND_CODES):
            return
        was_reachable = faults.is_reachable(broker)
        faults.update(broker, 0.0, isolation=True, reachable=False)
        if self._detector is not None and was_reachable:
            now = _monotonic()
            if now - self._warned_at.get(broker, -_WARN_INTERVAL) >= _WARN_INTERVAL:  # a flapping broker: not per send
                self._warned_at[broker] = now
                log.warning("producer group %s avoids broker %s after %s; unordered sends go to other brokers until "
                            "it answers a probe (said at most once a minute per broker)", self.group, broker, exc)
            self._detector.wake()

    def _retry_not_ok(self) -> bool:
        return self.retry_another_broker_when_not_store_ok and self.retry_times_when_send_failed > 0

    async def _send_to_queue(self, mq: MessageQueue, prepared: PreparedSend, timeout: float) -> SendResult:
        instance = self._instance
        addr = instance.master_addr(mq.broker_name)
        if addr is None:
            addr = await instance.find_master_addr(mq.broker_name, prepared.topic)
        brokers = instance.brokers
        conn = brokers.connected(addr)
        if conn is None:
            conn = await brokers.connection(addr)
        opaque, fut = self._issue(conn, mq, prepared, timeout)
        try:
            reply = await fut
        except asyncio.CancelledError:
            conn.cancel(opaque)
            raise
        status = SEND_STATUS_BY_CODE.get(reply.code)
        if status is None:
            raise MQBrokerError(reply.code, reply.remark, addr)
        return self._result(status, reply, mq, prepared)

    def _issue(self, conn, mq: MessageQueue, prepared: PreparedSend, timeout: float) -> tuple[int, asyncio.Future]:
        """Encode and write the send request on conn; returns (opaque, response future)."""
        serialize_type = conn.serialize_type
        build = self._builders.get((prepared.topic, mq.broker_name, serialize_type, prepared.batch))
        if build is None:
            build = self._builder(prepared.topic, mq.broker_name, serialize_type, prepared.batch)
        opaque = conn.owner.next_opaque()
        if self.credentials is None:
            header = build(mq.queue_id, prepared.sys_flag, int(time.time() * 1000), prepared.flag, prepared.props,
                           opaque, 0)
        else:  # signed: the same template plus AccessKey and a Signature over the values and the body
            header = build(mq.queue_id, prepared.sys_flag, int(time.time() * 1000), prepared.flag, prepared.props,
                           opaque, 0, prepared.body)
        fut = conn.request_frame(
            opaque, frame(serialize_type, header, prepared.body), timeout, _BATCH_CODE if prepared.batch else _SEND_CODE
        )
        return opaque, fut

    @staticmethod
    def _result(status, reply, mq: MessageQueue, prepared: PreparedSend) -> SendResult:
        ext = reply.ext_fields or {}
        queue_id = _int(ext.get("queueId"), mq.queue_id)
        if queue_id != mq.queue_id:
            mq = MessageQueue(mq.topic, mq.broker_name, queue_id)
        return SendResult(
            status, prepared.msg_id, ext.get("msgId"), queue_id, _int(ext.get("queueOffset"), -1), mq,
            ext.get("transactionId"), ext.get("MSG_REGION") or "", ext.get("TRACE_ON") != "false",
            ext.get("recallHandle"),
        )
