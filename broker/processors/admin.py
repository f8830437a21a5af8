"""Admin requests (mqadmin and Java admin tools), answered in the reference broker's body formats.

UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21),
GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS (208), GET_CONSUMER_CONNECTION_LIST (203),
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201),
DELETE_SUBSCRIPTIONGROUP (207), GET_BROKER_RUNTIME_INFO (28), GET_ALL_CONSUMER_OFFSET (43),
GET_BROKER_CONFIG (26).

None of these is on a hot path; they read manager and store state directly on the loop thread.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from broker.managers.topic_config import PERM_INHERIT, PERM_READ, PERM_WRITE, validate_topic
from broker.managers.topic_message_type import AttributeError_, attributes_after
from protocol.admin_bodies import (
    ConsumeStats,
    Connection,
    ConsumerConnection,
    KVTable,
    ProducerConnection,
    ProducerTableInfo,
    OffsetWrapper,
    TopicOffset,
    TopicStatsTable,
)
from protocol.bodies import MessageQueue
from protocol.config_bodies import SubscriptionGroupConfig, TopicConfig
from protocol.codes import PERM_PRIORITY, RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.jsonlenient import dumps_compact
from protocol.requests import read_request
from broker.managers.consumer_manager import ConsumerManager, group_topics
from broker.processors.base import GroupChecks

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.managers.consumer_offset import ConsumerOffsetManager
    from broker.managers.subscription_group import SubscriptionGroupManager
    from broker.managers.topic_config import TopicConfigManager
    from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

MAX_QUEUE_NUMS = 1024
_ALL_PERMS = PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT


class BrokerState(Protocol):
    """What admin answers read of the broker as a whole (broker/view.py's BrokerView)."""

    def runtime_info(self) -> dict[str, Any]: ...

    def consume_tps(self, group: str) -> float: ...


_INT32_MAX = 2**31 - 1
_INT64 = (-(2**63), 2**63 - 1)


def _subscription_group_range_problem(config: SubscriptionGroupConfig) -> str | None:
    """The reason a group config's numbers are unusable (Java int/long fields; retry queues become a topic)."""
    if not 0 <= config.retry_queue_nums <= MAX_QUEUE_NUMS:
        return f"retryQueueNums must be between 0 and {MAX_QUEUE_NUMS}, got {config.retry_queue_nums}"
    if not -1 <= config.retry_max_times <= _INT32_MAX:
        return f"retryMaxTimes must be between -1 and {_INT32_MAX}, got {config.retry_max_times}"
    for name, value in (("groupSysFlag", config.group_sys_flag), ("consumeTimeoutMinute", config.consume_timeout_minute)):
        if not -_INT32_MAX - 1 <= value <= _INT32_MAX:
            return f"{name} does not fit a Java int, got {value}"
    for name, value in (("brokerId", config.broker_id),
                        ("whichBrokerWhenConsumeSlowly", config.which_broker_when_consume_slowly)):
        if not _INT64[0] <= value <= _INT64[1]:
            return f"{name} does not fit a Java long, got {value}"
    return None


class AdminProcessor(GroupChecks):
    """Topics, groups and offsets are changed here; broker-wide figures come from the read-only `state`."""

    def __init__(self, config: "BrokerConfig", store: "MessageStore", topics: "TopicConfigManager",
                 groups: "SubscriptionGroupManager", consumers: ConsumerManager, offsets: "ConsumerOffsetManager",
                 state: BrokerState, producers: Any = None) -> None:
        super().__init__()
        self.config = config
        self.producers = producers  # ProducerManager: the producer connection requests
        self.store = store
        self.topics = topics
        self.groups = groups
        self.consumers = consumers
        self.offsets = offsets
        self.state = state

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group_config,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
            RequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list,
            RequestCode.GET_ALL_PRODUCER_INFO: self.get_all_producer_info,
        }

    # ---- topics ---------------------------------------------------------------------------------
    def update_and_create_topic(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        topic = header.topic
        problem = validate_topic(topic)
        if problem is not None:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, problem)
        if topic == self.config.broker_cluster_name or topic == self.config.broker_name:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER,
                                     f"The topic[{topic}] is conflict with system topic.")
        for name, value in (("readQueueNums", header.read_queue_nums), ("writeQueueNums", header.write_queue_nums)):
            if not 0 < value <= MAX_QUEUE_NUMS:
                return cmd.make_response(ResponseCode.INVALID_PARAMETER,
                                         f"{name} must be between 1 and {MAX_QUEUE_NUMS}, got {value}")
        if header.perm & ~_ALL_PERMS or header.perm < 0:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"perm must be within 0..15, got {header.perm}")
        filter_type = (header.topic_filter_type or "SINGLE_TAG").upper()
        old = self.topics.get(topic)
        try:  # the attribute changes ("+message.type=FIFO"), applied to the topic's current attributes
            attributes = attributes_after(old, header.attributes, allow_mixed=self.config.enable_mixed_message_type)
        except AttributeError_ as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        new = TopicConfig(topic, header.read_queue_nums, header.write_queue_nums, header.perm,
                          filter_type if filter_type in ("SINGLE_TAG", "MULTI_TAG") else "SINGLE_TAG",
                          header.topic_sys_flag or 0, bool(header.order), attributes)
        self.topics.update_topic(new)
        log.info("topic %s %s by %s: read=%d write=%d perm=%d", topic, "updated" if old else "created",
                 getattr(channel, "remote_addr", "?"), new.read_queue_nums, new.write_queue_nums, new.perm)
        return cmd.make_response(ResponseCode.SUCCESS)

    async def delete_topic(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        """Delete the topic's config, queues and consumer offsets, all persisted before the answer: a crash right
        after the acknowledgement must neither bring the old messages back nor leave a committed offset that
        would make a consumer skip the messages of a re-created topic."""
        header = read_request(cmd)
        topic = header.topic
        problem = validate_topic(topic)
        if problem is not None:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, problem)
        if self.topics.is_system_topic(topic):
            return cmd.make_response(ResponseCode.INVALID_PARAMETER,
                                     f"The topic[{topic}] is conflict with system topic.")
        try:
            self.store.delete_topic(topic)  # persists the store's tombstone first
        except OSError as exc:
            log.error("deleting topic %s failed: %s", topic, exc)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"cannot delete topic {topic}: {exc}")
        existed = self.topics.delete_topic(topic)
        self.offsets.remove_topic(topic)
        try:
            self.topics.persist()
            await self.offsets.persist_async()
        except OSError as exc:
            log.error("topic %s deleted, but persisting the change failed: %s", topic, exc)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"topic {topic} deleted, not persisted: {exc}")
        if existed:
            log.info("topic %s deleted by %s", topic, getattr(channel, "remote_addr", "?"))
        return cmd.make_response(ResponseCode.SUCCESS)

    def get_all_topic_config(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=dumps_compact(self.topics.encode()))

    def get_topic_stats_info(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        topic = header.topic
        config = self.topics.get(topic)
        if config is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self.store
        table = TopicStatsTable()
        broker_name = self.config.broker_name
        for queue_id in range(max(config.write_queue_nums, config.read_queue_nums)):
            max_offset = store.get_max_offset(topic, queue_id)
            last = store.get_message_store_time(topic, queue_id, max_offset - 1) if max_offset > 0 else 0
            table.offset_table[MessageQueue(topic, broker_name, queue_id)] = TopicOffset(
                store.get_min_offset(topic, queue_id), max_offset, max(last, 0))
        return cmd.make_response(ResponseCode.SUCCESS, body=table.encode())

    # ---- consumer groups ------------------------------------------------------------------------
    def _group_topics(self, group: str) -> set[str]:
        return group_topics(self.offsets, self.consumers, group)

    def get_consume_stats(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        group = header.consumer_group
        topics = [header.topic] if header.topic else sorted(self._group_topics(group))
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
        return cmd.make_response(ResponseCode.SUCCESS, body=stats.encode())

    def get_consumer_connection_list(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        group = header.consumer_group
        info = self.consumers.get_group(group)
        if info is None or not info.clients:
            return cmd.make_response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = ConsumerConnection(
            connection_set=[Connection(c.client_id, getattr(c.channel, "remote_addr", ""), str(c.language), c.version)
                            for c in info.clients.values()],
            subscription_table=dict(info.subscriptions),
            consume_type=info.consume_type,
            message_model=info.message_model,
            consume_from_where=info.consume_from_where,
        )
        return cmd.make_response(ResponseCode.SUCCESS, body=body.encode())

    def get_producer_connection_list(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        group = read_request(cmd).producer_group
        clients = self.producers.groups.get(group)
        if not clients:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = ProducerConnection([Connection(c.client_id, getattr(c.channel, "remote_addr", ""), str(c.language),
                                              c.version) for c in clients.values()])
        return cmd.make_response(ResponseCode.SUCCESS, body=body.encode())

    def get_all_producer_info(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        table = {group: [{"clientId": c.client_id, "remoteIP": getattr(c.channel, "remote_addr", ""),
                          "language": str(c.language), "version": c.version, "lastUpdateTimestamp": c.last_update}
                         for c in clients.values()]
                 for group, clients in self.producers.groups.items()}
        return cmd.make_response(ResponseCode.SUCCESS, body=ProducerTableInfo(table).encode())

    async def update_and_create_subscription_group(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        """Create or replace a group; subscriptionGroup.json is written before the answer, so an acknowledged
        change survives a kill -9 that follows it."""
        try:
            config = SubscriptionGroupConfig.decode(cmd.body) if cmd.body else None
        except ValueError as exc:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"malformed SubscriptionGroupConfig: {exc}")
        if config is None or not config.group_name:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, "SubscriptionGroupConfig body needs 'groupName'")
        problem = self.consumer_group_problem(config.group_name)
        if problem is not None:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"groupName: {problem}")
        problem = _subscription_group_range_problem(config)
        if problem is not None:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, problem)
        existed = self.groups.find(config.group_name) is not None
        self.groups.update(config)
        failed = await self._persist_before_answer(cmd, f"subscription group {config.group_name}", self.groups)
        if failed is not None:
            return failed
        log.info("subscription group %s %s by %s (retryQueueNums=%d retryMaxTimes=%d consumeEnable=%s)",
                 config.group_name, "updated" if existed else "created", getattr(channel, "remote_addr", "?"),
                 config.retry_queue_nums, config.retry_max_times, config.consume_enable)
        return cmd.make_response(ResponseCode.SUCCESS)

    def get_all_subscription_group_config(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=dumps_compact(self.groups.encode()))

    async def delete_subscription_group(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        """Delete a group (and its offsets with cleanOffset), persisted before the answer."""
        header = read_request(cmd)
        self.groups.delete(header.group_name)
        tables: list[Any] = [self.groups]
        if header.clean_offset:
            self.offsets.remove_group(header.group_name)
            tables.append(self.offsets)
        failed = await self._persist_before_answer(cmd, f"subscription group {header.group_name}", *tables)
        return failed or cmd.make_response(ResponseCode.SUCCESS)

    @staticmethod
    async def _persist_before_answer(cmd: RemotingCommand, what: str, *tables: Any) -> RemotingCommand | None:
        """Write each changed table (in a worker thread); an error response if that failed, else None."""
        try:
            for table in tables:
                await table.persist_async()
        except OSError as exc:
            log.error("%s changed, but persisting the change failed: %s", what, exc)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{what} changed, not persisted: {exc}")
        return None

    def get_all_consumer_offset(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=dumps_compact(self.offsets.encode()))

    # ---- broker ---------------------------------------------------------------------------------
    def get_broker_config(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        props = self.config.to_properties()
        body = "".join(f"{k}={v}\n" for k, v in sorted(props.items())).encode("utf-8")
        return cmd.make_response(ResponseCode.SUCCESS, body=body)

    def get_broker_runtime_info(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=KVTable.of(self.state.runtime_info().items()).encode())
