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
"""

from __future__ import annotations

import ssl
import asyncio
import logging
import os
import time
from collections.abc import Callable

from client.allocate import AllocateStrategy, resolve_strategy, sort_queues
from client.consume_orderly import ConsumeOrderlyService
from client.consume_service import RETRY_PREFIX, ConsumeService, Listener
from client.consumer_introspection import consume_message_directly, running_info
from client.consumer_ops import ConsumerOps
from client.credentials import Credentials
from client.errors import MQBrokerError, MQClientError
from client.instance import ClientInstance
from client.message import MessageExt, MessageQueue, MessageSelector, PullStatus
from client.offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore, default_offset_store_dir
from client.process_queue import ProcessQueue
from client.queue_locks import LOCK_RENEW_INTERVAL, QueueLocks
from protocol.admin_bodies import ResetOffsetBody
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from client.waiting import wait_event

log = logging.getLogger(__name__)

__all__ = ["PushConsumer"]

_MODELS = ("CLUSTERING", "BROADCASTING")
_FROM_WHERE = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP")
_PULL_ERROR_BACKOFF = 3.0
_FLOW_CONTROL_RECHECK = 1.0
_UNLOCKED_PULL_RECHECK = 1.0  # an orderly queue whose lock is lost waits this long before checking again


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
        self._subscriptions: dict[str, MessageSelector] = {}
        self._listener: Listener | None = None
        self.orderly = False
        self._locks = QueueLocks(self._ops, self._instance.client_id)
        self._process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task] = {}
        self.offset_store: OffsetStore | None = None
        self._consume: ConsumeService | ConsumeOrderlyService | None = None
        self._rebalance_now: asyncio.Event | None = None
        self._rebalance_lock: asyncio.Lock | None = None
        self._service_tasks: list[asyncio.Task] = []
        self._background: set[asyncio.Task] = set()  # one-off jobs a broker request started (offset resets)
        self._started = False
        self._stopping = False
        self._group_missing_reported = False
        self.start_timestamp_ms = 0

    @property
    def client_id(self) -> str:
        return self._instance.client_id

    @property
    def _clustering(self) -> bool:
        return self.message_model == "CLUSTERING"

    # ------------------------------------------------------------------ configuration
    def subscribe(self, topic: str, expression: MessageSelector | str | None = "*") -> None:
        """Subscribe to topic with a tag expression ('*', 'TagA || TagB') or MessageSelector.sql(...)."""
        if not topic:
            raise ValueError("topic must not be empty")
        self._subscriptions[topic] = MessageSelector.of(expression)
        if self._started:
            self._instance.tracked_topics.add(topic)
            self._trigger_rebalance()

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
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

    @property
    def _uses_locks(self) -> bool:
        return self.orderly and self._clustering

    def _all_subscriptions(self) -> dict[str, MessageSelector]:
        subs = dict(self._subscriptions)
        if self._clustering:
            subs.setdefault(RETRY_PREFIX + self.group, MessageSelector.tag("*"))
        return subs

    def _heartbeat_data(self) -> dict:
        subscriptions = []
        for topic, sel in sorted(self._all_subscriptions().items()):
            subscriptions.append(self._ops.subscription_data(topic, sel))
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

    def _make_offset_store(self) -> OffsetStore:
        if self._clustering:
            return RemoteOffsetStore(self._ops)
        base = self.offset_store_dir if self.offset_store_dir is not None else default_offset_store_dir()
        return LocalFileOffsetStore(os.path.join(base, self.client_id, self.group, "offsets.json"))

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._started:
            return
        if self._listener is None:
            raise MQClientError("register a listener before starting the push consumer")
        if not self._subscriptions:
            raise MQClientError("subscribe to at least one topic before starting the push consumer")
        self._rebalance_now = asyncio.Event()
        self._rebalance_lock = asyncio.Lock()
        self.start_timestamp_ms = int(time.time() * 1000)
        self.offset_store = self._make_offset_store()
        await self.offset_store.load()
        if self.orderly:
            self._consume = ConsumeOrderlyService(
                self.group, self._listener, self.offset_store, self._send_back,
                thread_max=self.consume_thread_max, batch_max_size=self.consume_message_batch_max_size,
                clustering=self._clustering, max_reconsume_times=self.max_reconsume_times,
                suspend_time=self.suspend_current_queue_time_millis / 1000.0, relock=self._relock,
            )
        else:
            self._consume = ConsumeService(
                self.group, self._listener, self.offset_store, self._send_back,
                thread_max=self.consume_thread_max, batch_max_size=self.consume_message_batch_max_size,
                clustering=self._clustering, consume_timeout=self.consume_timeout * 60.0,
            )
        self._consume.start()
        self._stopping = False
        await self._instance.start()
        self._started = True
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
        await self._rebalance()
        self._service_tasks = [
            asyncio.create_task(self._rebalance_service(), name=f"rebalance-{self.group}"),
            asyncio.create_task(self._persist_service(), name=f"persist-offsets-{self.group}"),
        ]
        if self._uses_locks:
            self._service_tasks.append(asyncio.create_task(self._lock_service(), name=f"lock-mq-{self.group}"))

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
        self._stopping = True
        await self._consume.shutdown(0)
        await self._instance.shutdown(unregister=[{"consumerGroup": self.group}])

    async def shutdown(self, consume_grace: float | None = None) -> None:
        """Stop pulling, finish running listeners, commit offsets (acknowledged), unregister, close."""
        if not self._started:
            await self._instance.shutdown()
            return
        self._started = False
        self._stopping = True
        for task in [*self._service_tasks, *self._background]:
            task.cancel()
        await asyncio.gather(*self._service_tasks, *self._background, return_exceptions=True)
        pulls = list(self._pull_tasks.values())
        for task in pulls:
            task.cancel()
        await asyncio.gather(*pulls, return_exceptions=True)
        self._pull_tasks.clear()
        # An orderly queue whose listener call outlives the grace keeps its lock until the broker expires it.
        still_busy = await self._consume.shutdown(self.shutdown_grace if consume_grace is None else consume_grace)
        busy = {pq.mq for pq in still_busy or ()}
        for pq in self._process_queues.values():
            pq.dropped = True
        await self.offset_store.persist_all(final=True)
        if self._uses_locks:
            await self._locks.unlock(mq for mq, pq in self._process_queues.items() if pq.locked and mq not in busy)
        await self._instance.shutdown(unregister=[{"consumerGroup": self.group}])

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
        """Drop each reset queue (its in-flight messages are not committed), store the new offset, rebalance: the
        queue is then pulled again from the offset the broker now holds."""
        async with self._rebalance_lock:
            for mq in [mq for mq in self._process_queues if (mq.topic, mq.broker_name, mq.queue_id) in offsets]:
                pq = self._process_queues.pop(mq)
                pq.dropped = True
                task = self._pull_tasks.pop(mq, None)
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                self.offset_store.update(mq, offsets[(mq.topic, mq.broker_name, mq.queue_id)])
                try:
                    await self.offset_store.persist(mq)
                except Exception as exc:
                    log.warning("storing the reset offset of %s failed: %s", mq, exc)
                self.offset_store.remove(mq)
                log.info("%s: offset of %s reset to %d", self.group, mq, offsets[(mq.topic, mq.broker_name,
                                                                                 mq.queue_id)])
        self._trigger_rebalance()

    def _trigger_rebalance(self) -> None:
        if self._rebalance_now is not None:
            self._rebalance_now.set()

    # ------------------------------------------------------------------ rebalancing
    async def _rebalance_service(self) -> None:
        while not self._stopping:
            await wait_event(self._rebalance_now, self.rebalance_interval)
            self._rebalance_now.clear()
            try:
                await self._rebalance()
            except Exception:
                log.exception("rebalance of group %s failed", self.group)

    async def _wanted_queues(self) -> set[MessageQueue]:
        wanted: set[MessageQueue] = set()
        consumer_lists: dict = {}  # broker address -> its list of the group, asked once per rebalance
        for topic in self._all_subscriptions():
            route = self._instance.routes.get(topic)
            if route is None:
                try:
                    route = await self._instance.update_route(topic)
                except Exception as exc:
                    log.debug("rebalance: no route for %s: %s", topic, exc)
                    continue
            queues = sort_queues(route.subscribe_queues(topic))
            if not self._clustering:
                wanted.update(queues)
                continue
            try:
                cids = sorted(await self._ops.consumer_ids(topic, answers=consumer_lists))
            except Exception as exc:
                log.debug("rebalance: consumer list for %s unavailable: %s", topic, exc)
                wanted.update(mq for mq in self._process_queues if mq.topic == topic)  # keep until it answers
                continue
            try:
                mine = self.allocate_strategy(self.group, self.client_id, queues, cids)
            except Exception:
                log.exception("allocate strategy %r failed for topic %s", self.allocate_strategy, topic)
                mine = [mq for mq in self._process_queues if mq.topic == topic]
            known = set(queues)
            wanted.update(mq for mq in mine if mq in known)
        return wanted

    async def _rebalance(self) -> None:
        async with self._rebalance_lock:
            if self._stopping:
                return
            wanted = await self._wanted_queues()
            subs = self._all_subscriptions()
            gone = [mq for mq in self._process_queues if mq not in wanted or mq.topic not in subs]
            if gone:
                await asyncio.gather(*(self._drop_queue(mq) for mq in gone))
            new = sort_queues(wanted - set(self._process_queues))
            if new and self._uses_locks:
                # Orderly: only queues this client could lock; the others are tried again next rebalance.
                granted = await self._locks.lock(new)
                locked_at = time.monotonic()
                new = [mq for mq in new if mq in granted]
            for mq in new:
                if self._stopping:
                    return
                try:
                    offset = await self._initial_offset(mq)  # orderly: read after the lock, as required
                except Exception as exc:
                    log.debug("cannot compute the start offset of %s: %s", mq, exc)
                    if self._uses_locks:
                        await self._locks.unlock([mq])
                    continue
                pq = ProcessQueue(
                    mq, max_count=self.pull_threshold_for_queue,
                    max_bytes=self.pull_threshold_size_for_queue * 1024 * 1024,
                    max_span=0 if self.orderly else self.consume_concurrently_max_span,
                )
                if self._uses_locks:
                    pq.lock_granted(locked_at)
                pq.advance_to(offset)
                self._process_queues[mq] = pq
                self.offset_store.update(mq, offset)
                self._pull_tasks[mq] = asyncio.create_task(self._pull_loop(pq, offset), name=f"pull-{mq}")

    async def _drop_queue(self, mq: MessageQueue) -> None:
        """A queue moved away: stop pulling it, commit its offset (acknowledged), forget it.

        Orderly: first wait for its running listener call to settle, and release the broker lock only after the
        offset is committed, so the next owner starts exactly where this one stopped."""
        pq = self._process_queues.pop(mq, None)
        if pq is not None:
            pq.dropped = True
        task = self._pull_tasks.pop(mq, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        settled = True
        if self.orderly and pq is not None:
            settled = await self._consume.quiesce(pq, self.shutdown_grace)
        try:
            await self.offset_store.persist(mq)
        except Exception as exc:
            log.warning("offset commit for dropped %s failed: %s", mq, exc)
        self.offset_store.remove(mq)
        if self._uses_locks and pq is not None and pq.locked:
            if settled:
                await self._locks.unlock([mq])
            else:
                log.warning("listener still running on dropped %s; its lock is left to expire on the broker", mq)

    async def _initial_offset(self, mq: MessageQueue) -> int:
        # An explicit start time must not be overridden by the broker's young-queue rule (offset 0 when the queue
        # still holds its first message); LAST_OFFSET keeps that rule, as RocketMQ does, so that a new group on a
        # new topic never skips messages produced before its members registered.
        by_time = self.consume_from_where == "CONSUME_FROM_TIMESTAMP" and not mq.topic.startswith(RETRY_PREFIX)
        stored = await self.offset_store.fetch(mq, zero_if_not_found=not by_time)
        if stored >= 0:
            return stored
        if mq.topic.startswith(RETRY_PREFIX) or self.consume_from_where == "CONSUME_FROM_FIRST_OFFSET":
            return await self._ops.min_offset(mq)
        if self.consume_from_where == "CONSUME_FROM_TIMESTAMP":
            return await self._ops.search_offset(mq, self.consume_timestamp)
        return await self._ops.max_offset(mq)

    # ------------------------------------------------------------------ pulling
    async def _pull_loop(self, pq: ProcessQueue, offset: int) -> None:
        mq = pq.mq
        ops = self._ops
        submit = self._consume.submit
        store = self.offset_store
        clustering = self._clustering
        timeout = self.suspend_timeout + 15.0
        suspend_ms = int(self.suspend_timeout * 1000)
        uses_locks = self._uses_locks
        while not pq.dropped and not self._stopping:
            if uses_locks and not pq.holds_lock():
                await asyncio.sleep(_UNLOCKED_PULL_RECHECK)  # only a locked queue is pulled (renewal relocks it)
                continue
            if pq.over_threshold():
                await pq.wait_until_drained(_FLOW_CONTROL_RECHECK)  # flow control: consumption is behind
                continue
            selector = self._subscriptions.get(mq.topic) or MessageSelector.tag("*")
            try:
                result = await ops.pull(
                    mq, selector, offset, self.pull_batch_size, timeout=timeout, suspend_timeout_ms=suspend_ms,
                    commit_offset=store.read(mq) if clustering else None,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, MQBrokerError) and exc.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                    if not self._group_missing_reported:
                        self._group_missing_reported = True
                        log.error("consumer group %s receives nothing: broker %s says %s (create the group with "
                                  "mqadmin updateSubGroup); pulls are retried every %.0f s", self.group, exc.addr,
                                  exc.remark, _PULL_ERROR_BACKOFF)
                else:
                    log.debug("pull %s failed: %s; retrying in %.0f s", mq, exc, _PULL_ERROR_BACKOFF)
                await asyncio.sleep(_PULL_ERROR_BACKOFF)
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

    # ------------------------------------------------------------------ orderly locks
    async def _lock_service(self) -> None:
        """Renew the locks of every assigned queue; a queue the broker no longer grants stops being consumed."""
        while True:
            await asyncio.sleep(self.lock_renew_interval)
            try:
                await self._renew_locks()
            except Exception:
                log.exception("renewing the queue locks of group %s failed", self.group)

    async def _renew_locks(self) -> None:
        # Serialised with rebalancing, so a queue being dropped (and unlocked) is never locked again behind its back.
        async with self._rebalance_lock:
            queues = list(self._process_queues.items())
            if not queues or self._stopping:
                return
            now = time.monotonic()
            granted = await self._locks.lock(mq for mq, _ in queues)
        for mq, pq in queues:
            if mq in granted:
                pq.lock_granted(now)
            elif pq.locked:
                log.warning("lost the lock on %s; its consumption pauses until it is locked again", mq)
                pq.locked = False

    async def _relock(self, pq: ProcessQueue) -> bool:
        """Called by the orderly service for a queue whose lock lapsed."""
        if pq.dropped or self._stopping:
            return False
        now = time.monotonic()
        if pq.mq not in await self._locks.lock([pq.mq]):
            return False
        if pq.dropped or self._stopping:  # dropped meanwhile: do not keep the queue from its next owner
            await self._locks.unlock([pq.mq])
            return False
        pq.lock_granted(now)
        return True

    # ------------------------------------------------------------------ offsets
    async def _persist_service(self) -> None:
        while True:
            await asyncio.sleep(self.persist_offset_interval)
            try:
                await self.offset_store.persist_all()
            except Exception:
                log.exception("persisting offsets of group %s failed", self.group)

    # ------------------------------------------------------------------ introspection
    def assigned_queues(self) -> list[MessageQueue]:
        return sort_queues(self._process_queues)

    def current_offsets(self) -> dict[MessageQueue, int]:
        return dict(self.offset_store.offsets) if self.offset_store else {}

    def cached_message_count(self) -> int:
        """Messages pulled and not yet consumed, over all queues (flow control works on this per queue)."""
        return sum(len(pq) for pq in self._process_queues.values())
