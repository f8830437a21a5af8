"""Admin requests (mqadmin and Java admin tools), answered in the reference broker's body formats.

UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21),
GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS (208), GET_CONSUMER_CONNECTION_LIST (203),
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201),
DELETE_SUBSCRIPTIONGROUP (207), GET_BROKER_RUNTIME_INFO (28), GET_ALL_CONSUMER_OFFSET (43),
GET_BROKER_CONFIG (26), GET_PRODUCER_CONNECTION_LIST (204), GET_ALL_PRODUCER_INFO (328).

Each handler only translates: the remoting header and body into the core's typed request (broker/core/admin), the
core's Outcome into the response (its code and remark; the value encoded as the reference's body).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.core.admin import (AdminService, AllProducersRequest, BrokerConfigRequest, ConsumeStatsRequest,
                               ConsumerConnectionRequest, ConsumerOffsetsRequest, DeleteSubscriptionGroupRequest,
                               DeleteTopicRequest, ProducerConnectionRequest, RuntimeInfoRequest,
                               SubscriptionGroupsRequest, TopicConfigsRequest, TopicStatsRequest,
                               UpdateSubscriptionGroupRequest, UpdateTopicRequest)
from broker.core.outcome import Outcome, Requester
from protocol.admin_bodies import KVTable
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config_bodies import SubscriptionGroupConfig
from protocol.jsonlenient import dumps_compact
from protocol.requests import read_request


def requester(channel: Any, cmd: RemotingCommand) -> Requester:
    """Who sent ``cmd`` over remoting: the peer's address and the access key it signed with."""
    return Requester(getattr(channel, "remote_addr", "?"), "remoting",
                     access_key=(cmd.ext_fields or {}).get("AccessKey"))


def _json(value: Any) -> bytes:
    return dumps_compact(value)


def _encoded(value: Any) -> bytes:
    return value.encode()


def _properties(props: dict[str, Any]) -> bytes:
    return "".join(f"{k}={v}\n" for k, v in sorted(props.items())).encode("utf-8")


def _kv_table(info: dict[str, Any]) -> bytes:
    return KVTable.of(info.items()).encode()


def answer(cmd: RemotingCommand, outcome: Outcome, body: Callable[[Any], bytes] | None = None) -> RemotingCommand:
    """The response to ``cmd``: the Outcome's code and remark, and on success its value encoded by ``body``."""
    if not outcome.ok:
        return cmd.make_response(outcome.code, outcome.remark)
    if body is None:
        return cmd.make_response(ResponseCode.SUCCESS)
    return cmd.make_response(ResponseCode.SUCCESS, body=body(outcome.value))


class AdminProcessor:
    """Translates the admin request codes to and from ``admin`` (the core's AdminService)."""

    def __init__(self, admin: AdminService) -> None:
        self.admin = admin

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self._reader(TopicConfigsRequest, self.admin.topic_configs, _json),
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self._reader(SubscriptionGroupsRequest,
                                                                       self.admin.subscription_groups, _json),
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            RequestCode.GET_BROKER_RUNTIME_INFO: self._reader(RuntimeInfoRequest, self.admin.runtime_info, _kv_table),
            RequestCode.GET_ALL_CONSUMER_OFFSET: self._reader(ConsumerOffsetsRequest, self.admin.consumer_offsets,
                                                              _json),
            RequestCode.GET_BROKER_CONFIG: self._reader(BrokerConfigRequest, self.admin.broker_config, _properties),
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list,
            RequestCode.GET_ALL_PRODUCER_INFO: self._reader(AllProducersRequest, self.admin.all_producers, _encoded),
        }

    @staticmethod
    def _reader(request_type: Any, execute: Callable[[Any], Outcome],
                body: Callable[[Any], bytes]) -> Callable[[Any, RemotingCommand], RemotingCommand]:
        """A handler of a listing that names nothing: the typed request, its Outcome, the encoded answer."""
        def handle(channel: Any, cmd: RemotingCommand) -> RemotingCommand:
            return answer(cmd, execute(request_type(requester(channel, cmd))), body)
        return handle

    # ---- topics ---------------------------------------------------------------------------------
    def update_and_create_topic(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        request = UpdateTopicRequest(header.topic, header.read_queue_nums, header.write_queue_nums, header.perm,
                                     header.topic_filter_type, header.topic_sys_flag, bool(header.order),
                                     header.attributes, requester(channel, cmd))
        return answer(cmd, self.admin.update_topic(request))

    async def delete_topic(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        request = DeleteTopicRequest(read_request(cmd).topic, requester(channel, cmd))
        return answer(cmd, await self.admin.delete_topic(request))

    def get_topic_stats_info(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        request = TopicStatsRequest(read_request(cmd).topic, requester(channel, cmd))
        return answer(cmd, self.admin.topic_stats(request), _encoded)

    # ---- consumer groups ------------------------------------------------------------------------
    def get_consume_stats(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        request = ConsumeStatsRequest(header.consumer_group, header.topic, requester(channel, cmd))
        return answer(cmd, self.admin.consume_stats(request), _encoded)

    def get_consumer_connection_list(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        request = ConsumerConnectionRequest(read_request(cmd).consumer_group, requester(channel, cmd))
        return answer(cmd, self.admin.consumer_connection(request), _encoded)

    def get_producer_connection_list(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        request = ProducerConnectionRequest(read_request(cmd).producer_group, requester(channel, cmd))
        return answer(cmd, self.admin.producer_connection(request), _encoded)

    async def update_and_create_subscription_group(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        try:
            config = SubscriptionGroupConfig.decode(cmd.body) if cmd.body else None
        except ValueError as exc:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"malformed SubscriptionGroupConfig: {exc}")
        if config is None:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, "SubscriptionGroupConfig body needs 'groupName'")
        request = UpdateSubscriptionGroupRequest(config, requester(channel, cmd))
        return answer(cmd, await self.admin.update_subscription_group(request))

    async def delete_subscription_group(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        request = DeleteSubscriptionGroupRequest(header.group_name, bool(header.clean_offset),
                                                 requester(channel, cmd))
        return answer(cmd, await self.admin.delete_subscription_group(request))
