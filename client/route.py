"""Topic routes as the client needs them: which queues to publish to / pull from, and broker addresses.

Parses the name server's TopicRouteData JSON liberally (quoted or bare brokerId keys, numbers as strings) and derives
the publish queue list (writable queues of brokers that have a master) and the subscribe list (readable queues).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from client.message import MessageQueue
from protocol.codes import PERM_READ, PERM_WRITE
from protocol.jsonlenient import loads_lenient

MASTER_ID = 0


def _as_int(value: object, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool):
        return int(value)
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


@dataclass(slots=True)
class QueueRoute:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(slots=True)
class BrokerRoute:
    broker_name: str
    cluster: str
    addrs: dict[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.addrs.get(MASTER_ID)


@dataclass(slots=True)
class TopicRoute:
    queues: list[QueueRoute] = field(default_factory=list)
    brokers: list[BrokerRoute] = field(default_factory=list)
    order_topic_conf: str | None = None

    @classmethod
    def parse(cls, body: bytes | str) -> TopicRoute:
        """TopicRouteData JSON -> TopicRoute (ValueError if the body is not a route)."""
        obj = loads_lenient(body) if body else {}
        if not isinstance(obj, dict):
            raise ValueError("topic route body is not a JSON object")
        return cls.from_json(obj)

    @classmethod
    def from_json(cls, obj: dict) -> TopicRoute:
        queues = []
        for q in obj.get("queueDatas") or []:
            if not isinstance(q, dict) or not q.get("brokerName"):
                continue
            queues.append(
                QueueRoute(
                    str(q["brokerName"]),
                    _as_int(q.get("readQueueNums")),
                    _as_int(q.get("writeQueueNums")),
                    _as_int(q.get("perm"), PERM_READ | PERM_WRITE),
                    _as_int(q.get("topicSysFlag")),
                )
            )
        brokers = []
        for b in obj.get("brokerDatas") or []:
            if not isinstance(b, dict) or not b.get("brokerName"):
                continue
            addrs: dict[int, str] = {}
            for key, addr in (b.get("brokerAddrs") or {}).items():
                try:
                    addrs[int(key)] = str(addr)
                except (TypeError, ValueError):
                    continue
            brokers.append(BrokerRoute(str(b["brokerName"]), str(b.get("cluster") or ""), addrs))
        queues.sort(key=lambda q: q.broker_name)
        brokers.sort(key=lambda b: b.broker_name)
        order = obj.get("orderTopicConf")
        return cls(queues, brokers, str(order) if order else None)

    def broker(self, broker_name: str) -> BrokerRoute | None:
        for b in self.brokers:
            if b.broker_name == broker_name:
                return b
        return None

    def publish_queues(self, topic: str, max_queue_nums: int | None = None) -> list[MessageQueue]:
        """Writable queues on brokers with a master, ordered by broker name (§3 "Publish queue list")."""
        result: list[MessageQueue] = []
        if self.order_topic_conf:
            for part in self.order_topic_conf.split(";"):
                name, _, nums = part.partition(":")
                if name and nums.strip().isdigit():
                    result.extend(MessageQueue(topic, name.strip(), i) for i in range(int(nums)))
            return result
        for q in self.queues:
            if not q.perm & PERM_WRITE:
                continue
            broker = self.broker(q.broker_name)
            if broker is None or broker.master_addr is None:
                continue
            count = q.write_queue_nums
            if max_queue_nums is not None:  # route borrowed from TBW102: Java uses min(defaultTopicQueueNums, read)
                count = min(max_queue_nums, q.read_queue_nums)
            result.extend(MessageQueue(topic, q.broker_name, i) for i in range(count))
        return result

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues (§3 "Subscribe queue list")."""
        result: list[MessageQueue] = []
        for q in self.queues:
            if q.perm & PERM_READ:
                result.extend(MessageQueue(topic, q.broker_name, i) for i in range(q.read_queue_nums))
        return result


class TopicPublishInfo:
    """The publish queues of one topic plus the round-robin cursor used to pick the next one."""

    __slots__ = ("topic", "queues", "route", "_index", "via_default_topic")

    def __init__(self, topic: str, queues: list[MessageQueue], route: TopicRoute, via_default_topic: bool = False):
        self.topic = topic
        self.queues = queues
        self.route = route
        self._index = random.randrange(1 << 16)
        self.via_default_topic = via_default_topic

    def select(self, avoid_broker: str | None = None) -> MessageQueue:
        """Next queue round-robin; with avoid_broker, prefer a queue on another broker (retry after failure)."""
        queues = self.queues
        n = len(queues)
        self._index += 1
        if avoid_broker is None:
            return queues[self._index % n]
        for _ in range(n):
            self._index += 1
            mq = queues[self._index % n]
            if mq.broker_name != avoid_broker:
                return mq
        return queues[self._index % n]

    def select_available(self, blocked: dict[str, float], now: float, avoid_broker: str | None = None,
                         reset: bool = False) -> MessageQueue:
        """Queue choice with fault isolation (the reference's >= 5.1.4 order): the next queue round-robin whose broker
        is available (`blocked`: broker -> time it may be used again, absent = fine) and not avoid_broker; else one
        whose broker is at least reachable (not waiting for a probe) and not avoid_broker; else `select(avoid_broker)`.
        reset: start from a random index (retries, so that concurrent retries spread)."""
        queues = self.queues
        n = len(queues)
        if reset:
            self._index = random.randrange(1 << 16)
        start = self._index
        for i in range(1, n + 1):
            mq = queues[(start + i) % n]
            name = mq.broker_name
            if name != avoid_broker:
                until = blocked.get(name)
                if until is None or until <= now:
                    self._index = start + i
                    return mq
        for i in range(1, n + 1):
            mq = queues[(start + i) % n]
            if mq.broker_name != avoid_broker and blocked.get(mq.broker_name) != math.inf:
                self._index = start + i
                return mq
        return self.select(avoid_broker)
