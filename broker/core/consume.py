"""Pull: a typed :class:`PullRequest` in, an ``Outcome[PullResult]`` out, and long polling on the one
:class:`~broker.core.arrivals.Arrivals` (reference §4.4, §4.4.4).

The remoting processor (broker/processors/pull.py) decodes PULL_MESSAGE / LITE_PULL_MESSAGE into a PullRequest,
calls :meth:`Puller.pull`, and encodes the outcome; a pull that found nothing and may wait is held with
:meth:`Puller.hold`, whose wake-up the processor turns into one more :meth:`Puller.pull`. Pulls are synchronous
(the store reads mapped files on the loop thread).

Codes: the outcome carries the pull's response code (SUCCESS, PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY,
PULL_OFFSET_MOVED) with a PullResult for all four; a refusal carries no value and, for NO_PERMISSION, ``field``
says what forbids it (``broker``, ``group`` or ``topic``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.acl.resources import consumer_needs
from broker.acl.authorizer import Needs
from broker.core.arrivals import Arrivals, Waiter
from broker.core.outcome import Outcome
from broker.filter import (
    EXPRESSION_TAG,
    MessageFilter,
    SelectorError,
    UnsupportedExpressionType,
    build_filter,
    is_retry_topic,
    normalize_expression_type,
    retry_filter,
)
from broker.log_limit import RateLimitedLog
from broker.managers.derived_names import CONSUMER_GROUP_MAX_LENGTH, consumer_group_problem
from broker.managers.topic_config import validate_group
from protocol.codes import PERM_READ, ResponseCode

__all__ = ["MAX_FILTER_SCAN_UNITS", "GroupNames", "PullRequest", "PullResult", "Puller", "SubscriptionError",
           "consumer_needs", "filter_scan_units"]

log = logging.getLogger(__name__)
_ignored = RateLimitedLog(log)  # per-pull notices (a commitOffset not stored): one line per 10 s

# Consume-queue units examined per filtered pull at most (the reference's 16000-byte scan); the
# response's nextBeginOffset tells the client where to continue.
MAX_FILTER_SCAN_UNITS = 800
# Selector evaluation one pull may do, in selector weight units (about one token of the selector per record,
# ~0.1 us each): all 800 units for selectors up to 200 tokens; a selector at the size limits (5000 tokens)
# examines 32 units per pull, so one pull never holds the loop for long whatever the selector.
FILTER_SCAN_WEIGHT_BUDGET = 800 * 200
_FILTER_CACHE_LIMIT = 4096
_CACHEABLE_EXPRESSION_CHARS = 4096
_VALID_GROUPS_LIMIT = 100_000

# GetMessage status name -> (response code when request offset != 0, code when it is 0)
_STATUS_CODES: dict[str, tuple[int, int]] = {
    "FOUND": (ResponseCode.SUCCESS, ResponseCode.SUCCESS),
    "NO_MATCHED_MESSAGE": (ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_RETRY_IMMEDIATELY),
    "MESSAGE_WAS_REMOVING": (ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_RETRY_IMMEDIATELY),
    "NO_MATCHED_LOGIC_QUEUE": (ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_NOT_FOUND),
    "NO_MESSAGE_IN_QUEUE": (ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_NOT_FOUND),
    "OFFSET_FOUND_NULL": (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_NOT_FOUND),
    "OFFSET_OVERFLOW_BADLY": (ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_OFFSET_MOVED),
    "OFFSET_OVERFLOW_ONE": (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_NOT_FOUND),
    "OFFSET_TOO_SMALL": (ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_OFFSET_MOVED),
    "OFFSET_RESET": (ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_OFFSET_MOVED),
}




def filter_scan_units(message_filter: MessageFilter) -> int:
    """Consume-queue units a filtered pull examines: fewer for a selector that is costly to evaluate."""
    selector = message_filter.selector
    if selector is None:
        return MAX_FILTER_SCAN_UNITS
    return max(1, min(MAX_FILTER_SCAN_UNITS, FILTER_SCAN_WEIGHT_BUDGET // selector.weight))


class SubscriptionError(Exception):
    """A subscription that cannot be used; carries the response code."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass(slots=True)
