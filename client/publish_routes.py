"""A producer's publish routes: per topic, the writable queues it sends to (client.route.TopicPublishInfo).

A topic's route is loaded from the name server on its first send (concurrent first sends share one look-up); a topic
the name server does not know borrows the brokers of the auto-create key topic (TBW102: the broker creates the topic
on the first send). Route refreshes of the client instance update the table in place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from client.errors import MessageValidationError, MQBrokerError, MQClientError
from client.instance import ClientInstance
from client.message import Message, MessageQueue
from client.outgoing import DEFAULT_TOPIC
from client.route import TopicPublishInfo, TopicRoute
from protocol.codes import ResponseCode

__all__ = ["PublishRoutes", "QueueSelector"]

QueueSelector = Callable[[list[MessageQueue], Message, object], MessageQueue]


class PublishRoutes:
    """topic -> TopicPublishInfo, loaded on demand through instance (which it also keeps refreshing them)."""

    def __init__(self, instance: ClientInstance, default_topic_queue_nums: int) -> None:
        self.instance = instance
        self.default_topic_queue_nums = default_topic_queue_nums  # queues of a topic created on its first send
        self.table: dict[str, TopicPublishInfo] = {}  # read directly by the producer's hot path
        self._loading: dict[str, asyncio.Future] = {}
        instance.route_listeners.append(self.on_route)

    async def publish_info(self, topic: str) -> TopicPublishInfo:
        """The topic's publish queues, loaded first when not known (or known without queues)."""
        info = self.table.get(topic)
        if info is None or not info.queues:
            info = await self.load(topic)
        return info

    def on_route(self, topic: str, route: TopicRoute) -> None:
        info = self.table.get(topic)
        if info is None:
            return
        queues = route.publish_queues(topic)
        if queues:
            info.queues = queues
            info.route = route
            info.via_default_topic = False

    async def load(self, topic: str) -> TopicPublishInfo:
        """Look the topic's route up now; concurrent callers wait for the same look-up."""
        waiting = self._loading.get(topic)
        if waiting is not None:
            return await asyncio.shield(waiting)
        fut = asyncio.get_running_loop().create_future()
        self._loading[topic] = fut
        try:
            info = await self._fetch(topic)
        except BaseException as exc:
            fut.set_exception(exc if isinstance(exc, Exception) else MQClientError(str(exc)))
            fut.exception()
            raise
        finally:
            self._loading.pop(topic, None)
        fut.set_result(info)
        return info

    async def _fetch(self, topic: str) -> TopicPublishInfo:
        instance = self.instance
        try:
            route = await instance.update_route(topic)
            queues = route.publish_queues(topic)
            via_default = False
        except MQBrokerError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            route = None
            queues = []
        if not queues:
            # Unknown topic: borrow the auto-create key topic's brokers; the broker creates the topic on first send.
            try:
                route = await instance.update_route(DEFAULT_TOPIC)
            except MQBrokerError as exc:
                raise MQClientError(
                    f"no route info for topic {topic!r} (and auto-create topic {DEFAULT_TOPIC} is unavailable: "
                    f"{exc.remark})"
                ) from exc
            queues = route.publish_queues(topic, max_queue_nums=self.default_topic_queue_nums)
            via_default = True
            if not queues:
                raise MQClientError(f"no writable queue for topic {topic!r}")
        instance.tracked_topics.add(topic)
        info = TopicPublishInfo(topic, queues, route, via_default)
        self.table[topic] = info
        return info

    async def choose_queue(self, topic: str, msg: Message, selector: QueueSelector | None, arg: object,
                           queue: MessageQueue | None) -> MessageQueue:
        """An ordered send's queue: the explicit one (of this topic), or the selector's pick among the topic's."""
        if queue is not None:
            if queue.topic != topic:
                raise MessageValidationError(f"queue {queue} does not belong to topic {topic!r}")
            return queue
        info = await self.publish_info(topic)
        mq = selector(list(info.queues), msg, arg)
        if not isinstance(mq, MessageQueue):
            raise MQClientError(f"queue selector returned {mq!r}, not a MessageQueue")
        return mq

    def probe_topic(self, broker: str) -> str:
        """A topic of broker for the fault detector's GET_MAX_OFFSET probe (any answer will do)."""
        for topic, info in self.table.items():
            if not info.via_default_topic and any(q.broker_name == broker for q in info.queues):
                return topic
        return DEFAULT_TOPIC
