"""Offsets in the messaging core: a group's committed offsets (query, update, reset by time) and a queue's own
offsets (min, max, by store time, earliest store time) — typed requests in, one Outcome out (reference §4.5, §4.7).

The remoting processors (broker/processors/consumer_offset.py and query.py) decode QUERY_CONSUMER_OFFSET (14),
UPDATE_CONSUMER_OFFSET (15), INVOKE_BROKER_TO_RESET_OFFSET (222), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
SEARCH_OFFSET_BY_TIMESTAMP (29) and GET_EARLIEST_MSG_STORETIME (32) into these requests, the one authorizer decides
on ``request.needs()`` (the same needs as broker/acl/resources.py's table for those codes), :class:`OffsetService`
executes them, and the processor encodes the outcome. Telling a reset group's online consumers
(RESET_CONSUMER_CLIENT_OFFSET) is a remoting notice: the reset's :class:`ResetResult` says what they must be told,
the processor sends the frames.

Refusal reasons (``Outcome.reason``): the field at fault — ``group``, ``topic``, ``queue``, ``offset``,
``boundary_type`` — or :data:`REASON_NOT_PERSISTED` when a reset could not be written. A group with no stored offset
is QUERY_NOT_FOUND (reason ``offset``), the answer a client takes for "start where your policy says"."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from broker.acl.authorizer import ANY_ACCESS, Needs
from broker.acl.resources import consumer_needs
from broker.core.consume import GroupNames
from broker.core.outcome import Outcome
from protocol.codes import ResponseCode

__all__ = ["QUEUE_EARLIEST_STORE_TIME", "QUEUE_MAX", "QUEUE_MIN", "QUEUE_OFFSET_BY_TIME", "REASON_NOT_PERSISTED",
           "OffsetService", "QueryConsumerOffset", "QueueOffsetQuery", "ResetOffset", "ResetResult",
           "UpdateConsumerOffset"]

log = logging.getLogger(__name__)

REASON_NOT_PERSISTED = "not_persisted"
NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"

# What a QueueOffsetQuery asks of a queue
QUEUE_MIN = "min"
QUEUE_MAX = "max"
QUEUE_OFFSET_BY_TIME = "by_time"
QUEUE_EARLIEST_STORE_TIME = "earliest_store_time"
_QUEUE_QUESTIONS = frozenset({QUEUE_MIN, QUEUE_MAX, QUEUE_OFFSET_BY_TIME, QUEUE_EARLIEST_STORE_TIME})


@dataclass(slots=True)
class QueryConsumerOffset:
    """The offset ``group`` committed on a queue. ``zero_if_not_found``: with none committed, answer 0 while the
    queue is young (message 0 still stored), the reference's rule for a brand-new group."""

    group: str
    topic: str
    queue_id: int
    zero_if_not_found: bool = True

    def needs(self) -> Needs:
        return consumer_needs(self.group, self.topic)


@dataclass(slots=True)
class UpdateConsumerOffset:
    """Commit ``offset`` (the next message to consume) for ``group`` on a queue; ``requester`` is who committed
    (kept with the offset on a slave, named in refusals)."""

    group: str
    topic: str
    queue_id: int
    offset: int
    requester: str | None = None

    def needs(self) -> Needs:
        return consumer_needs(self.group, self.topic)


@dataclass(slots=True)
class ResetOffset:
    """Move ``group``'s offsets on every readable queue of ``topic`` to the first message stored at or after
    ``timestamp`` (ms; -1: the queues' ends). Without ``force`` a queue only moves back, never forward."""

    group: str
    topic: str
    timestamp: int
    force: bool = True
    requester: str = "?"

    def needs(self) -> Needs:
        return consumer_needs(self.group, self.topic)


@dataclass(slots=True)
class ResetResult:
    """A reset done and persisted: the new offset per queue id, and what the group's online consumers must be told
    (the same group, topic, timestamp and force, with these offsets)."""

    group: str
    topic: str
    timestamp: int
    force: bool
    offsets: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class QueueOffsetQuery:
    """A queue's own offsets, no group involved: ``question`` is QUEUE_MIN, QUEUE_MAX, QUEUE_OFFSET_BY_TIME (with
    ``timestamp`` and ``boundary`` LOWER/UPPER, any case; None: LOWER) or QUEUE_EARLIEST_STORE_TIME (answers a store
    timestamp, -1 for an empty queue). An unknown topic or queue answers 0 (-1 for the store time), as the
    reference's broker does."""

    topic: str
    queue_id: int
    question: str
    timestamp: int = 0
    boundary: str | None = None

    def needs(self) -> Needs:
        """PUB or SUB on the topic: a producer and a consumer both read its queues' offsets."""
        return [(self.topic, ANY_ACCESS)]


