"""PushConsumer: subscriptions, rebalancing, long-poll pull loops, concurrent listener, offset commits.

Per assigned queue one pull-loop task long-polls the broker and hands each batch to listener tasks (at most
`consume_concurrency` at a time). Failed messages (RECONSUME_LATER or an exception) are sent back to the broker
(CONSUMER_SEND_MSG_BACK) so they return through %RETRY%<group>; offsets advance to the smallest unconsumed message
and are committed every `persist_offset_interval` seconds and at shutdown. Clustering groups rebalance every
`rebalance_interval` seconds and whenever the broker announces that the group's members changed.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable

from client.consumer_ops import ConsumerOps
from client.errors import MQBrokerError, MQClientError
from client.instance import ClientInstance
from client.message import ConsumeResult, MessageExt, MessageQueue, MessageSelector, PullStatus
from client.rebalance import ProcessQueue, allocate_averagely, sort_queues
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand

log = logging.getLogger(__name__)

__all__ = ["PushConsumer"]

RETRY_PREFIX = "%RETRY%"
_MODELS = ("CLUSTERING", "BROADCASTING")
_FROM_WHERE = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP")

Listener = Callable[[list[MessageExt]], "ConsumeResult | Awaitable[ConsumeResult]"]


class PushConsumer:
    """`c = PushConsumer("cg"); c.subscribe("T", "TagA || TagB"); c.register_listener(handler); await c.start()`."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str = "127.0.0.1:9876",
        *,
        message_model: str = "CLUSTERING",
        consume_from_where: str = "CONSUME_FROM_LAST_OFFSET",
        consume_timestamp: int | None = None,
        consume_concurrency: int = 20,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        max_reconsume_times: int = 16,
        suspend_timeout: float = 15.0,
        rebalance_interval: float = 20.0,
        persist_offset_interval: float = 5.0,
        instance_name: str | None = None,
        allow_msgpack: bool = True,
    ) -> None:
        if not group:
            raise ValueError("consumer group must not be empty")
        if message_model not in _MODELS:
            raise ValueError(f"message_model must be one of {_MODELS}, got {message_model!r}")
        if consume_from_where not in _FROM_WHERE:
            raise ValueError(f"consume_from_where must be one of {_FROM_WHERE}, got {consume_from_where!r}")
        self.group = group
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp or int((time.time() - 1800) * 1000)
        self.consume_concurrency = max(1, consume_concurrency)
        self.consume_message_batch_max_size = max(1, consume_message_batch_max_size)
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.max_reconsume_times = max_reconsume_times
        self.suspend_timeout = suspend_timeout
        self.rebalance_interval = rebalance_interval
        self.persist_offset_interval = persist_offset_interval
        self._instance = ClientInstance(
            namesrv_addr,
            instance_name=instance_name,
            heartbeat_data=self._heartbeat_data,
            request_handler=self._on_broker_request,
            allow_msgpack=allow_msgpack,
        )
        self._ops = ConsumerOps(self._instance, group)
        self._subscriptions: dict[str, MessageSelector] = {}
        self._listener: Listener | None = None
        self._process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task] = {}
        self._offsets: dict[MessageQueue, int] = {}
        self._committed: dict[MessageQueue, int] = {}
        self._consume_tasks: set[asyncio.Task] = set()
        self._semaphore: asyncio.Semaphore | None = None
        self._rebalance_now: asyncio.Event | None = None
        self._service_tasks: list[asyncio.Task] = []
        self._started = False

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
        """listener(msgs) -> ConsumeResult (may be async). An exception counts as RECONSUME_LATER."""
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

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._started:
            return
        if self._listener is None:
            raise MQClientError("register a listener before starting the push consumer")
        if not self._subscriptions:
            raise MQClientError("subscribe to at least one topic before starting the push consumer")
        self._semaphore = asyncio.Semaphore(self.consume_concurrency)
        self._rebalance_now = asyncio.Event()
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

    async def shutdown(self, consume_grace: float = 5.0) -> None:
        if not self._started:
            await self._instance.shutdown()
            return
        self._started = False
        for task in self._service_tasks:
            task.cancel()
        await asyncio.gather(*self._service_tasks, return_exceptions=True)
        for pq in self._process_queues.values():
            pq.dropped = True
        pulls = list(self._pull_tasks.values())
        for task in pulls:
            task.cancel()
        await asyncio.gather(*pulls, return_exceptions=True)
        if self._consume_tasks:
            await asyncio.wait(list(self._consume_tasks), timeout=consume_grace)
        await self._persist_offsets(oneway=False)
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

    async def _rebalance(self) -> None:
        wanted: set[MessageQueue] = set()
        subs = self._all_subscriptions()
        for topic in subs:
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
                # keep what we have for this topic until the broker answers
                wanted.update(mq for mq in self._process_queues if mq.topic == topic)
                continue
            wanted.update(allocate_averagely(self.group, self.client_id, queues, cids))
        for mq in [mq for mq in self._process_queues if mq not in wanted or mq.topic not in subs]:
            await self._drop_queue(mq)
        for mq in sorted(wanted - set(self._process_queues), key=lambda q: (q.topic, q.broker_name, q.queue_id)):
            try:
                offset = await self._initial_offset(mq)
            except Exception as exc:
                log.debug("cannot compute start offset of %s: %s", mq, exc)
                continue
            pq = ProcessQueue(mq)
            self._process_queues[mq] = pq
            self._offsets[mq] = offset
            self._pull_tasks[mq] = asyncio.create_task(self._pull_loop(pq, offset), name=f"pull-{mq}")

    async def _drop_queue(self, mq: MessageQueue) -> None:
        pq = self._process_queues.pop(mq, None)
        if pq is not None:
            pq.dropped = True
        task = self._pull_tasks.pop(mq, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._clustering and mq in self._offsets:
            try:
                await self._ops.update_consumer_offset(mq, self._offsets[mq], oneway=True)
            except Exception as exc:
                log.debug("offset commit for dropped %s failed: %s", mq, exc)
        self._offsets.pop(mq, None)
        self._committed.pop(mq, None)

    async def _initial_offset(self, mq: MessageQueue) -> int:
        if self._clustering:
            stored = await self._ops.query_consumer_offset(mq)
            if stored >= 0:
                return stored
        if mq.topic.startswith(RETRY_PREFIX):
            return 0
        if self.consume_from_where == "CONSUME_FROM_FIRST_OFFSET":
            return 0
        if self.consume_from_where == "CONSUME_FROM_TIMESTAMP":
            return await self._ops.search_offset(mq, self.consume_timestamp)
        return await self._ops.max_offset(mq)

    # ------------------------------------------------------------------ pulling
    async def _pull_loop(self, pq: ProcessQueue, offset: int) -> None:
        mq = pq.mq
        while not pq.dropped:
            if len(pq) >= self.pull_threshold_for_queue:
                await asyncio.sleep(0.05)  # flow control: consumption is behind
                continue
            selector = self._subscriptions.get(mq.topic) or MessageSelector.tag("*")
            commit = self._offsets.get(mq, -1) if self._clustering else None
            try:
                result = await self._ops.pull(
                    mq, selector, offset, self.pull_batch_size,
                    timeout=self.suspend_timeout + 15.0,
                    suspend_timeout_ms=int(self.suspend_timeout * 1000),
                    commit_offset=commit,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("pull %s failed: %s; retrying in 3 s", mq, exc)
                await asyncio.sleep(3.0)
                continue
            if pq.dropped:
                return
            status = result.status
            if status is PullStatus.FOUND:
                offset = result.next_begin_offset
                messages = result.messages
                if messages:
                    pq.add(messages)
                    self._dispatch(pq, messages)
                elif not pq.inflight:
                    self._offsets[mq] = offset  # everything filtered out client-side
            elif status is PullStatus.OFFSET_ILLEGAL:
                offset = result.next_begin_offset
                self._offsets[mq] = offset
                if self._clustering:
                    try:
                        await self._ops.update_consumer_offset(mq, offset, oneway=True)
                    except Exception:
                        pass
            else:  # NO_NEW_MSG / NO_MATCHED_MSG
                offset = result.next_begin_offset
                if not pq.inflight:
                    self._offsets[mq] = offset

    # ------------------------------------------------------------------ consuming
    def _dispatch(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        retry_topic = RETRY_PREFIX + self.group
        for m in messages:
            if m.topic == retry_topic:
                original = m.properties.get("RETRY_TOPIC")
                if original:
                    m.topic = original
        size = self.consume_message_batch_max_size
        for i in range(0, len(messages), size):
            task = asyncio.create_task(self._consume(pq, messages[i : i + size]))
            self._consume_tasks.add(task)
            task.add_done_callback(self._consume_tasks.discard)

    async def _consume(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        async with self._semaphore:
            if pq.dropped:
                return
            try:
                result = self._listener(messages)
                if inspect.isawaitable(result):
                    result = await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("listener of group %s raised; messages will be retried", self.group)
                result = ConsumeResult.RECONSUME_LATER
            if result is None:
                result = ConsumeResult.SUCCESS
            if result is not ConsumeResult.SUCCESS and self._clustering:
                failed_locally = []
                for m in messages:
                    if not await self._send_back(pq.mq, m):
                        failed_locally.append(m)
                if failed_locally:
                    # Could not hand them to the broker: consume again here later, keeping the offset pinned.
                    asyncio.get_running_loop().call_later(5.0, self._redispatch, pq, failed_locally)
                    done = [m for m in messages if m not in failed_locally]
                    if done:
                        self._advance(pq, done)
                    return
        self._advance(pq, messages)

    def _redispatch(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        if pq.dropped or not self._started:
            return
        task = asyncio.create_task(self._consume(pq, messages))
        self._consume_tasks.add(task)
        task.add_done_callback(self._consume_tasks.discard)

    def _advance(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        offset = pq.remove(messages)
        if offset >= 0 and not pq.dropped:
            self._offsets[pq.mq] = offset

    async def _send_back(self, mq: MessageQueue, m: MessageExt) -> bool:
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
            addr = await self._ops.broker_addr(mq)
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
            await self._persist_offsets(oneway=True)

    async def _persist_offsets(self, oneway: bool) -> None:
        if not self._clustering:
            return  # broadcasting offsets stay with this client
        for mq, offset in list(self._offsets.items()):
            if offset < 0 or (oneway and self._committed.get(mq) == offset):
                continue
            try:
                await self._ops.update_consumer_offset(mq, offset, oneway=oneway)
                self._committed[mq] = offset
            except Exception as exc:
                log.debug("offset commit for %s failed: %s", mq, exc)

    # ------------------------------------------------------------------ introspection
    def assigned_queues(self) -> list[MessageQueue]:
        return sort_queues(self._process_queues)

    def current_offsets(self) -> dict[MessageQueue, int]:
        return dict(self._offsets)
