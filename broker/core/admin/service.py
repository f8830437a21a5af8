"""AdminService: the typed admin requests executed on the broker's registries and store, one Outcome each.

The checks (legal names, queue counts, permission bits, attribute changes, Java-sized group numbers) and the
persistence before the answer (a change acknowledged survives a kill -9 that follows it) live here once; the
remoting processor (broker/processors/admin.py) and the web console only translate to and from it. None of these
is on a hot path: they read registry and store state on the loop thread; tables are written in a worker thread."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from broker.core.admin.requests import (AllProducersRequest, BrokerConfigRequest, ConsumeStatsRequest,
                                        ConsumerConnectionRequest, ConsumerOffsetsRequest,
                                        DeleteSubscriptionGroupRequest, DeleteTopicRequest,
                                        ProducerConnectionRequest, ResendDeadLetterRequest, RuntimeInfoRequest,
                                        SubscriptionGroupsRequest, TopicConfigsRequest, TopicStatsRequest,
                                        UpdateSubscriptionGroupRequest, UpdateTopicRequest)
from broker.core.send_back import REASON_ALREADY_RESENT, ResendRequest, resend_fields
from broker.core.consume import GroupNames
from broker.core.outcome import Outcome, Requester
from broker.managers.consumer_manager import group_topics
from broker.managers.topic_config import PERM_INHERIT, PERM_READ, PERM_WRITE, validate_topic
from broker.managers.topic_message_type import AttributeError_, attributes_after
from protocol.admin_bodies import (ConsumeStats, Connection, ConsumerConnection, OffsetWrapper, ProducerConnection,
                                   ProducerTableInfo, TopicOffset, TopicStatsTable)
from protocol.bodies import MessageQueue
from protocol.codes import PERM_PRIORITY, ResponseCode
from protocol.config_bodies import SubscriptionGroupConfig, TopicConfig

__all__ = ["AdminService", "BrokerState", "MAX_QUEUE_NUMS"]

log = logging.getLogger(__name__)

MAX_QUEUE_NUMS = 1024
_ALL_PERMS = PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT
_INT32_MAX = 2**31 - 1
_INT64 = (-(2**63), 2**63 - 1)


class BrokerState(Protocol):
    """What admin answers read of the broker as a whole (broker/view.py's BrokerView)."""

    def runtime_info(self) -> dict[str, Any]: ...

    def consume_tps(self, group: str) -> float: ...


def subscription_group_range_problem(config: SubscriptionGroupConfig) -> str | None:
    """The reason a group config's numbers are unusable (Java int/long fields; retry queues become a topic)."""
    if not 0 <= config.retry_queue_nums <= MAX_QUEUE_NUMS:
        return f"retryQueueNums must be between 0 and {MAX_QUEUE_NUMS}, got {config.retry_queue_nums}"
    if not -1 <= config.retry_max_times <= _INT32_MAX:
        return f"retryMaxTimes must be between -1 and {_INT32_MAX}, got {config.retry_max_times}"
    for name, value in (("groupSysFlag", config.group_sys_flag),
                        ("consumeTimeoutMinute", config.consume_timeout_minute)):
        if not -_INT32_MAX - 1 <= value <= _INT32_MAX:
            return f"{name} does not fit a Java int, got {value}"
    for name, value in (("brokerId", config.broker_id),
                        ("whichBrokerWhenConsumeSlowly", config.which_broker_when_consume_slowly)):
        if not _INT64[0] <= value <= _INT64[1]:
            return f"{name} does not fit a Java long, got {value}"
    return None


class AdminService:
    """``config`` (BrokerConfig, read live), ``store`` (the message store: its read API and topic deletion),
    ``topics`` / ``groups`` (the topic and subscription-group registries), ``consumers`` and ``producers`` (who is
    connected), ``offsets`` (the committed offsets), ``state`` (the broker-wide figures, read-only), ``resender`` (the
    send-back core, broker/core/send_back.py: a dead letter is put back as a send is stored, with its in-sync, flush
    and replication waits, and audited)."""

    def __init__(self, config: Any, store: Any, topics: Any, groups: Any, consumers: Any, offsets: Any,
                 state: BrokerState, producers: Any = None, resender: Any = None,
                 group_names: GroupNames | None = None) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.consumers = consumers
        self.offsets = offsets
        self.state = state
        self.producers = producers
        self.group_names = group_names or GroupNames()
        self.resender = resender

    # ---- topics ---------------------------------------------------------------------------------
    def update_topic(self, request: UpdateTopicRequest) -> Outcome[TopicConfig]:
        """Create or replace the topic (the registry persists it); its new config on success."""
        topic = request.topic
        problem = validate_topic(topic)
        if problem is not None:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, problem, "topic")
        if topic == self.config.broker_cluster_name or topic == self.config.broker_name:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER,
                                   f"The topic[{topic}] is conflict with system topic.", "topic")
        for name, value in (("readQueueNums", request.read_queue_nums), ("writeQueueNums", request.write_queue_nums)):
            if not 0 < value <= MAX_QUEUE_NUMS:
                return Outcome.refused(ResponseCode.INVALID_PARAMETER,
                                       f"{name} must be between 1 and {MAX_QUEUE_NUMS}, got {value}")
        if request.perm & ~_ALL_PERMS or request.perm < 0:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, f"perm must be within 0..15, got {request.perm}")
        filter_type = (request.topic_filter_type or "SINGLE_TAG").upper()
        old = self.topics.get(topic)
        try:  # the attribute changes ("+message.type=FIFO"), applied to the topic's current attributes
            attributes = attributes_after(old, request.attributes, allow_mixed=self.config.enable_mixed_message_type)
        except AttributeError_ as exc:
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, str(exc), "attributes")
        new = TopicConfig(topic, request.read_queue_nums, request.write_queue_nums, request.perm,
                          filter_type if filter_type in ("SINGLE_TAG", "MULTI_TAG") else "SINGLE_TAG",
                          request.topic_sys_flag or 0, bool(request.order), attributes)
        self.topics.update_topic(new)
        log.info("topic %s %s by %s: read=%d write=%d perm=%d", topic, "updated" if old else "created",
                 _addr(request.requester), new.read_queue_nums, new.write_queue_nums, new.perm)
        return Outcome.success(new)

    async def delete_topic(self, request: DeleteTopicRequest) -> Outcome[bool]:
        """Delete the topic's config, queues and consumer offsets, all persisted before the answer: a crash right
        after the acknowledgement must neither bring the old messages back nor leave a committed offset that
        would make a consumer skip the messages of a re-created topic. Its value: whether the topic existed."""
        topic = request.topic
        problem = validate_topic(topic)
        if problem is not None:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, problem, "topic")
        if self.topics.is_system_topic(topic):
            return Outcome.refused(ResponseCode.INVALID_PARAMETER,
                                   f"The topic[{topic}] is conflict with system topic.", "topic")
        try:
            self.store.delete_topic(topic)  # persists the store's tombstone first
        except OSError as exc:
            log.error("deleting topic %s failed: %s", topic, exc)
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, f"cannot delete topic {topic}: {exc}")
        existed = self.topics.delete_topic(topic)
        self.offsets.remove_topic(topic)
        try:
            self.topics.persist()
            await self.offsets.persist_async()
        except OSError as exc:
            log.error("topic %s deleted, but persisting the change failed: %s", topic, exc)
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, f"topic {topic} deleted, not persisted: {exc}")
        if existed:
            log.info("topic %s deleted by %s", topic, _addr(request.requester))
        return Outcome.success(existed)

    def topic_configs(self, request: TopicConfigsRequest) -> Outcome[dict[str, Any]]:
        return Outcome.success(self.topics.encode())

    def topic_stats(self, request: TopicStatsRequest) -> Outcome[TopicStatsTable]:
        topic = request.topic
        config = self.topics.get(topic)
        if config is None:
            return Outcome.refused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist", "topic")
        store = self.store
        table = TopicStatsTable()
        broker_name = self.config.broker_name
        for queue_id in range(max(config.write_queue_nums, config.read_queue_nums)):
            max_offset = store.get_max_offset(topic, queue_id)
            last = store.get_message_store_time(topic, queue_id, max_offset - 1) if max_offset > 0 else 0
            table.offset_table[MessageQueue(topic, broker_name, queue_id)] = TopicOffset(
                store.get_min_offset(topic, queue_id), max_offset, max(last, 0))
        return Outcome.success(table)

    # ---- consumer groups ------------------------------------------------------------------------
    def consume_stats(self, request: ConsumeStatsRequest) -> Outcome[ConsumeStats]:
        group = request.group
        topics = [request.topic] if request.topic else sorted(group_topics(self.offsets, self.consumers, group))
        stats = ConsumeStats()
        store = self.store
        broker_name = self.config.broker_name
        for topic in topics:
            config = self.topics.get(topic)
            if config is None:
                continue
            for queue_id in range(config.read_queue_nums):
                broker_offset = store.get_max_offset(topic, queue_id)
                consumer_offset = max(0, self.offsets.query_offset(group, topic, queue_id))
                last = store.get_message_store_time(topic, queue_id, consumer_offset - 1) if consumer_offset > 0 else 0
                stats.offset_table[MessageQueue(topic, broker_name, queue_id)] = OffsetWrapper(
                    broker_offset, consumer_offset, max(last, 0))
        stats.consume_tps = self.state.consume_tps(group)
        return Outcome.success(stats)

    def consumer_connection(self, request: ConsumerConnectionRequest) -> Outcome[ConsumerConnection]:
        group = request.group
        info = self.consumers.get_group(group)
        if info is None or not info.clients:
            return Outcome.refused(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online",
                                   "group")
        return Outcome.success(ConsumerConnection(
            connection_set=[Connection(c.client_id, getattr(c.channel, "remote_addr", ""), str(c.language), c.version)
                            for c in info.clients.values()],
            subscription_table=dict(info.subscriptions),
            consume_type=info.consume_type,
            message_model=info.message_model,
            consume_from_where=info.consume_from_where,
        ))

    async def update_subscription_group(self, request: UpdateSubscriptionGroupRequest) -> Outcome[bool]:
        """Create or replace a group; subscriptionGroup.json is written before the answer, so an acknowledged
        change survives a kill -9 that follows it. Its value: whether the group existed."""
        config = request.config
        if not config.group_name:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, "SubscriptionGroupConfig body needs 'groupName'",
                                   "group")
        problem = self.group_names.problem(config.group_name)
        if problem is not None:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, f"groupName: {problem}", "group")
        problem = subscription_group_range_problem(config)
        if problem is not None:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, problem)
        existed = self.groups.find(config.group_name) is not None
        self.groups.update(config)
        refusal = await _persist_before_answer(f"subscription group {config.group_name}", self.groups)
        if refusal is not None:
            return refusal
        log.info("subscription group %s %s by %s (retryQueueNums=%d retryMaxTimes=%d consumeEnable=%s)",
                 config.group_name, "updated" if existed else "created", _addr(request.requester),
                 config.retry_queue_nums, config.retry_max_times, config.consume_enable)
        return Outcome.success(existed)

    async def delete_subscription_group(self, request: DeleteSubscriptionGroupRequest) -> Outcome[None]:
        """Delete a group (and its offsets with ``clean_offset``), persisted before the answer."""
        self.groups.delete(request.group)
        tables: list[Any] = [self.groups]
        if request.clean_offset:
            self.offsets.remove_group(request.group)
            tables.append(self.offsets)
        refusal = await _persist_before_answer(f"subscription group {request.group}", *tables)
        return refusal or Outcome.success()

    def subscription_groups(self, request: SubscriptionGroupsRequest) -> Outcome[dict[str, Any]]:
        return Outcome.success(self.groups.encode())

    def consumer_offsets(self, request: ConsumerOffsetsRequest) -> Outcome[dict[str, Any]]:
        return Outcome.success(self.offsets.encode())

    def resend_dead_letter(self, request: ResendDeadLetterRequest) -> Outcome[dict[str, str]] | Any:
        """The send-back core's resend (its refusal now, or an awaitable of the Outcome), its value as the remoting
        answer's fields: the copy's ``msgId``, ``topic``, ``queueId``, ``queueOffset`` (and ``uniqKey``); a letter
        resent before is refused (reason ``"resent"``) with ``resentAt``, ``resentBy`` and ``resentCount``."""
        if self.resender is None:
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, "this broker resends no dead letters")
        result = self.resender.resend(ResendRequest(
            request.group, request.offset, request.msg_id, request.topic, request.to_original_topic,
            request.queue_id, request.force, request.requester or Requester("127.0.0.1:0", "console")))
        if type(result) is Outcome:
            return _resend_fields(result)
        return _resend_fields_later(result)

    # ---- producers and the broker ---------------------------------------------------------------
    def producer_connection(self, request: ProducerConnectionRequest) -> Outcome[ProducerConnection]:
        clients = self.producers.groups.get(request.group)
        if not clients:
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, f"the producer group[{request.group}] not exist",
                                   "group")
        return Outcome.success(ProducerConnection([
            Connection(c.client_id, getattr(c.channel, "remote_addr", ""), str(c.language), c.version)
            for c in clients.values()]))

    def all_producers(self, request: AllProducersRequest) -> Outcome[ProducerTableInfo]:
        table = {group: [{"clientId": c.client_id, "remoteIP": getattr(c.channel, "remote_addr", ""),
                          "language": str(c.language), "version": c.version, "lastUpdateTimestamp": c.last_update}
                         for c in clients.values()]
                 for group, clients in self.producers.groups.items()}
        return Outcome.success(ProducerTableInfo(table))

    def broker_config(self, request: BrokerConfigRequest) -> Outcome[dict[str, Any]]:
        return Outcome.success(self.config.to_properties())

    def runtime_info(self, request: RuntimeInfoRequest) -> Outcome[dict[str, Any]]:
        return Outcome.success(self.state.runtime_info())


def _addr(requester: Requester | None) -> str:
    """Who asked, as the log lines of a change name it (the peer's address)."""
    return requester.remote_addr if requester is not None else "?"


async def _persist_before_answer(what: str, *tables: Any) -> Outcome | None:
    """Write each changed table (in a worker thread); a refusal if that failed, else None."""
    try:
        for table in tables:
            await table.persist_async()
    except OSError as exc:
        log.error("%s changed, but persisting the change failed: %s", what, exc)
        return Outcome.refused(ResponseCode.SYSTEM_ERROR, f"{what} changed, not persisted: {exc}")
    return None




def _resend_fields(outcome: Outcome) -> Outcome[dict[str, str]]:
    reason = "resent" if outcome.reason == REASON_ALREADY_RESENT else outcome.reason
    return Outcome(outcome.code, outcome.remark, resend_fields(outcome), reason)


async def _resend_fields_later(pending: Any) -> Outcome[dict[str, str]]:
    return _resend_fields(await pending)
