"""Queue allocation strategies: which queues of a topic one member of a consumer group owns.

Every member of a group computes its own share from the same sorted queue list and the same sorted client-id list, so
all members must use the same strategy (and, for a mixed Java/Python group, the same arithmetic as the Java client).
The three strategies below reproduce the assignments of Java's AllocateMessageQueueAveragely (contiguous blocks,
the default), AllocateMessageQueueAveragelyByCircle (round-robin) and AllocateMessageQueueConsistentHash:

ConsistentHash choice (documented because members must agree): a ring of `virtual_nodes` points per client (default
10), point key ``f"{client_id}-{i}"``; a queue is keyed by its Java ``MessageQueue.toString()`` text
``"MessageQueue [topic=T, brokerName=B, queueId=N]"``; the hash is the first 4 bytes of the MD5 digest read as an
unsigned big-endian integer (stable across processes and languages, unlike Python's salted hash()); a queue belongs
to the first ring point whose hash is >= the queue's hash, wrapping to the smallest point. When two points collide
the one inserted later (later client in sorted order, higher replica index) wins, as in a Java TreeMap.
Its benefit: when a member joins or leaves, only about 1/n of the queues move.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence

from client.message import MessageQueue

__all__ = [
    "AllocateStrategy",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMachineRoomNearby",
    "MachineRoomResolver",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "resolve_strategy",
    "sort_queues",
]


def sort_queues(queues) -> list[MessageQueue]:
    """Java MessageQueue.compareTo order: topic, then broker name, then queue id."""
    return sorted(queues, key=lambda q: (q.topic, q.broker_name, q.queue_id))


def allocate_averagely(
    consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    """The contiguous block of queues this consumer owns. Both lists must already be sorted."""
    if not current_cid or not mq_all or not cid_all or current_cid not in cid_all:
        return []  # not registered yet: take nothing rather than overlap
    index = cid_all.index(current_cid)
    n_mq = len(mq_all)
    n_cid = len(cid_all)
    mod = n_mq % n_cid
    if n_mq <= n_cid:
        average = 1
    elif mod > 0 and index < mod:
        average = n_mq // n_cid + 1
    else:
        average = n_mq // n_cid
    start = index * average if mod > 0 and index < mod else index * average + mod
    count = min(average, n_mq - start)
    return [mq_all[(start + i) % n_mq] for i in range(max(count, 0))]


def allocate_averagely_by_circle(
    consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    """Every n-th queue starting at this consumer's index (queue i goes to client i mod n)."""
    if not current_cid or not mq_all or not cid_all or current_cid not in cid_all:
        return []
    index = cid_all.index(current_cid)
    return list(mq_all[index :: len(cid_all)])


def ring_hash(key: str) -> int:
    """First 4 bytes of MD5(key) as an unsigned big-endian int: stable across processes and languages."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def java_queue_key(mq: MessageQueue) -> str:
    """The text Java's MessageQueue.toString() produces; the consistent-hash key of a queue."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


class AllocateStrategy:
    """Base class: `allocate(group, current_cid, sorted_queues, sorted_cids) -> owned queues`."""

    name = "BASE"

    def allocate(
        self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        raise NotImplementedError

    def __call__(self, consumer_group, current_cid, mq_all, cid_all) -> list[MessageQueue]:
        return self.allocate(consumer_group, current_cid, mq_all, cid_all)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AllocateMessageQueueAveragely(AllocateStrategy):
    """Contiguous blocks (Java's default): 8 queues, 3 clients -> [0,1,2] [3,4,5] [6,7]."""

    name = "AVG"

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        return allocate_averagely(consumer_group, current_cid, mq_all, cid_all)


class AllocateMessageQueueAveragelyByCircle(AllocateStrategy):
    """Round-robin: 8 queues, 3 clients -> [0,3,6] [1,4,7] [2,5]."""

    name = "AVG_BY_CIRCLE"

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        return allocate_averagely_by_circle(consumer_group, current_cid, mq_all, cid_all)


class AllocateMessageQueueConsistentHash(AllocateStrategy):
    """Hash ring with virtual nodes (see the module docstring for the exact, language-neutral definition)."""

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_nodes: int = 10, hash_function: Callable[[str], int] = ring_hash) -> None:
        if virtual_nodes < 1:
            raise ValueError("virtual_nodes must be >= 1")
        self.virtual_nodes = virtual_nodes
        self.hash_function = hash_function

    def ring(self, cid_all: Sequence[str]) -> tuple[list[int], list[str]]:
        """(sorted point hashes, owning client id per point)."""
        points: dict[int, str] = {}
        hash_of = self.hash_function
        for cid in cid_all:
            for i in range(self.virtual_nodes):
                points[hash_of(f"{cid}-{i}")] = cid  # a later colliding point replaces the earlier one
        hashes = sorted(points)
        return hashes, [points[h] for h in hashes]

    def owner(self, hashes: list[int], owners: list[str], key: str) -> str:
        index = bisect.bisect_left(hashes, self.hash_function(key))
        return owners[index if index < len(hashes) else 0]

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        if not current_cid or not mq_all or not cid_all or current_cid not in cid_all:
            return []
        hashes, owners = self.ring(cid_all)
        return [mq for mq in mq_all if self.owner(hashes, owners, java_queue_key(mq)) == current_cid]

    def __repr__(self) -> str:
        return f"AllocateMessageQueueConsistentHash(virtual_nodes={self.virtual_nodes})"


