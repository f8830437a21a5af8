"""HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38), CHECK_CLIENT_CONFIG (46).

Reference §4.1, §4.2, §4.6, §4.12, §4.13. NOTIFY_CONSUMER_IDS_CHANGED (40) is sent by the broker's
`notify_consumer_ids_changed`, which the ConsumerManager calls on membership/subscription changes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from broker.filter import (
    EXPRESSION_SQL92,
    EXPRESSION_TAG,
    SelectorError,
    UnsupportedExpressionType,
    build_filter,
    normalize_expression_type,
)
from broker.managers.consumer_filter import ConsumerFilterManager
from broker.managers.consumer_manager import CLUSTERING, ClientInfo, ConsumerManager
from broker.managers.producer_manager import ProducerManager
from protocol.bodies import ConsumerListBody, HeartbeatData
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import HeaderError
from protocol.requests import INLINE_BODY_MAX, read_request
from broker.processors.base import GroupChecks

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.managers.subscription_group import SubscriptionGroupManager
    from broker.managers.topic_config import TopicConfigManager

log = logging.getLogger(__name__)

SERIALIZE_TYPES_ANNOUNCEMENT = "JSON,ROCKETMQ,MSGPACK"
_WATCHED = "client_manage_watched"
# A heartbeat naming thousands of new groups creates a subscription group and a %RETRY% topic for each.
# Bodies above this size are decoded in a worker thread, and groups are registered this many at a time
# with the event loop free to serve other connections in between, so no heartbeat stalls the broker.
HEARTBEAT_INLINE_BODY_MAX = INLINE_BODY_MAX
HEARTBEAT_GROUPS_PER_TURN = 128


class ClientManageProcessor(GroupChecks):
    """Registers clients from their heartbeats; the consumer and producer tables forget a connection when it closes."""

    def __init__(self, config: "BrokerConfig", topics: "TopicConfigManager", groups: "SubscriptionGroupManager",
                 consumers: ConsumerManager, producers: ProducerManager, filters: ConsumerFilterManager) -> None:
        super().__init__()
        self.config = config
        self.topics = topics
        self.groups = groups
        self.consumers = consumers
        self.producers = producers
        self.filters = filters

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.HEART_BEAT: self.heart_beat,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.get_consumer_list_by_group,
            RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config,
        }

    def _watch_channel(self, channel: Any, cmd: RemotingCommand, data: HeartbeatData) -> None:
        """Forget a channel's registrations when it closes (registered once per channel); one INFO line when a
        client first heartbeats on a connection, one when that connection closes."""
        attrs = getattr(channel, "attrs", None)
        if attrs is None or attrs.get(_WATCHED):
            return
        attrs[_WATCHED] = True
        consumers, producers = self.consumers, self.producers
        client_id = data.client_id or "?"
        addr = getattr(channel, "remote_addr", "?")
        log.info("client connected: %s from %s (language %s, version %s; producer groups %s; consumer groups %s)",
                 client_id, addr, cmd.language, cmd.version,
                 sorted(p.group_name for p in data.producers if p.group_name) or "-",
                 sorted(c.group_name for c in data.consumers if c.group_name) or "-")

        def closed(ch: Any) -> None:
            consumers.on_channel_closed(ch)
            producers.on_channel_closed(ch)
            log.info("client disconnected: %s from %s", client_id, addr)

        channel.add_close_listener(closed)

    # ---- HEART_BEAT --------------------------------------------------------------------------------
    def heart_beat(self, channel: Any, cmd: RemotingCommand) -> Any:
        """Small heartbeats (every real client's) are answered synchronously; a large one continues
        as a coroutine that yields to the event loop between groups of consumer groups."""
        if cmd.header is None and cmd.body and len(cmd.body) > HEARTBEAT_INLINE_BODY_MAX:
            return self._large_heart_beat(channel, cmd)
        try:
            data = read_request(cmd)
        except HeaderError as exc:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, str(exc))
        problem = self._check_heartbeat(data)
        if problem is not None:  # refused whole: a Java client's Validators would never have let it out
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, problem)
        if len(data.consumers) > HEARTBEAT_GROUPS_PER_TURN:
            return self._apply_heart_beat_in_turns(channel, cmd, data)
        self._watch_channel(channel, cmd, data)
        language = self._language(cmd)
        sub_changed = self._register_consumers(channel, cmd, data, language, data.consumers)
        self._register_producers(channel, cmd, data, language)
        return self._heart_beat_response(cmd, sub_changed)

    async def _large_heart_beat(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        try:  # read off the event loop; the handler then uses the object read_request keeps on cmd
            data = await asyncio.to_thread(read_request, cmd)
        except HeaderError as exc:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, str(exc))
        problem = self._check_heartbeat(data)
        if problem is not None:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, problem)
        if getattr(channel, "closed", False):
            return None
        return await self._apply_heart_beat_in_turns(channel, cmd, data)

    async def _apply_heart_beat_in_turns(self, channel: Any, cmd: RemotingCommand,
                                         data: HeartbeatData) -> RemotingCommand | None:
        self._watch_channel(channel, cmd, data)
        language = self._language(cmd)
        sub_changed = False
        consumers = data.consumers
        for start in range(0, len(consumers), HEARTBEAT_GROUPS_PER_TURN):
            if start:
                await asyncio.sleep(0)
                if getattr(channel, "closed", False):
                    return None  # its registrations were dropped on close: add no more
            chunk = consumers[start:start + HEARTBEAT_GROUPS_PER_TURN]
            sub_changed = self._register_consumers(channel, cmd, data, language, chunk) or sub_changed
        self._register_producers(channel, cmd, data, language)
        return self._heart_beat_response(cmd, sub_changed)

    def _check_heartbeat(self, data: HeartbeatData) -> str | None:
        """Why the heartbeat is refused (no client id, an illegal group name), or None."""
        if not data.client_id:
            return "heartbeat body: missing field 'clientID'"
        return self._heartbeat_group_problem(data)

    @staticmethod
    def _language(cmd: RemotingCommand) -> str:
        return cmd.language if isinstance(cmd.language, str) else str(cmd.language)

    def _register_consumers(self, channel: Any, cmd: RemotingCommand, data: HeartbeatData, language: str,
                            consumers: list[Any]) -> bool:
        """Register ``consumers`` (part of ``data``); True if a group's subscriptions changed."""
        sub_changed = False
        for consumer in consumers:
            group = consumer.group_name
            group_config = self.groups.find_or_create(group)
            if group_config is None:
                continue  # unknown group with auto-create disabled: ignored, like the Java broker
            if consumer.message_model == CLUSTERING:
                # Every clustering group needs a routable retry topic, listed in the heartbeat or not.
                self.topics.create_retry_topic(group, group_config.retry_queue_nums)
            client = ClientInfo(channel, data.client_id, language, cmd.version)
            changed = self.consumers.register(
                group, client, consumer.consume_type, consumer.message_model, consumer.consume_from_where,
                consumer.subscriptions, notify=group_config.notify_consumer_ids_changed_enable,
            )
            sub_changed = sub_changed or changed
            for sub in consumer.subscriptions:
                if normalize_expression_type(sub.expression_type) != EXPRESSION_TAG:
                    # A selector that does not compile is kept with its error: pulls answer 23 with it.
                    self.filters.register(group, sub.topic, sub.sub_string, sub.expression_type, sub.sub_version)
        return sub_changed

    def _register_producers(self, channel: Any, cmd: RemotingCommand, data: HeartbeatData, language: str) -> None:
        for producer in data.producers:
            if producer.group_name:
                self.producers.register(producer.group_name, ClientInfo(channel, data.client_id, language, cmd.version))

    @staticmethod
    def _heart_beat_response(cmd: RemotingCommand, sub_changed: bool) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, None, {
            "IS_SUPPORT_HEART_BEAT_V2": "false",
            "IS_SUB_CHANGE": "true" if sub_changed else "false",
            "serializeTypes": SERIALIZE_TYPES_ANNOUNCEMENT,
        })

    def _heartbeat_group_problem(self, data: HeartbeatData) -> str | None:
        """The first illegal group name of a heartbeat as an error remark; None when all are legal."""
        for consumer in data.consumers:
            problem = self.consumer_group_problem(consumer.group_name)
            if problem is not None:
                return f"heartbeat consumerDataSet: {problem}"
        for producer in data.producers:
            if producer.group_name:  # an unnamed producer entry registers nothing and is skipped
                problem = self.group_problem(producer.group_name)
                if problem is not None:
                    return f"heartbeat producerDataSet: {problem}"
        return None

    # ---- UNREGISTER_CLIENT -----------------------------------------------------------------------
    def unregister_client(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        for name, group in (("producerGroup", header.producer_group), ("consumerGroup", header.consumer_group)):
            problem = self.group_problem(group) if group else None
            if problem is not None:
                return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"{name}: {problem}")
        if header.producer_group:
            self.producers.unregister(header.producer_group, header.client_id)
        if header.consumer_group:
            group_config = self.groups.find(header.consumer_group)
            notify = group_config.notify_consumer_ids_changed_enable if group_config else True
            self.consumers.unregister(header.consumer_group, header.client_id, notify=notify)
            if not self.consumers.client_ids(header.consumer_group):
                self.filters.unregister(header.consumer_group)
        return cmd.make_response(ResponseCode.SUCCESS)

    # ---- GET_CONSUMER_LIST_BY_GROUP --------------------------------------------------------------
    def get_consumer_list_by_group(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        ids = self.consumers.client_ids(header.consumer_group)
        if not ids:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"no consumer for this group, {header.consumer_group}")
        return cmd.make_response(ResponseCode.SUCCESS, None, None, ConsumerListBody(ids).encode())

    # ---- CHECK_CLIENT_CONFIG ---------------------------------------------------------------------
    def check_client_config(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        try:
            body = read_request(cmd)
        except HeaderError as exc:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, str(exc))
        sub = body.subscription_data
        expression_type = normalize_expression_type(sub.expression_type if sub else None)
        if expression_type == EXPRESSION_TAG:
            return cmd.make_response(ResponseCode.SUCCESS)
        if expression_type != EXPRESSION_SQL92:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                     f"unsupported expression type {expression_type!r} (TAG or SQL92)")
        if not self.config.enable_property_filter:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     "The broker does not support consumer to filter message by "
                                     f"{expression_type} (set enablePropertyFilter=true in broker.conf)")
        try:
            build_filter(expression_type, sub.sub_string)
        except (SelectorError, UnsupportedExpressionType) as exc:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        return cmd.make_response(ResponseCode.SUCCESS)