class OffsetService:
    """Executes the offset requests over the message store (its per-queue reads), the topic and subscription-group
    registries and the consumer-offset table; ``group_names`` is the memo of legal group names the core shares."""

    def __init__(self, store: Any, topics: Any, groups: Any, offsets: Any,
                 group_names: GroupNames | None = None) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.group_names = group_names or GroupNames()

    # ---- a group's committed offsets --------------------------------------------------------------------------
    def query(self, request: QueryConsumerOffset) -> Outcome[int]:
        """The committed offset; 0 for a young queue when allowed; else QUERY_NOT_FOUND."""
        problem = self.group_names.name_problem(request.group)
        if problem is not None:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, f"consumerGroup: {problem}", "group")
        offset = self.offsets.query_offset(request.group, request.topic, request.queue_id)
        if offset >= 0:
            return Outcome.success(offset)
        if request.zero_if_not_found and self._first_message_in_store(request.topic, request.queue_id):
            return Outcome.success(0)
        return Outcome.refused(ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK, "offset")

    def _first_message_in_store(self, topic: str, queue_id: int) -> bool:
        """The young-queue rule: min offset 0 and message 0 still present in the commit log."""
        store = self.store
        if store.get_min_offset(topic, queue_id) > 0 or store.get_max_offset(topic, queue_id) <= 0:
            return False
        try:
            return store.get_message_store_time(topic, queue_id, 0) > 0
        except Exception:
            return False

    def update(self, request: UpdateConsumerOffset) -> Outcome[None]:
        """Store a commit once it is checked: a legal group (created when the broker auto-creates groups), a known
        topic, a queue it reads from, and an offset that can be a position in that queue (0..maxOffset, maxOffset
        meaning "everything consumed")."""
        group, topic, queue_id, offset = request.group, request.topic, request.queue_id, request.offset
        problem = self.group_names.name_problem(group)
        if problem is not None:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, f"consumerGroup: {problem}", "group")
        if self.groups.find_or_create(group) is None:
            return Outcome.refused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}",
                                   "group")
        topic_config = self.topics.get(topic)
        if topic_config is None:
            return Outcome.refused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist", "topic")
        if not 0 <= queue_id < topic_config.read_queue_nums:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER,
                                   f"queueId[{queue_id}] is illegal, topic[{topic}] has "
                                   f"{topic_config.read_queue_nums} read queues", "queue")
        if offset < 0:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER,
                                   f"commitOffset[{offset}] is illegal: an offset is never negative "
                                   f"(topic[{topic}] queueId[{queue_id}] group[{group}])", "offset")
        max_offset = self.store.get_max_offset(topic, queue_id)
        if offset > max_offset:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER,
                                   f"commitOffset[{offset}] is illegal: beyond the queue's maxOffset {max_offset} "
                                   f"(topic[{topic}] queueId[{queue_id}] group[{group}])", "offset")
        self.offsets.commit_offset(group, topic, queue_id, offset, request.requester)
        return Outcome.success()

    async def reset(self, request: ResetOffset) -> Outcome[ResetResult]:
        """Per readable queue, the offset of the first message stored at or after the timestamp (the queue's end
        for -1), taken when forced, when nothing is committed or when it is behind the committed one; the offsets
        are written and persisted before the answer, so a group with nobody online is reset too."""
        group, topic = request.group, request.topic
        problem = self.group_names.name_problem(group)
        if problem is not None:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, f"group: {problem}", "group")
        config = self.topics.get(topic)
        if config is None:
            return Outcome.refused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist", "topic")
        store, committed_offsets = self.store, self.offsets
        offsets: dict[int, int] = {}
        for queue_id in range(config.read_queue_nums):
            if request.timestamp == -1:
                target = store.get_max_offset(topic, queue_id)
            else:
                target = max(0, store.get_offset_by_time(topic, queue_id, request.timestamp))
            committed = committed_offsets.query_offset(group, topic, queue_id)
            offsets[queue_id] = target if request.force or committed < 0 or target < committed else committed
        committed_offsets.reset_offset(group, topic, offsets)
        try:
            await committed_offsets.persist_async()
        except OSError as exc:
            log.error("offsets of %s on %s reset, but persisting them failed: %s", group, topic, exc)
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, f"offsets reset, not persisted: {exc}",
                                   REASON_NOT_PERSISTED)
        return Outcome.success(ResetResult(group, topic, request.timestamp, request.force, offsets))

    # ---- a queue's own offsets --------------------------------------------------------------------------------
    def queue_offset(self, request: QueueOffsetQuery) -> Outcome[int]:
        """The offset (or, for QUEUE_EARLIEST_STORE_TIME, the store timestamp) the query asks for."""
        store, topic, queue_id, question = self.store, request.topic, request.queue_id, request.question
        if question == QUEUE_MAX:
            return Outcome.success(store.get_max_offset(topic, queue_id))
        if question == QUEUE_MIN:
            return Outcome.success(store.get_min_offset(topic, queue_id))
        if question == QUEUE_OFFSET_BY_TIME:
            boundary = (request.boundary or "LOWER").strip().upper()
            if boundary not in ("LOWER", "UPPER"):
                return Outcome.refused(ResponseCode.INVALID_PARAMETER, "header field 'boundaryType': expected LOWER "
                                       f"or UPPER, got {request.boundary!r}", "boundary_type")
            return Outcome.success(store.get_offset_by_time(topic, queue_id, request.timestamp, boundary == "UPPER"))
        if question == QUEUE_EARLIEST_STORE_TIME:
            return Outcome.success(store.get_earliest_message_time(topic, queue_id))
        return Outcome.refused(ResponseCode.INVALID_PARAMETER,
                               f"unknown queue offset question {question!r}: one of {sorted(_QUEUE_QUESTIONS)}",
                               "question")