class AllocateMessageQueueByConfig(AllocateStrategy):
    """A fixed list of queues chosen by the application: every consumer using it gets exactly that list, whatever
    the group's other members do (Java's AllocateMessageQueueByConfig)."""

    name = "CONFIG"

    def __init__(self, queues: Sequence[MessageQueue]) -> None:
        self.queues = list(queues)

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        return list(self.queues)

    def __repr__(self) -> str:
        return f"AllocateMessageQueueByConfig({self.queues!r})"


def broker_room(broker_name: str) -> str | None:
    """The machine room a broker name declares, RocketMQ's ``room@brokerName`` convention; None without one."""
    room, sep, rest = broker_name.partition("@")
    return room if sep and room and rest else None


class AllocateMessageQueueByMachineRoom(AllocateStrategy):
    """Only queues of brokers named ``<room>@<brokerName>`` with a room in `consume_rooms` are considered; they are
    spread among all consumers of the group, each taking an equal block and the remainder dealt one each to the
    first consumers (Java's AllocateMessageQueueByMachineRoom)."""

    name = "MACHINE_ROOM"

    def __init__(self, consume_rooms: Sequence[str] | set[str]) -> None:
        self.consume_rooms = set(consume_rooms)

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        if not current_cid or current_cid not in cid_all:
            return []
        index = list(cid_all).index(current_cid)
        mine = [mq for mq in mq_all if broker_room(mq.broker_name) in self.consume_rooms]
        n = len(cid_all)
        per, remainder = divmod(len(mine), n)
        result = mine[per * index: per * index + per]
        if remainder > index:
            result.append(mine[index + per * n])
        return result

    def __repr__(self) -> str:
        return f"AllocateMessageQueueByMachineRoom({sorted(self.consume_rooms)!r})"


class MachineRoomResolver:
    """Where brokers and consumers are deployed. The default reads the room from broker names ``<room>@<name>``
    and from client ids ``<ip>@<room>@<name>`` (give the consumers ``instance_name="<room>@<name>"``); override
    either method, or pass callables, for another convention."""

    def __init__(self, broker_deploy_in: Callable[[MessageQueue], str | None] | None = None,
                 consumer_deploy_in: Callable[[str], str | None] | None = None) -> None:
        if broker_deploy_in is not None:
            self.broker_deploy_in = broker_deploy_in  # type: ignore[method-assign]
        if consumer_deploy_in is not None:
            self.consumer_deploy_in = consumer_deploy_in  # type: ignore[method-assign]

    def broker_deploy_in(self, mq: MessageQueue) -> str | None:
        return broker_room(mq.broker_name)

    def consumer_deploy_in(self, client_id: str) -> str | None:
        parts = client_id.split("@")
        return parts[1] if len(parts) >= 3 and parts[1] else None


