"""PushConsumer: subscriptions, rebalancing, long-poll pull loops with flow control, offset commits.

Per assigned queue one pull-loop task long-polls the broker and hands each batch to the ConsumeService (a pool of
`consume_thread_max` workers). A queue's loop pauses while the queue holds more than `pull_threshold_for_queue`
messages or `pull_threshold_size_for_queue` MiB of bodies not yet consumed, and resumes as soon as consumption drains
it. The committed offset of a queue is the smallest offset still in flight. CLUSTERING groups keep offsets on the
broker (committed every `persist_offset_interval` seconds, when a queue moves to another member and at shutdown);
BROADCASTING consumers keep them in a local file (see client.offset_store). CLUSTERING groups rebalance every
`rebalance_interval` seconds and as soon as the broker announces that the group's members changed
(NOTIFY_CONSUMER_IDS_CHANGED), with the strategy given as `allocate_strategy` (see client.allocate).

Failed messages (listener returns RECONSUME_LATER or raises): see client.consume_service; `max_reconsume_times` is
sent with every send-back so the broker moves a message to %DLQ%<group> after that many retries.
`register_listener(listener, orderly=True)` consumes each queue in order instead (client.consume_orderly); in
CLUSTERING mode a queue is then pulled and consumed only under the broker's lock on it (client.queue_locks): locked
before its first pull (its start offset is read from the broker after that), renewed every 20 s, released when
rebalancing moves it away and at shutdown.

SQL92 subscriptions are checked at start with every broker of the topic (CHECK_CLIENT_CONFIG, the broker's decision is
final): a refusal (enablePropertyFilter=false, or a selector that does not compile) fails start() with
client.errors.SubscriptionCheckError carrying the broker's code and remark. The client never re-filters SQL92 messages;
tag subscriptions are re-filtered by exact tag string (the broker matches hash codes only).

Shutdown is graceful: stop pulling, hand back queued messages, let running listeners finish (up to
`shutdown_grace` seconds), commit offsets and wait for the broker's acknowledgement, unregister from the brokers.

PushConsumer is the public facade; the work is split along its jobs, each part built with only what it uses:
client.subscription_state (topics, selectors, retry topic, assigned queues), client.pull_fetcher (the pull loop of
each queue: long polling, flow control, back-off), client.rebalance_coordinator (allocation, adding and dropping
queues), client.queue_locks (orderly lock renewal), client.consume_offsets (start offsets and commits), and the
consume services (client.consume_service, client.consume_orderly).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType

from client.allocate import AllocateStrategy, resolve_strategy, sort_queues
from client.consume_offsets import ConsumeOffsets, make_offset_store
from client.consume_orderly import ConsumeOrderlyService
from client.consume_service import RETRY_PREFIX, ConsumeService, Listener
from client.consumer_introspection import consume_message_directly, running_info
from client.consumer_ops import ConsumerOps
from client.credentials import Credentials
from client.errors import MQBrokerError, MQClientError
from client.instance import ClientInstance
from client.message import MessageExt, MessageQueue, MessageSelector
from client.offset_store import OffsetStore
from client.process_queue import ProcessQueue
from client.pull_fetcher import PullFetcher
from client.queue_locks import LOCK_RENEW_INTERVAL, LockKeeper, QueueLocks
from client.rebalance_coordinator import RebalanceCoordinator
from client.subscription_state import SubscriptionState
from protocol.admin_bodies import ResetOffsetBody
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trace import TRACE_TOPIC

log = logging.getLogger(__name__)

__all__ = ["PushConsumer"]

_MODELS = ("CLUSTERING", "BROADCASTING")
_FROM_WHERE = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP")


class PushConsumer:
    """`c = PushConsumer("cg"); c.subscribe("T", "TagA || TagB"); c.register_listener(handler); await c.start()`.

    max_reconsume_times: retries before a failed message goes to %DLQ%<group>. -1 (the default) means what it means
    in the reference client: concurrent, the group's retryMaxTimes on the broker (16); orderly, retry forever, so a
    downstream outage never breaks the order. An explicit value applies to both (concurrent: sent to the broker with
    each send-back; orderly: counted by the client).
    consume_timeout: minutes a listener may hold a message (default 15, as the reference); past that the message
    is sent back (delay level 3), its queue moves on, and an ``async`` listener is cancelled.
    suspend_current_queue_time_millis: how long an orderly queue waits before a failed batch is consumed again.

    consume_from_where applies to queues the group has no committed offset for: LAST_OFFSET starts at the queue's
    end, except that the broker answers 0 for a queue whose first message is still stored (RocketMQ's "young queue"
    rule, kept so a new group on a new topic loses nothing); FIRST_OFFSET starts at the queue's beginning; TIMESTAMP
    at the first message stored at or after `consume_timestamp` (ms; default 30 minutes ago), young queue or not.

    enable_trace=True records each listener call as message traces (SubBefore/SubAfter: group, msgId, retry times,
    per-message cost, success) and sends them in batches in the background to `trace_topic` (default
    RMQ_SYS_TRACE_TOPIC) in the reference clients' format.
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str = "127.0.0.1:9876",
        *,
        message_model: str = "CLUSTERING",
        consume_from_where: str = "CONSUME_FROM_LAST_OFFSET",
        consume_timestamp: int | None = None,
        allocate_strategy: AllocateStrategy | str | Callable | None = None,
        consume_thread_max: int = 20,
        consume_message_batch_max_size: int = 1,
        consume_timeout: float = 15.0,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = -1,
        suspend_current_queue_time_millis: int = 1000,
        suspend_timeout: float = 15.0,
        rebalance_interval: float = 20.0,
        persist_offset_interval: float = 5.0,
        shutdown_grace: float = 5.0,
        offset_store_dir: str | os.PathLike | None = None,
        instance_name: str | None = None,
        allow_msgpack: bool = True,
        heartbeat_interval: float = 30.0,
        route_refresh_interval: float = 30.0,
        credentials: Credentials | None = None,
        tls: "bool | ssl.SSLContext" = False,
        tls_ca_path: str | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
    ) -> None:
        if not group:
            raise ValueError("consumer group must not be empty")
        if message_model not in _MODELS:
            raise ValueError(f"message_model must be one of {_MODELS}, got {message_model!r}")
        if consume_from_where not in _FROM_WHERE:
            raise ValueError(f"consume_from_where must be one of {_FROM_WHERE}, got {consume_from_where!r}")
        if pull_batch_size < 1 or pull_threshold_for_queue < 1 or pull_threshold_size_for_queue < 1:
            raise ValueError("pull_batch_size and the pull thresholds must be positive")
        self.group = group
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp or int((time.time() - 1800) * 1000)
        self.allocate_strategy = resolve_strategy(allocate_strategy)
        self.consume_thread_max = max(1, consume_thread_max)
        self.consume_message_batch_max_size = max(1, consume_message_batch_max_size)
        if consume_timeout <= 0:
            raise ValueError(f"consume_timeout must be positive (minutes), got {consume_timeout!r}")
        self.consume_timeout = consume_timeout
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue  # MiB, as in RocketMQ
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.max_reconsume_times = max_reconsume_times
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis
        self.lock_renew_interval = LOCK_RENEW_INTERVAL
        self.suspend_timeout = suspend_timeout
        self.rebalance_interval = rebalance_interval
        self.persist_offset_interval = persist_offset_interval
        self.shutdown_grace = shutdown_grace
        self.offset_store_dir = offset_store_dir
        self._instance = ClientInstance(
            namesrv_addr,
            instance_name=instance_name,
            heartbeat_data=self._heartbeat_data,
            request_handler=self._on_broker_request,
            allow_msgpack=allow_msgpack,
            heartbeat_interval=heartbeat_interval,
            route_refresh_interval=route_refresh_interval,
            credentials=credentials,
            tls=tls,
            tls_ca_path=tls_ca_path,
        )
        self._ops = ConsumerOps(self._instance, group)
        self._subscription = SubscriptionState(group, clustering=message_model == "CLUSTERING")
        self._listener: Listener | None = None
        self._traced: Listener | None = None  # the listener wrapped for message traces (enable_trace)
        self.orderly = False
        self._locks = QueueLocks(self._ops, self._instance.client_id)
        self.offset_store: OffsetStore | None = None
        # The parts below are built by start(), each with only what it uses.
        self._consume: ConsumeService | ConsumeOrderlyService | None = None
        self._offsets: ConsumeOffsets | None = None
        self._fetcher: PullFetcher | None = None
        self._lock_keeper: LockKeeper | None = None
        self._coordinator: RebalanceCoordinator | None = None
        self._service_tasks: list[asyncio.Task] = []
        self._background: set[asyncio.Task] = set()  # one-off jobs a broker request started (offset resets)
        self._started = False
        self.start_timestamp_ms = 0
        # Message traces (client/trace.py): the listener is wrapped at start when asked for.
        self.trace_dispatcher = None
        if enable_trace:
            from client.producer import Producer  # sends the trace records
            from client.trace import TraceDispatcher

            self.trace_dispatcher = TraceDispatcher(group, namesrv_addr, trace_topic=trace_topic or TRACE_TOPIC,
                                                    make_producer=Producer, credentials=credentials, tls=tls,
                                                    tls_ca_path=tls_ca_path)

    @property
    def client_id(self) -> str:
        return self._instance.client_id

    @property
    def _clustering(self) -> bool:
        return self.message_model == "CLUSTERING"

    @property
    def _uses_locks(self) -> bool:
        return self.orderly and self._clustering

    @property
    def _subscriptions(self) -> dict[str, MessageSelector]:
        return self._subscription.topics

    @property
    def _process_queues(self) -> dict[MessageQueue, ProcessQueue]:
        """The assigned queues (held by the subscription state, changed only by the rebalance coordinator)."""
        return self._subscription.assignment

    # ------------------------------------------------------------------ configuration
    def subscribe(self, topic: str, expression: MessageSelector | str | None = "*") -> None:
        """Subscribe to topic with a tag expression ('*', 'TagA || TagB') or MessageSelector.sql(...)."""
        self._subscription.subscribe(topic, expression)
        if self._started:
            self._instance.tracked_topics.add(topic)
            self._trigger_rebalance()

    def unsubscribe(self, topic: str) -> None:
        self._subscription.unsubscribe(topic)
        if self._started:
            self._trigger_rebalance()

    def register_listener(self, listener: Listener, *, orderly: bool = False) -> None:
        """listener(msgs) -> ConsumeResult; `async def` runs on the loop, a plain function in the thread pool.
        An exception counts as RECONSUME_LATER.

        orderly=True: one queue is consumed by one call at a time, in queue order; the listener returns
        ConsumeOrderlyResult.SUCCESS or SUSPEND_CURRENT_QUEUE_A_MOMENT (ConsumeResult values are accepted as
        aliases; an exception suspends), see client.consume_orderly."""
        if not callable(listener):
            raise TypeError("listener must be callable")
        if self._started:
            raise MQClientError("register the listener before starting the push consumer")
        self._listener = listener
        self.orderly = bool(orderly)

    def _all_subscriptions(self) -> dict[str, MessageSelector]:
        return self._subscription.all_subscriptions()

    def _heartbeat_data(self) -> dict:
        subscriptions = self.subscription_data()
        return {
            "consumerDataSet": [
                {
                    "groupName": self.group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": self.message_model,
                    "consumeFromWhere": self.consume_from_where,
                    "subscriptionDataSet": subscriptions,
                    "unitMode": False,
                }
            ]
        }

    # ------------------------------------------------------------------ assembling the parts
    def _build_parts(self) -> None:
        """Offset policy, consume service, lock keeper, fetcher and rebalance coordinator, wired by narrow handles."""
        store = self.offset_store = make_offset_store(
            self._ops, clustering=self._clustering, base_dir=self.offset_store_dir, client_id=self.client_id,
            group=self.group)
        self._offsets = ConsumeOffsets(self.group, store, self._ops, consume_from_where=self.consume_from_where,
                                       consume_timestamp=self.consume_timestamp)
        guard = asyncio.Lock()  # serialises changes to the assignment (rebalance, lock renewal, offset resets)
        self._lock_keeper = (LockKeeper(self._locks, self._subscription.assignment, guard, self.group)
                             if self._uses_locks else None)
        if self.orderly:
            self._consume = ConsumeOrderlyService(
                self.group, self._traced or self._listener, store, self._send_back,
                thread_max=self.consume_thread_max, batch_max_size=self.consume_message_batch_max_size,
                clustering=self._clustering, max_reconsume_times=self.max_reconsume_times,
                suspend_time=self.suspend_current_queue_time_millis / 1000.0,
                relock=self._lock_keeper.relock if self._lock_keeper is not None else None,
            )
        else:
            self._consume = ConsumeService(
                self.group, self._traced or self._listener, store, self._send_back,
                thread_max=self.consume_thread_max, batch_max_size=self.consume_message_batch_max_size,
                clustering=self._clustering, consume_timeout=self.consume_timeout * 60.0,
            )
        self._fetcher = PullFetcher(
            self.group, self._ops, self._subscription.selector, store, self._consume.submit,
            pull_batch_size=self.pull_batch_size, suspend_timeout=self.suspend_timeout,
            clustering=self._clustering, uses_locks=self._uses_locks,
        )
        self._coordinator = RebalanceCoordinator(
            self.group, self.client_id, self.allocate_strategy, self._subscription, self._instance, self._ops,
            self._offsets, self._fetcher, self._new_process_queue, guard,
            locks=self._locks if self._uses_locks else None,
            quiesce=self._consume.quiesce if self.orderly else None, quiesce_grace=self.shutdown_grace,
        )

    def _new_process_queue(self, mq: MessageQueue) -> ProcessQueue:
        return ProcessQueue(
            mq, max_count=self.pull_threshold_for_queue, max_bytes=self.pull_threshold_size_for_queue * 1024 * 1024,
            max_span=0 if self.orderly else self.consume_concurrently_max_span,
        )

    def _set_stopping(self, stopping: bool) -> None:
        for part in (self._fetcher, self._coordinator, self._lock_keeper):
            if part is not None:
                part.stopping = stopping

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._started:
            return
        if self._listener is None:
            raise MQClientError("register a listener before starting the push consumer")
        if not self._subscriptions:
            raise MQClientError("subscribe to at least one topic before starting the push consumer")
        self.start_timestamp_ms = int(time.time() * 1000)
        if self.trace_dispatcher is not None:
            from client.trace import traced_listener

            self._traced = traced_listener(self._listener, self.group, self.trace_dispatcher)
        self._build_parts()
        await self.offset_store.load()
        self._consume.start()
        self._set_stopping(False)
        await self._instance.start()
        self._started = True
        if self.trace_dispatcher is not None:
            await self.trace_dispatcher.start()
        for topic in self._all_subscriptions():
            self._instance.tracked_topics.add(topic)
            try:
                await self._instance.update_route(topic)
            except MQBrokerError as exc:
                # Expected for %RETRY%<group> on a group's first start: the broker creates it on our heartbeat.
                level = logging.DEBUG if topic.startswith(RETRY_PREFIX) else logging.WARNING
                log.log(level, "no route for subscribed topic %s yet: %s", topic, exc.remark)
        try:  # SQL92 subscriptions: every broker of the topic must accept the selector (CHECK_CLIENT_CONFIG)
            for topic, selector in self._subscriptions.items():
                await self._ops.check_client_config(topic, selector)
        except BaseException:
            await self._abort_start()
            raise
        await self._instance.heartbeat_all()
        try:
            await self._check_group_exists()
        except BaseException:
            await self._abort_start()
            raise
        await self._coordinator.rebalance()
        self._service_tasks = [
            asyncio.create_task(self._coordinator.run(self.rebalance_interval), name=f"rebalance-{self.group}"),
            asyncio.create_task(self._offsets.run_persist(self.persist_offset_interval),
                                name=f"persist-offsets-{self.group}"),
        ]
        if self._lock_keeper is not None:
            self._service_tasks.append(asyncio.create_task(self._lock_keeper.run(self.lock_renew_interval),
                                                           name=f"lock-mq-{self.group}"))

    async def _check_group_exists(self) -> None:
        """A group the broker does not know (autoCreateSubscriptionGroup=false) would receive nothing, silently:
        one pull without long polling on a subscribed queue tells, since the broker answers it with
        SUBSCRIPTION_GROUP_NOT_EXIST (26) as the reference broker does. Raises MQClientError with its remark."""
        for topic, selector in self._subscriptions.items():
            route = self._instance.routes.get(topic)
            queues = sort_queues(route.subscribe_queues(topic)) if route is not None else []
            if not queues:
                continue
            try:
                await self._ops.pull(queues[0], selector, 0, 1, timeout=self._instance.rpc_timeout)
            except MQBrokerError as exc:
                if exc.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                    raise MQClientError(
                        f"consumer group {self.group!r} does not exist on broker {exc.addr}: {exc.remark} (create it "
                        f"with mqadmin updateSubGroup, or set autoCreateSubscriptionGroup=true)") from exc
            except Exception as exc:  # the pull loops will report what persists
                log.debug("group check pull on %s failed: %s", queues[0], exc)
            return

    async def _abort_start(self) -> None:
        """start() failed after the instance started: stop the consume service, unregister and close."""
        self._started = False
        self._set_stopping(True)
        await self._consume.shutdown(0)
        await self._instance.shutdown(unregister=[{"consumerGroup": self.group}])
        if self.trace_dispatcher is not None:
            await self.trace_dispatcher.close(0)

    async def shutdown(self, consume_grace: float | None = None) -> None:
        """Stop pulling, finish running listeners, commit offsets (acknowledged), unregister, close."""
        if not self._started:
            await self._instance.shutdown()
            return
        self._started = False
        self._set_stopping(True)
        for task in [*self._service_tasks, *self._background]:
            task.cancel()
        await asyncio.gather(*self._service_tasks, *self._background, return_exceptions=True)
        await self._fetcher.stop_all()
        # An orderly queue whose listener call outlives the grace keeps its lock until the broker expires it.
        still_busy = await self._consume.shutdown(self.shutdown_grace if consume_grace is None else consume_grace)
        busy = {pq.mq for pq in still_busy or ()}
        for pq in self._process_queues.values():
            pq.dropped = True
        await self.offset_store.persist_all(final=True)
        if self._uses_locks:
            await self._locks.unlock(mq for mq, pq in self._process_queues.items() if pq.locked and mq not in busy)
        await self._instance.shutdown(unregister=[{"consumerGroup": self.group}])
        if self.trace_dispatcher is not None:
            await self.trace_dispatcher.close()  # the last consumptions' traces go out before it stops

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.shutdown()

    # ------------------------------------------------------------------ broker -> client
    def _on_broker_request(self, conn, cmd: RemotingCommand):
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            self._trigger_rebalance()
            return None if cmd.flag & 2 else cmd.make_response(ResponseCode.SUCCESS)
        if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            return cmd.make_response(ResponseCode.SUCCESS, None, None, running_info(self).encode())
        if cmd.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            return consume_message_directly(self, cmd)
        if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            self._on_offset_reset(cmd)
            return None if cmd.flag & 2 else cmd.make_response(ResponseCode.SUCCESS)
        return None

    def _on_offset_reset(self, cmd: RemotingCommand) -> None:
        """An admin moved this group's offsets (INVOKE_BROKER_TO_RESET_OFFSET): start the queues again there."""
        fields = cmd.ext_fields or {}
        if fields.get("group") not in (None, self.group):
            return
        try:
            table = ResetOffsetBody.decode(cmd.body).offset_table
        except ValueError as exc:
            log.warning("ignoring an offset reset for %s with a malformed body: %s", self.group, exc)
            return
        offsets = {(mq.topic, mq.broker_name, mq.queue_id): offset for mq, offset in table.items()}
        task = asyncio.get_running_loop().create_task(self._reset_offsets(offsets), name=f"offset-reset-{self.group}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)


    async def _reset_offsets(self, offsets: dict[tuple[str, str, int], int]) -> None:
        if self._coordinator is not None:
            await self._coordinator.reset_offsets(offsets)

    def _trigger_rebalance(self) -> None:
        if self._coordinator is not None:
            self._coordinator.trigger()

    # ------------------------------------------------------------------ retries
    async def _send_back(self, pq: ProcessQueue, m: MessageExt, delay_level: int = 0) -> bool:
        """Hand a failed message back (client.consumer_ops.ConsumerOps.send_message_back: CONSUMER_SEND_MSG_BACK,
        falling back to a new message on %RETRY%<group>); False only when both ways failed."""
        try:
            await self._ops.send_message_back(m, delay_level, broker_name=pq.mq.broker_name,
                                              max_reconsume_times=self.max_reconsume_times)
        except Exception as exc:
            log.warning("send-back of %s failed, also as a new message to %s%s: %s", m.msg_id, RETRY_PREFIX,
                        self.group, exc)
            return False
        return True

    # ------------------------------------------------------------------ introspection
    @property
    def namesrv_addrs(self) -> list[str]:
        return list(self._instance.namesrv.addrs)

    @property
    def process_queues(self) -> Mapping[MessageQueue, ProcessQueue]:
        """The assigned queues and what each holds, read-only (GET_CONSUMER_RUNNING_INFO reports them)."""
        return MappingProxyType(self._subscription.assignment)

    def subscription_data(self) -> list[dict]:
        """The reference's SubscriptionData of every subscription (retry topic included), by topic: what the
        heartbeats and the running info carry."""
        return [self._ops.subscription_data(topic, sel) for topic, sel in sorted(self._all_subscriptions().items())]

    @property
    def consuming(self) -> bool:
        """Started: the listener can be called (call_listener)."""
        return self._consume is not None

    async def call_listener(self, messages: list[MessageExt], context: object) -> object:
        """Run the listener once on messages outside the queues (CONSUME_MESSAGE_DIRECTLY): its result; no offset
        moves, nothing is sent back, an exception propagates."""
        if self._consume is None:
            raise MQClientError("the consumer is not started")
        return await self._consume.call_listener(messages, context)

    def assigned_queues(self) -> list[MessageQueue]:
        return self._subscription.assigned_queues()

    def current_offsets(self) -> dict[MessageQueue, int]:
        return dict(self.offset_store.offsets) if self.offset_store else {}

    def cached_message_count(self) -> int:
        """Messages pulled and not yet consumed, over all queues (flow control works on this per queue)."""
        return self._subscription.cached_message_count()