class PullRequest:
    """One pull, as either protocol states it. ``subscription`` (expression type, expression) when the request
    carries its own (the pull's subscription flag), else the group's registered one (heartbeats) is used."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_nums: int = 32
    subscription: tuple[str | None, str | None] | None = None
    sub_version: int = 0
    commit_offset: int | None = None  # the consumer's position to store (first run only); None/-1: nothing
    suspend_ms: int | None = None  # may wait this long for messages (capped by the broker); None: answer now
    requester: str = "?"  # who asked (remarks and notices)

    def needs(self) -> Needs:
        return consumer_needs(self.group, self.topic)


@dataclass(slots=True)
class PullResult:
    """What a pull found: the store's status name, offsets, the records (``buffers``, SUCCESS only), the broker the
    consumer should read from next (slaveReadEnable), and the topic's and group's system flags."""

    status: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[Any] = field(default_factory=list)
    message_count: int = 0
    suggest_broker_id: int = 0
    topic_sys_flag: int | None = None
    group_sys_flag: int | None = None

    @property
    def body(self) -> bytes:
        buffers = self.buffers
        if not buffers:
            return b""
        return buffers[0] if len(buffers) == 1 and type(buffers[0]) is bytes else b"".join(buffers)

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.buffers)


class GroupNames:
    """Consumer-group name checks with a set of names that passed (a set hit on the hot path)."""

    def __init__(self) -> None:
        self._valid: set[str] = set()

    def name_problem(self, group: str | None) -> str | None:
        """None when ``group`` is a legal group name, else why not; unlike :meth:`problem`, its %RETRY% / %DLQ%
        names are not checked (the offset requests' rule: they read and write offsets, they make no retry topic)."""
        if group is not None and group in self._valid:
            return None
        problem = validate_group(group)
        if problem is None:
            if len(self._valid) >= _VALID_GROUPS_LIMIT:
                self._valid.clear()
            self._valid.add(group)
        return problem

    def problem(self, group: str | None) -> str | None:
        """None when ``group`` is a legal consumer group (its %RETRY% and %DLQ% names fit too), else why not."""
        if group is not None and group in self._valid and len(group) <= CONSUMER_GROUP_MAX_LENGTH:
            return None
        if group not in self._valid:
            problem = validate_group(group)
            if problem is not None:
                return problem
            if len(self._valid) >= _VALID_GROUPS_LIMIT:
                self._valid.clear()
            self._valid.add(group)
        return consumer_group_problem(group)


def _memory_bytes() -> int:
    """Physical RAM (the reference's basis for 'cold' data)."""
    global _MEMORY
    if _MEMORY is None:
        try:
            _MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            _MEMORY = 8 << 30
    return _MEMORY


_MEMORY: int | None = None


class Puller:
    """Executes pulls over the store, the topic and group registries, the consumers' subscriptions, the offsets
    and the filters; holds empty pulls on ``arrivals``. ``settings`` is the broker's live configuration (read per
    pull: permissions and polling times can change at run time)."""

    def __init__(self, settings: Any, store: Any, topics: Any, groups: Any, consumers: Any, offsets: Any,
                 filters: Any, arrivals: Arrivals, group_names: GroupNames | None = None) -> None:
        self.settings = settings
        self.store = store
        self.topics = topics
        self.groups = groups
        self.consumers = consumers
        self.offsets = offsets
        self.filters = filters
        self.arrivals = arrivals
        self.group_names = group_names or GroupNames()
        self._filter_cache: dict[tuple[str, str], MessageFilter | SubscriptionError | None] = {}

    # ---- filters ------------------------------------------------------------------------------------------------
    def message_filter(self, expression_type: str | None, sub_string: str | None) -> MessageFilter | None:
        """Cached filter for a subscription (None = match all); SubscriptionError when unusable."""
        kind = normalize_expression_type(expression_type)
        key = (kind, sub_string or "")
        cached = self._filter_cache.get(key, self)
        if cached is self:
            try:
                cached = build_filter(kind, sub_string)
            except (SelectorError, UnsupportedExpressionType) as exc:
                cached = SubscriptionError(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
            if len(key[1]) <= _CACHEABLE_EXPRESSION_CHARS:  # huge selectors: compile_selector's own cache
                if len(self._filter_cache) >= _FILTER_CACHE_LIMIT:
                    self._filter_cache.clear()
                self._filter_cache[key] = cached
        if isinstance(cached, SubscriptionError):
            raise SubscriptionError(cached.code, cached.remark)
        return cached

    def resolve_filter(self, request: PullRequest) -> MessageFilter | None:
        """Find the subscription (the request's own, or the heartbeat registration) and build its filter;
        SubscriptionError when there is none usable."""
        if request.subscription is not None:
            expression_type = normalize_expression_type(request.subscription[0])
            sub_string = request.subscription[1]
        else:
            group_info = self.consumers.get_group(request.group)
            if group_info is None:
                raise SubscriptionError(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's group info not exist, group: {request.group} (no heartbeat yet)")
            subscription = group_info.find_subscription(request.topic)
            if subscription is None:
                raise SubscriptionError(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's subscription not exist, group: {request.group}, topic: {request.topic}")
            if (subscription.sub_version or 0) < (request.sub_version or 0):
                raise SubscriptionError(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST,
                    f"the consumer's subscription not latest, group: {request.group}, topic: {request.topic}")
            expression_type = normalize_expression_type(subscription.expression_type)
            sub_string = subscription.sub_string
        if expression_type != EXPRESSION_TAG and not self.settings.enable_property_filter:
            raise SubscriptionError(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {expression_type} "
                "(set enablePropertyFilter=true in broker.conf)")
        message_filter = self.message_filter(expression_type, sub_string)
        if message_filter is None and is_retry_topic(request.topic):
            return self._retry_filter(request.group)
        return message_filter

    def reads_records(self, request: PullRequest) -> bool:
        """Does this pull's filter evaluate commit-log records (SQL92: milliseconds of CPU per pull)?"""
        try:
            message_filter = self.resolve_filter(request)
        except SubscriptionError:
            return False
        return message_filter is not None and message_filter.record_filter is not None

    def _retry_filter(self, group: str) -> MessageFilter:
        """`%RETRY%<group>`: each message is checked with the group's filter for its original topic."""

        def lookup(real_topic: str) -> MessageFilter | None:
            subscription = self.consumers.find_subscription(group, real_topic)
            if subscription is not None:
                expression_type, sub_string = subscription.expression_type, subscription.sub_string
            else:
                data = self.filters.get(real_topic, group)
                if data is None or data.is_dead:
                    return None
                expression_type, sub_string = data.expression_type, data.expression
            if normalize_expression_type(expression_type) != EXPRESSION_TAG \
                    and not self.settings.enable_property_filter:
                return None
            try:
                return self.message_filter(expression_type, sub_string)
            except SubscriptionError:
                return None  # a broken filter cannot have delivered the original: nothing to hold back

        return retry_filter(lookup)

    # ---- the pull ---------------------------------------------------------------------------------------------
    def pull(self, request: PullRequest, first: bool = True) -> Outcome[PullResult]:
        """One pull, answered now. ``first``: the request's first run (a held pull's re-run stores no offset)."""
        cfg = self.settings
        if not cfg.broker_permission & PERM_READ:
            return Outcome.refused(ResponseCode.NO_PERMISSION,
                                   f"the broker[{cfg.broker_ip1}] pulling message is forbidden", "broker")
        group = request.group
        problem = self.group_names.problem(group)
        if problem is not None:  # before find_or_create: a bad name must not become a persisted group
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, f"consumerGroup: {problem}", "group")
        group_config = self.groups.find_or_create(group)
        if group_config is None:
            return Outcome.refused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                   f"subscription group [{group}] does not exist", "group")
        if not group_config.consume_enable:
            return Outcome.refused(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}", "group")
        topic = request.topic
        topic_config = self.topics.get(topic)
        if topic_config is None:
            return Outcome.refused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!",
                                   "topic")
        if not topic_config.perm & PERM_READ:
            return Outcome.refused(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden",
                                   "topic")
        queue_id = request.queue_id
        if queue_id < 0 or queue_id >= topic_config.read_queue_nums:
            return Outcome.refused(
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{topic_config.read_queue_nums}] consumer:[{request.requester}]", "queue")
        try:
            message_filter = self.resolve_filter(request)
        except SubscriptionError as exc:
            return Outcome.refused(exc.code, exc.remark, "subscription")

        offset = request.queue_offset
        max_nums = request.max_nums if request.max_nums and request.max_nums > 0 else 32
        store = self.store
        if message_filter is None:
            found = store.get_messages(topic, queue_id, offset, max_nums)
        else:
            found = store.get_messages(topic, queue_id, offset, max_nums, tag_filter=message_filter.tag_filter,
                                       record_filter=message_filter.record_filter,
                                       max_scan=filter_scan_units(message_filter))
        status = getattr(found.status, "name", None) or str(found.status)
        codes = _STATUS_CODES.get(status, (ResponseCode.SYSTEM_ERROR, ResponseCode.SYSTEM_ERROR))
        code = codes[1] if offset == 0 else codes[0]
        # Commit the consumer's offset on the first run only (never on a long-poll re-run).
        if first and request.commit_offset is not None and cfg.is_master:
            self._commit_pulled_offset(request, found.max_offset)
        suggest = 0
        if code == ResponseCode.SUCCESS and cfg.slave_read_enable and cfg.is_master:
            suggest = self._suggest_broker(topic, queue_id, found, group_config)
        result = PullResult(status, found.next_begin_offset, found.min_offset, found.max_offset,
                            found.buffers if code == ResponseCode.SUCCESS else [],
                            found.message_count if code == ResponseCode.SUCCESS else 0, suggest,
                            topic_config.topic_sys_flag, group_config.group_sys_flag)
        return Outcome(int(code), status, result)

    def _suggest_broker(self, topic: str, queue_id: int, found: Any, group_config: Any) -> int:
        """slaveReadEnable on a master (replication.md §7.2): a consumer reading cold data (further behind the log's
        end than accessMessageInMemoryMaxRatio % of RAM) is sent to the group's whichBrokerWhenConsumeSlowly."""
        cq = self.store.get_consume_queue(topic, queue_id)
        unit = cq.get_unit(found.next_begin_offset - 1) if cq is not None else None
        if unit is None:
            return int(group_config.broker_id)
        behind = self.store.commit_log_max_offset - unit[0]
        if behind > _memory_bytes() * self.settings.access_message_in_memory_max_ratio / 100:
            return int(group_config.which_broker_when_consume_slowly)
        return int(group_config.broker_id)

    def _commit_pulled_offset(self, request: PullRequest, max_offset: int) -> None:
        """Store a pull's commitOffset when it can be a real position in the queue (0..maxOffset).

        -1 is what clients send when they have nothing to commit. Anything else outside the queue would make the
        group skip messages or re-read from a position that never existed, so it is not stored; the pull itself is
        still answered."""
        offset = request.commit_offset
        if offset is None or offset == -1:
            return
        if 0 <= offset <= max_offset:
            self.offsets.commit_offset(request.group, request.topic, request.queue_id, offset)
            return
        _ignored.warning("commitOffset", "pull from %s: commitOffset %d of %s@%s queue %d is outside "
                         "0..maxOffset %d; not stored", request.requester, offset, request.topic, request.group,
                         request.queue_id, max_offset)

    # ---- long polling -----------------------------------------------------------------------------------------
    def hold(self, request: PullRequest, on_wake: Callable[[str], None]) -> Waiter | None:
        """Hold a pull that found nothing (PULL_NOT_FOUND) until a matching message reaches its queue, its time
        runs out (the client's wish capped by maxPullSuspendTimeMillis; shortPollingTimeMills without long
        polling) or the broker stops: then ``on_wake(reason)`` runs once. None when the request does not wait."""
        if request.suspend_ms is None:
            return None
        cfg = self.settings
        if cfg.long_polling_enable:  # the client's wish, capped: nobody parks a request for days
            timeout_ms = min(request.suspend_ms or 0, cfg.max_pull_suspend_time_millis)
        else:
            timeout_ms = cfg.short_polling_time_mills
        try:
            message_filter = self.resolve_filter(request)
        except SubscriptionError:
            message_filter = None
        return self.arrivals.hold([(request.topic, request.queue_id)], max(timeout_ms, 0) / 1000.0, on_wake,
                                  self._arrival_matches(request, message_filter))

    def _arrival_matches(self, request: PullRequest,
                         message_filter: MessageFilter | None) -> Callable[[int, Any], bool]:
        """Should messages up to ``max_offset`` with these tags codes wake the held pull? Past its offset, and for a
        tag filter one of the tags; for an SQL filter one of the records that just arrived must match, at most the
        filtered pull's own scan budget evaluated per arrival (past it, the pull is woken and its answer scans a
        bounded range), so a burst of arrivals never costs a held pull more than one pull's worth of evaluation."""
        held_offset = request.queue_offset
        tag_filter = message_filter.tag_filter if message_filter is not None else None
        record_filter = message_filter.record_filter if message_filter is not None else None
        store, topic, queue_id = self.store, request.topic, request.queue_id
        budget = filter_scan_units(message_filter) if message_filter is not None else 0

        def matches(max_offset: int, tags: Any) -> bool:
            if max_offset <= held_offset:
                return False
            if tag_filter is not None and tags is not None:
                if isinstance(tags, int):
                    if not tag_filter(tags):
                        return False
                elif not any(tag_filter(code) for code in tags):
                    return False
            if record_filter is None:
                return True
            count = 1 if tags is None or isinstance(tags, int) else len(tags)
            start = max(held_offset, max_offset - count)
            if start >= max_offset:
                return False
            examine = min(max_offset - start, budget)
            found = store.get_messages(topic, queue_id, start, examine, tag_filter=tag_filter,
                                       record_filter=record_filter, max_scan=examine)
            return found.message_count > 0 or examine < max_offset - start

        return matches

    def not_found_now(self, request: PullRequest) -> Outcome[PullResult]:
        """Shutdown answer of a held pull: PULL_NOT_FOUND at the same offset (the client simply pulls again)."""
        try:
            min_offset = self.store.get_min_offset(request.topic, request.queue_id)
            max_offset = self.store.get_max_offset(request.topic, request.queue_id)
        except Exception:
            min_offset = max_offset = request.queue_offset
        return Outcome(int(ResponseCode.PULL_NOT_FOUND), "OFFSET_OVERFLOW_ONE",
                       PullResult("OFFSET_OVERFLOW_ONE", request.queue_offset, min_offset, max_offset))
