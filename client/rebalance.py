"""Queue allocation among the consumers of a group, and per-queue consumption bookkeeping.

allocate_averagely reproduces the Java default strategy (AllocateMessageQueueAveragely) exactly, because every member
of a group (Java or Python) must compute the same assignment from the same sorted lists or queues get consumed twice
or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from client.message import MessageExt, MessageQueue


def allocate_averagely(
    consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    """The contiguous block of queues this consumer owns. Both lists must already be sorted."""
    if not current_cid or not mq_all or not cid_all:
        return []
    if current_cid not in cid_all:
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


def sort_queues(queues: Sequence[MessageQueue]) -> list[MessageQueue]:
    """Java MessageQueue.compareTo order: topic, then broker name, then queue id."""
    return sorted(queues, key=lambda q: (q.topic, q.broker_name, q.queue_id))


class ProcessQueue:
    """Messages of one queue pulled but not yet consumed; yields the offset that is safe to commit."""

    __slots__ = ("mq", "inflight", "max_offset_seen", "dropped", "consumed_offset")

    def __init__(self, mq: MessageQueue) -> None:
        self.mq = mq
        # queue offset -> message; offsets are added in ascending order, so the first key is the smallest.
        self.inflight: dict[int, MessageExt] = {}
        self.max_offset_seen = -1
        self.dropped = False
        self.consumed_offset = -1

    def add(self, messages: list[MessageExt]) -> None:
        inflight = self.inflight
        for m in messages:
            inflight[m.queue_offset] = m
        if messages:
            last = messages[-1].queue_offset
            if last > self.max_offset_seen:
                self.max_offset_seen = last

    def remove(self, messages: list[MessageExt]) -> int:
        """Forget consumed messages; returns the offset to commit (-1 if nothing was ever added)."""
        inflight = self.inflight
        for m in messages:
            inflight.pop(m.queue_offset, None)
        if inflight:
            return next(iter(inflight))
        if self.max_offset_seen >= 0:
            return self.max_offset_seen + 1
        return -1

    def __len__(self) -> int:
        return len(self.inflight)
