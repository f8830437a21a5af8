"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361) — reference §4.4, with long polling (§4.4.4).

Pulls are synchronous (the store reads mapped files on the loop thread). A pull that finds
nothing and may be suspended is handed to the PullRequestHoldService and answered later with
the original opaque.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
from broker.long_polling import WAKE_SHUTDOWN, HeldPull, PullRequestHoldService
from protocol.codes import (
    PERM_READ,
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    RequestCode,
    ResponseCode,
)
from protocol.command import RemotingCommand
from protocol.headers import PullMessageRequestHeader
from protocol.requests import read_request
from broker.processors.base import BrokerProcessor

if TYPE_CHECKING:
    from broker.broker import Broker

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


def _filter_scan_units(message_filter: MessageFilter) -> int:
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

# h30c (issue 30) metrics hook: told once per executed pull (not per message, not when held):
# (channel, request, header, response, seconds taken).
PullObserver = Callable[[Any, RemotingCommand, PullMessageRequestHeader, RemotingCommand, float], None]


class PullProcessor(BrokerProcessor):
    """Answers pulls; owns the long-polling service."""

    def __init__(self, broker: "Broker", observer: PullObserver | None = None) -> None:
        super().__init__(broker)
        self.observer = observer  # h30c: metrics hook, called by process()
        self.hold_service = PullRequestHoldService(self._wake)
        self.filters = broker.consumer_filter_manager
        self._filter_cache: dict[tuple[str, str], MessageFilter | SubscriptionError | None] = {}
        # Record-filtered (SQL92) pulls waiting for their turn; see _defer.
        self._deferred: deque[tuple[Any, RemotingCommand, PullMessageRequestHeader]] = deque()
        self._drain_scheduled = False

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.PULL_MESSAGE: self.pull_message,
            RequestCode.LITE_PULL_MESSAGE: self.pull_message,
        }

    # ---- filters ------------------------------------------------------------------------------
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

    def _resolve_filter(self, header: PullMessageRequestHeader) -> MessageFilter | None:
        """Find the subscription (request flag or heartbeat registration) and build its filter."""
        if header.sys_flag & PULL_FLAG_SUBSCRIPTION:
            expression_type = normalize_expression_type(header.expression_type)
            sub_string = header.subscription
        else:
            group_info = self.consumers.get_group(header.consumer_group)
            if group_info is None:
                raise SubscriptionError(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's group info not exist, group: {header.consumer_group} (no heartbeat yet)")
            subscription = group_info.find_subscription(header.topic)
            if subscription is None:
                raise SubscriptionError(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's subscription not exist, group: {header.consumer_group}, topic: {header.topic}")
            if (subscription.sub_version or 0) < (header.sub_version or 0):
                raise SubscriptionError(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST,
                    f"the consumer's subscription not latest, group: {header.consumer_group}, "
                    f"topic: {header.topic}")
            expression_type = normalize_expression_type(subscription.expression_type)
            sub_string = subscription.sub_string
        if expression_type != EXPRESSION_TAG and not self.config.enable_property_filter:
            raise SubscriptionError(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {expression_type} "
                "(set enablePropertyFilter=true in broker.conf)")
        message_filter = self.message_filter(expression_type, sub_string)
        if message_filter is None and is_retry_topic(header.topic):
            return self._retry_filter(header.consumer_group)
        return message_filter

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
            if normalize_expression_type(expression_type) != EXPRESSION_TAG and not self.config.enable_property_filter:
                return None
            try:
                return self.message_filter(expression_type, sub_string)
            except SubscriptionError:
                return None  # a broken filter cannot have delivered the original: nothing to hold back

        return retry_filter(lookup)

    def _arrival_check(self, topic: str, queue_id: int, message_filter: MessageFilter):
        """For held SQL pulls: does any of the `count` messages that just arrived match?

        At most the filtered pull's own scan budget is evaluated per arrival; when more arrived than that, the
        pull is woken without looking further (its answer scans a bounded range and says where to go on), so a
        burst of arrivals never costs a held pull more than one pull's worth of evaluation."""
        store = self.store
        budget = _filter_scan_units(message_filter)

        def check(held: HeldPull, max_offset: int, count: int) -> bool:
            start = max(held.queue_offset, max_offset - count)
            if start >= max_offset:
                return False
            examine = min(max_offset - start, budget)
            found = store.get_messages(topic, queue_id, start, examine,
                                       tag_filter=message_filter.tag_filter,
                                       record_filter=message_filter.record_filter, max_scan=examine)
            return found.message_count > 0 or examine < max_offset - start

        return check

    # ---- request handling ----------------------------------------------------------------------
    def pull_message(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        header = read_request(cmd)
        try:
            message_filter = self._resolve_filter(header)
        except SubscriptionError:
            message_filter = None  # process() answers with the error
        if message_filter is not None and message_filter.record_filter is not None \
                and self._defer(channel, cmd, header):
            return None
        return self.process(channel, cmd, header, allow_suspend=True)

    # ---- record-filtered pulls: one per loop turn --------------------------------------------------
    def _defer(self, channel: Any, cmd: RemotingCommand, header: PullMessageRequestHeader) -> bool:
        """Queue a pull whose filter reads commit-log records (SQL92); False when there is no running loop.

        Such a pull costs milliseconds of CPU (every examined record's properties are evaluated). The server
        answers all requests that arrived in one read before flushing, so a burst of them answered inline would
        hold every response (and every other request) back until the whole burst is evaluated, and the client
        would sit idle meanwhile. Taking them one per loop turn flushes each answer as soon as it is ready, lets
        other requests in between, and keeps the consumer busy decoding while the broker evaluates the next one.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._deferred.append((channel, cmd, header))
        if not self._drain_scheduled:
            self._drain_scheduled = True
            loop.call_soon(self._drain_one, loop)
        return True

    def _drain_one(self, loop: asyncio.AbstractEventLoop) -> None:
        queue = self._deferred
        while queue:
            if self._answer_deferred(*queue.popleft(), allow_suspend=True):
                break  # one pull per turn; its flush is queued before our next turn
        if queue:
            loop.call_soon(self._drain_one, loop)
        else:
            self._drain_scheduled = False

    def _answer_deferred(self, channel: Any, cmd: RemotingCommand, header: PullMessageRequestHeader,
                         allow_suspend: bool) -> bool:
        """Run a deferred pull and send its answer; False (nothing done) when the client is gone."""
        if getattr(channel, "closed", False):
            return False
        try:
            response = self.process(channel, cmd, header, allow_suspend=allow_suspend)
        except Exception as exc:  # the request must still get an answer
            log.exception("a deferred pull failed")
            response = cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if response is not None:
            channel.send_response(response)
        return True

    def process(self, channel: Any, cmd: RemotingCommand, header: PullMessageRequestHeader,
                allow_suspend: bool) -> RemotingCommand | None:
        """One pull; returns None when the request was suspended (answered later). h30c: tells the observer."""
        observer = self.observer
        if observer is None:
            return self._process(channel, cmd, header, allow_suspend)
        started = time.perf_counter()
        response = self._process(channel, cmd, header, allow_suspend)
        if type(response) is RemotingCommand:
            observer(channel, cmd, header, response, time.perf_counter() - started)
        return response

    def _process(self, channel: Any, cmd: RemotingCommand, header: PullMessageRequestHeader,
                 allow_suspend: bool) -> RemotingCommand | None:
        cfg = self.config
        if not cfg.broker_permission & PERM_READ:
            return cmd.make_response(ResponseCode.NO_PERMISSION,
                                     f"the broker[{cfg.broker_ip1}] pulling message is forbidden",
                                     {"forbiddenType": "1"})
        group = header.consumer_group
        problem = self.consumer_group_problem(group)
        if problem is not None:  # before find_or_create: a bad name must not become a persisted group
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"consumerGroup: {problem}")
        group_config = self.groups.find_or_create(group)
        if group_config is None:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                     f"subscription group [{group}] does not exist")
        if not group_config.consume_enable:
            return cmd.make_response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}",
                                     {"forbiddenType": "2"})
        topic = header.topic
        topic_config = self.topics.get(topic)
        if topic_config is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                     f"topic[{topic}] not exist, apply first please!")
        if not topic_config.perm & PERM_READ:
            return cmd.make_response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden",
                                     {"forbiddenType": "3"})
        queue_id = header.queue_id
        if queue_id < 0 or queue_id >= topic_config.read_queue_nums:
            return cmd.make_response(
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{topic_config.read_queue_nums}] consumer:[{getattr(channel, 'remote_addr', '?')}]")
        try:
            message_filter = self._resolve_filter(header)
        except SubscriptionError as exc:
            return cmd.make_response(exc.code, exc.remark)

        offset = header.queue_offset
        max_nums = header.max_msg_nums if header.max_msg_nums and header.max_msg_nums > 0 else 32
        if message_filter is None:
            result = self.store.get_messages(topic, queue_id, offset, max_nums)
        else:
            result = self.store.get_messages(topic, queue_id, offset, max_nums,
                                             tag_filter=message_filter.tag_filter,
                                             record_filter=message_filter.record_filter,
                                             max_scan=_filter_scan_units(message_filter))
        status = getattr(result.status, "name", None) or str(result.status)
        codes = _STATUS_CODES.get(status, (ResponseCode.SYSTEM_ERROR, ResponseCode.SYSTEM_ERROR))
        code = codes[1] if offset == 0 else codes[0]

        # Commit the consumer's offset on the first processing only (never on a long-poll re-run).
        if allow_suspend and header.sys_flag & PULL_FLAG_COMMIT_OFFSET and cfg.is_master:
            self._commit_pulled_offset(channel, group, topic, queue_id, header.commit_offset, result.max_offset)

        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and header.sys_flag & PULL_FLAG_SUSPEND:
            if cfg.long_polling_enable:  # the client's wish, capped: nobody parks a request for days
                timeout_ms = min(header.suspend_timeout_millis or 0, cfg.max_pull_suspend_time_millis)
            else:
                timeout_ms = cfg.short_polling_time_mills
            if timeout_ms < 0:
                timeout_ms = 0
            held = HeldPull(channel, cmd, header, topic, queue_id, offset,
                            message_filter.tag_filter if message_filter is not None else None)
            if message_filter is not None and message_filter.record_filter is not None:
                held.record_check = self._arrival_check(topic, queue_id, message_filter)
            self.hold_service.suspend(held, timeout_ms / 1000.0)
            return None

        ext = {
            "suggestWhichBrokerId": self._suggest_broker(topic, queue_id, result, group_config)
            if cfg.slave_read_enable and cfg.is_master and code == ResponseCode.SUCCESS else "0",
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
            "topicSysFlag": str(topic_config.topic_sys_flag),
            "groupSysFlag": str(group_config.group_sys_flag),
        }
        body = b""
        if code == ResponseCode.SUCCESS:
            buffers = result.buffers
            body = buffers[0] if len(buffers) == 1 and type(buffers[0]) is bytes else b"".join(buffers)
        return cmd.make_response(code, status, ext, body)

    def _suggest_broker(self, topic: str, queue_id: int, result: Any, group_config: Any) -> str:
        """slaveReadEnable on a master (replication.md §7.2): a consumer reading cold data (further behind the log's
        end than accessMessageInMemoryMaxRatio % of RAM) is sent to the group's whichBrokerWhenConsumeSlowly."""
        cq = self.store.get_consume_queue(topic, queue_id)
        unit = cq.get_unit(result.next_begin_offset - 1) if cq is not None else None
        if unit is None:
            return str(group_config.broker_id)
        behind = self.store.commit_log_max_offset - unit[0]
        if behind > _memory_bytes() * self.config.access_message_in_memory_max_ratio / 100:
            return str(group_config.which_broker_when_consume_slowly)
        return str(group_config.broker_id)

    def _commit_pulled_offset(self, channel: Any, group: str, topic: str, queue_id: int, offset: int | None,
                              max_offset: int) -> None:
        """Store a pull's commitOffset when it can be a real position in the queue (0..maxOffset).

        -1 (or no value) is what clients send when they have nothing to commit. Anything else outside the
        queue would make the group skip messages or re-read from a position that never existed, so it is not
        stored; the pull itself is still answered."""
        if offset is None or offset == -1:
            return
        if 0 <= offset <= max_offset:
            self.offsets.commit_offset(group, topic, queue_id, offset)
            return
        _ignored.warning("commitOffset", "pull from %s: commitOffset %d of %s@%s queue %d is outside "
                         "0..maxOffset %d; not stored", getattr(channel, "remote_addr", "?"), offset, topic,
                         group, queue_id, max_offset)

    # ---- long polling ------------------------------------------------------------------------------
    def on_message_arrival(self, topic: str, queue_id: int, max_offset: int, tags_codes: Any = None) -> None:
        """Store arrival listener (wired by the broker)."""
        self.hold_service.on_message_arrival(topic, queue_id, max_offset, tags_codes)

    def _wake(self, held: HeldPull, reason: str) -> None:
        channel = held.channel
        if getattr(channel, "closed", False):
            return
        cmd = held.request
        if reason == WAKE_SHUTDOWN:
            response = self._not_found_now(held)
        else:
            try:
                response = self.process(channel, cmd, held.header, allow_suspend=False)
            except Exception as exc:  # the original request must still get an answer
                log.exception("re-executing a held pull failed")
                response = cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if response is not None:
            channel.send_response(response)

    def _not_found_now(self, held: HeldPull) -> RemotingCommand:
        """Shutdown answer: PULL_NOT_FOUND at the same offset (the client simply pulls again)."""
        try:
            min_offset = self.store.get_min_offset(held.topic, held.queue_id)
            max_offset = self.store.get_max_offset(held.topic, held.queue_id)
        except Exception:
            min_offset = max_offset = held.queue_offset
        return held.request.make_response(ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": str(held.queue_offset),
            "minOffset": str(min_offset),
            "maxOffset": str(max_offset),
        })

    def release_all(self) -> None:
        """Shutdown: answer the pulls still waiting for their turn (without holding them), then the held ones."""
        deferred = self._deferred
        while deferred:
            self._answer_deferred(*deferred.popleft(), allow_suspend=False)
        self.hold_service.release_all()
