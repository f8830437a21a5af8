"""PushConsumer: subscriptions, rebalancing, long-poll pull loops with flow control, offset commits.

Per assigned queue one pull-loop task long-polls the broker and hands each batch to the ConsumeService (a pool of
`consume_thread_max` workers). A queue's loop pauses while the queue holds more than `pull_threshold_for_queue`
messages or `pull_threshold_size_for_queue` MiB of bodies not yet consumed, and resumes as soon as consumption drains
it. The committed offset of a queue is the smallest offset still in flight. CLUSTERING groups keep offsets on the
broker (committed every `persist_offset_interval` seconds, when a queue moves to another member and at shutdown);
BROADCASTING consumers keep them in a local file (see client.offset_store). CLUSTERING groups rebalance every
`rebalance_interval` seconds and as soon as the broker announces that the group's members changed
(NOTIFY_CONSUMER_IDS_CHANGED), with the strategy given as `allocate_strategy` (see client.allocate).

Shutdown is graceful: stop pulling, hand back queued messages, let running listeners finish (up to
`shutdown_grace` seconds), commit offsets and wait for the broker's acknowledgement, unregister from the brokers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

from client.allocate import AllocateStrategy, resolve_strategy, sort_queues
from client.consume_service import RETRY_PREFIX, ConsumeService, Listener
from client.consumer_ops import ConsumerOps
from client.errors import MQBrokerError, MQClientError
from client.instance import ClientInstance
from client.message import MessageExt, MessageQueue, MessageSelector, PullStatus
from client.offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore, default_offset_store_dir
from client.process_queue import ProcessQueue
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand

log = logging.getLogger(__name__)

__all__ = ["PushConsumer"]

_MODELS = ("CLUSTERING", "BROADCASTING")
_FROM_WHERE = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP")
_PULL_ERROR_BACKOFF = 3.0
_FLOW_CONTROL_RECHECK = 1.0


class PushConsumer:
    """`c = PushConsumer("cg"); c.subscribe("T", "TagA || TagB"); c.register_listener(handler); await c.start()`.

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
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = 16,
        suspend_timeout: float = 15.0,
        rebalance_interval: float = 20.0,
        persist_offset_interval: float = 5.0,
        shutdown_grace: float = 5.0,
        offset_store_dir: str | os.PathLike | None = None,
        instance_name: str | None = None,
        allow_msgpack: bool = True,
        heartbeat_interval: float = 30.0,
        route_refresh_interval: float = 30.0,
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
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue  # MiB, as in RocketMQ
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.max_reconsume_times = max_reconsume_times
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
        )
        self._ops = ConsumerOps(self._instance, group)
        self._subscriptions: dict[str, MessageSelector] = {}
        self._listener: Listener | None = None
        self._process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task] = {}
        self.offset_store: OffsetStore | None = None
        self._consume: ConsumeService | None = None
        self._rebalance_now: asyncio.Event | None = None
        self._rebalance_lock: asyncio.Lock | None = None
        self._service_tasks: list[asyncio.Task] = []
        self._started = False
        self._stopping = False

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

    def register_listener(self, listener: Listener) -> None:
        """listener(msgs) -> ConsumeResult; `async def` runs on the loop, a plain function in the thread pool.
        An exception counts as RECONSUME_LATER."""
        if not callable(listener):
            raise TypeError("listener must be callable")
        self._listener = listener

    def _all_subscriptions(self) -> dict[str, MessageSelector]:
        subs = dict(self._subscriptions)
        if self._clustering:
            subs.setdefault(RETRY_PREFIX + self.group, MessageSelector.tag("*"))
        return subs

    def _heartbeat_data(self) -> dict:
        subscriptions = []
        for topic, sel in sorted(self._all_subscriptions().items()):
            subscriptions.append(
                {
                    "topic": topic,
                    "subString": sel.expression,
                    "tagsSet": sorted(sel.tags_set),
                    "codeSet": list(sel.code_set),
                    "subVersion": self._ops._sub_version(topic, sel.expression),
                    "expressionType": sel.expression_type,
                    "classFilterMode": False,
                }
            )
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
        self.offset_store = self._make_offset_store()
        await self.offset_store.load()
        self._consume = ConsumeService(
            self.group, self._listener, self.offset_store, self._send_back,
            thread_max=self.consume_thread_max, batch_max_size=self.consume_message_batch_max_size,
            clustering=self._clustering,
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
        await self._instance.heartbeat_all()
        await self._rebalance()
        self._service_tasks = [
            asyncio.create_task(self._rebalance_service(), name=f"rebalance-{self.group}"),
            asyncio.create_task(self._persist_service(), name=f"persist-offsets-{self.group}"),
        ]

    async def shutdown(self, consume_grace: float | None = None) -> None:
        """Stop pulling, finish running listeners, commit offsets (acknowledged), unregister, close."""
        if not self._started:
            await self._instance.shutdown()
            return
        self._started = False
        self._stopping = True
        for task in self._service_tasks:
            task.cancel()
        await asyncio.gather(*self._service_tasks, return_exceptions=True)
        pulls = list(self._pull_tasks.values())
        for task in pulls:
            task.cancel()
        await asyncio.gather(*pulls, return_exceptions=True)
        self._pull_tasks.clear()
        await self._consume.shutdown(self.shutdown_grace if consume_grace is None else consume_grace)
        for pq in self._process_queues.values():
            pq.dropped = True
        await self.offset_store.persist_all(final=True)
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
        return None

    def _trigger_rebalance(self) -> None:
        if self._rebalance_now is not None:
            self._rebalance_now.set()

    # ------------------------------------------------------------------ rebalancing
    async def _rebalance_service(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._rebalance_now.wait(), self.rebalance_interval)
            except asyncio.TimeoutError:
                pass
            self._rebalance_now.clear()
            try:
                await self._rebalance()
            except Exception:
                log.exception("rebalance of group %s failed", self.group)

    async def _wanted_queues(self) -> set[MessageQueue]:
        wanted: set[MessageQueue] = set()
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
                cids = sorted(await self._ops.consumer_ids(topic))
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
            for mq in sort_queues(wanted - set(self._process_queues)):
                if self._stopping:
                    return
                try:
                    offset = await self._initial_offset(mq)
                except Exception as exc:
                    log.debug("cannot compute the start offset of %s: %s", mq, exc)
                    continue
                pq = ProcessQueue(
                    mq, max_count=self.pull_threshold_for_queue,
                    max_bytes=self.pull_threshold_size_for_queue * 1024 * 1024,
                    max_span=self.consume_concurrently_max_span,
                )
                pq.advance_to(offset)
                self._process_queues[mq] = pq
                self.offset_store.update(mq, offset)
                self._pull_tasks[mq] = asyncio.create_task(self._pull_loop(pq, offset), name=f"pull-{mq}")

    async def _drop_queue(self, mq: MessageQueue) -> None:
        """A queue moved away: stop pulling it, commit its offset (acknowledged), forget it."""
        pq = self._process_queues.pop(mq, None)
        if pq is not None:
            pq.dropped = True
        task = self._pull_tasks.pop(mq, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        try:
            await self.offset_store.persist(mq)
        except Exception as exc:
            log.warning("offset commit for dropped %s failed: %s", mq, exc)
        self.offset_store.remove(mq)

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
        while not pq.dropped and not self._stopping:
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
                log.debug("pull %s failed: %s; retrying in %.0f s", mq, exc, _PULL_ERROR_BACKOFF)
                await asyncio.sleep(_PULL_ERROR_BACKOFF)
                continue
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
    async def _send_back(self, pq: ProcessQueue, m: MessageExt) -> bool:
        """CONSUMER_SEND_MSG_BACK: the broker stores the message again for redelivery through %RETRY%<group>."""
        ext = {
            "offset": m.commit_log_offset,
            "group": self.group,
            "delayLevel": 0,
            "originMsgId": m.msg_id,
            "originTopic": m.topic,
            "unitMode": False,
            "maxReconsumeTimes": self.max_reconsume_times,
        }
        try:
            addr = await self._ops.broker_addr(pq.mq)
            reply = await self._instance.invoke_broker(
                addr, RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=ext)
            )
        except Exception as exc:
            log.warning("send-back of %s failed: %s", m.msg_id, exc)
            return False
        if reply.code != ResponseCode.SUCCESS:
            log.warning("send-back of %s refused: %s %s", m.msg_id, reply.code, reply.remark)
            return False
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