class AllocateMachineRoomNearby(AllocateStrategy):
    """Queues of each machine room go to the consumers of that room (by `inner`, averagely by default); queues of
    rooms without a live consumer are shared by every consumer (Java's AllocateMachineRoomNearby). A queue or a
    consumer whose room cannot be told is an error, as in the reference."""

    name = "MACHINE_ROOM_NEARBY"

    def __init__(self, inner: AllocateStrategy | str | Callable | None = None,
                 resolver: MachineRoomResolver | None = None) -> None:
        self.inner = resolve_strategy(inner)
        self.resolver = resolver or MachineRoomResolver()

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        if not current_cid or not mq_all or not cid_all or current_cid not in cid_all:
            return []
        queues_by_room: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = self.resolver.broker_deploy_in(mq)
            if not room:
                raise ValueError(f"machine room unknown for {mq} (broker names must read '<room>@<name>')")
            queues_by_room.setdefault(room, []).append(mq)
        consumers_by_room: dict[str, list[str]] = {}
        for cid in cid_all:
            room = self.resolver.consumer_deploy_in(cid)
            if not room:
                raise ValueError(f"machine room unknown for consumer {cid} (instance_name must read '<room>@<name>')")
            consumers_by_room.setdefault(room, []).append(cid)
        my_room = self.resolver.consumer_deploy_in(current_cid)
        result: list[MessageQueue] = []
        local = queues_by_room.pop(my_room, None)
        if local:
            result.extend(self.inner(consumer_group, current_cid, local, consumers_by_room[my_room]))
        for room in sorted(queues_by_room):
            if room not in consumers_by_room:  # nobody consumes in that room: everyone shares its queues
                result.extend(self.inner(consumer_group, current_cid, queues_by_room[room], cid_all))
        return result

    def __repr__(self) -> str:
        return f"AllocateMachineRoomNearby(inner={self.inner!r})"


_NEEDS_ARGUMENTS = {
    "CONFIG": "AllocateMessageQueueByConfig(queues): the fixed list of queues this consumer takes",
    "ALLOCATEMESSAGEQUEUEBYCONFIG": "AllocateMessageQueueByConfig(queues): the fixed list of queues",
    "MACHINE_ROOM": "AllocateMessageQueueByMachineRoom(consume_rooms): the rooms whose brokers this group consumes",
    "ALLOCATEMESSAGEQUEUEBYMACHINEROOM": "AllocateMessageQueueByMachineRoom(consume_rooms)",
}

_BY_NAME: dict[str, Callable[[], AllocateStrategy]] = {
    "MACHINE_ROOM_NEARBY": AllocateMachineRoomNearby,
    "ALLOCATEMACHINEROOMNEARBY": AllocateMachineRoomNearby,
    "AVG": AllocateMessageQueueAveragely,
    "AVERAGELY": AllocateMessageQueueAveragely,
    "ALLOCATEMESSAGEQUEUEAVERAGELY": AllocateMessageQueueAveragely,
    "AVG_BY_CIRCLE": AllocateMessageQueueAveragelyByCircle,
    "AVERAGELY_BY_CIRCLE": AllocateMessageQueueAveragelyByCircle,
    "ALLOCATEMESSAGEQUEUEAVERAGELYBYCIRCLE": AllocateMessageQueueAveragelyByCircle,
    "CONSISTENT_HASH": AllocateMessageQueueConsistentHash,
    "ALLOCATEMESSAGEQUEUECONSISTENTHASH": AllocateMessageQueueConsistentHash,
}


def resolve_strategy(strategy: AllocateStrategy | str | Callable | None) -> Callable:
    """A strategy object, a name ('AVG', 'AVG_BY_CIRCLE', 'CONSISTENT_HASH', 'MACHINE_ROOM_NEARBY' or the Java class
    name; CONFIG and MACHINE_ROOM need arguments, so pass their objects), a plain
    callable(group, cid, queues, cids), or None (the default, averagely)."""
    if strategy is None:
        return AllocateMessageQueueAveragely()
    if isinstance(strategy, str):
        key = strategy.strip().upper()
        if key in _NEEDS_ARGUMENTS:
            raise ValueError(f"allocate strategy {strategy!r} needs arguments; pass {_NEEDS_ARGUMENTS[key]}")
        factory = _BY_NAME.get(key)
        if factory is None:
            raise ValueError(
                f"unknown allocate strategy {strategy!r}; use 'AVG', 'AVG_BY_CIRCLE', 'CONSISTENT_HASH', "
                f"'MACHINE_ROOM_NEARBY', or an AllocateMessageQueueByConfig / AllocateMessageQueueByMachineRoom object"
            )
        return factory()
    if callable(strategy):
        return strategy
    raise TypeError(f"allocate strategy must be a name, an AllocateStrategy or a callable, got {strategy!r}")
