"""QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15) — reference §4.5 — and INVOKE_BROKER_TO_RESET_OFFSET (222).

An update is checked before it is stored: a legal group name, a queue the topic has, and an offset that can be
a position in that queue (0..maxOffset, maxOffset meaning "everything consumed"). Java clients send updates
one-way, so a refusal is also logged (rate-limited): nobody else would ever see it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from broker.log_limit import RateLimitedLog
from protocol.admin_bodies import ResetOffsetBody
from protocol.bodies import MessageQueue
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.requests import read_request
from broker.managers.consumer_manager import ConsumerManager
from broker.processors.base import GroupChecks

if TYPE_CHECKING:
    from broker.managers.consumer_offset import ConsumerOffsetManager
    from broker.managers.subscription_group import SubscriptionGroupManager
    from broker.managers.topic_config import TopicConfigManager
    from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)
_refusals = RateLimitedLog(log)


class ConsumerOffsetProcessor(GroupChecks):
    """Committed offsets: read, checked and stored; a reset also tells the group's online consumers."""

    def __init__(self, store: "MessageStore", topics: "TopicConfigManager", groups: "SubscriptionGroupManager",
                 consumers: ConsumerManager, offsets: "ConsumerOffsetManager", broker_name: str) -> None:
        super().__init__()
        self.store = store
        self.topics = topics
        self.groups = groups
        self.consumers = consumers
        self.offsets = offsets
        self.broker_name = broker_name

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
        }

    def _first_message_in_store(self, topic: str, queue_id: int) -> bool:
        """The young-queue rule: min offset 0 and message 0 still present in the commit log."""
        store = self.store
        if store.get_min_offset(topic, queue_id) > 0 or store.get_max_offset(topic, queue_id) <= 0:
            return False
        try:
            return store.get_message_store_time(topic, queue_id, 0) > 0
        except Exception:
            return False

    def query_consumer_offset(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        problem = self.group_problem(header.consumer_group)
        if problem is not None:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"consumerGroup: {problem}")
        offset = self.offsets.query_offset(header.consumer_group, header.topic, header.queue_id)
        if offset >= 0:
            return cmd.make_response(ResponseCode.SUCCESS, None, {"offset": str(offset)})
        if header.set_zero_if_not_found is not False and self._first_message_in_store(header.topic, header.queue_id):
            return cmd.make_response(ResponseCode.SUCCESS, None, {"offset": "0"})
        return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    def update_consumer_offset(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        group, topic, queue_id, offset = header.consumer_group, header.topic, header.queue_id, header.commit_offset
        problem = self.group_problem(group)
        if problem is not None:
            return self._refuse(channel, cmd, ResponseCode.INVALID_PARAMETER, f"consumerGroup: {problem}")
        if self.groups.find_or_create(group) is None:
            return self._refuse(channel, cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group not exist, {group}")
        topic_config = self.topics.get(topic)
        if topic_config is None:
            return self._refuse(channel, cmd, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        if not 0 <= queue_id < topic_config.read_queue_nums:
            return self._refuse(channel, cmd, ResponseCode.INVALID_PARAMETER,
                                f"queueId[{queue_id}] is illegal, topic[{topic}] has "
                                f"{topic_config.read_queue_nums} read queues")
        if offset < 0:
            return self._refuse(channel, cmd, ResponseCode.INVALID_PARAMETER,
                                f"commitOffset[{offset}] is illegal: an offset is never negative "
                                f"(topic[{topic}] queueId[{queue_id}] group[{group}])")
        max_offset = self.store.get_max_offset(topic, queue_id)
        if offset > max_offset:
            return self._refuse(channel, cmd, ResponseCode.INVALID_PARAMETER,
                                f"commitOffset[{offset}] is illegal: beyond the queue's maxOffset {max_offset} "
                                f"(topic[{topic}] queueId[{queue_id}] group[{group}])")
        self.offsets.commit_offset(group, topic, queue_id, offset, getattr(channel, "remote_addr", None))
        return cmd.make_response(ResponseCode.SUCCESS)

    def _refuse(self, channel: Any, cmd: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        _refusals.warning(("update-offset", code), "consumer offset update from %s refused (code %d): %s",
                          getattr(channel, "remote_addr", "?"), code, remark)
        return cmd.make_response(code, remark)

    async def reset_offset(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        """Move a group's offsets on a topic to the first message stored at or after `timestamp` (-1: the end).

        As the reference broker: per queue the new offset is taken when `isForce` or when it is behind the committed
        one, and every online consumer of the group is sent RESET_CONSUMER_CLIENT_OFFSET with the table (it drops
        the queues and resumes there). Unlike it, the committed offsets are also written here (persisted before the
        answer), so a group with nobody online is reset too instead of being refused with CONSUMER_NOT_ONLINE.
        The answer carries the table (ResetOffsetBody) and ``online`` = how many consumers were told."""
        header = read_request(cmd)
        group, topic = header.group, header.topic
        problem = self.group_problem(group)
        if problem is not None:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"group: {problem}")
        config = self.topics.get(topic)
        if config is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self.store
        broker_name = self.broker_name
        table: dict[MessageQueue, int] = {}
        offsets: dict[int, int] = {}
        for queue_id in range(config.read_queue_nums):
            if header.timestamp == -1:
                target = store.get_max_offset(topic, queue_id)
            else:
                target = max(0, store.get_offset_by_time(topic, queue_id, header.timestamp))
            committed = self.offsets.query_offset(group, topic, queue_id)
            offset = target if header.is_force or committed < 0 or target < committed else committed
            table[MessageQueue(topic, broker_name, queue_id)] = offset
            offsets[queue_id] = offset
        self.offsets.reset_offset(group, topic, offsets)
        try:
            await self.offsets.persist_async()
        except OSError as exc:
            log.error("offsets of %s on %s reset, but persisting them failed: %s", group, topic, exc)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"offsets reset, not persisted: {exc}")
        body = ResetOffsetBody(table).encode()
        told = 0
        info = self.consumers.get_group(group)
        if info is not None:
            for client_channel in info.channels():
                notice = RemotingCommand.request(
                    RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                    {"topic": topic, "group": group, "timestamp": str(header.timestamp),
                     "isForce": "true" if header.is_force else "false"}, body, opaque=0)
                if client_channel.send_oneway(notice):
                    told += 1
        log.info("offsets of group %s on topic %s reset to %s by %s (timestamp %d, %d consumer(s) told)", group,
                 topic, offsets, getattr(channel, "remote_addr", "?"), header.timestamp, told)
        return cmd.make_response(ResponseCode.SUCCESS, None, {"online": str(told)}, body)
