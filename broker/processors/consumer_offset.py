"""QUERY_CONSUMER_OFFSET (14) and UPDATE_CONSUMER_OFFSET (15) — reference §4.5."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import QueryConsumerOffsetRequestHeader, UpdateConsumerOffsetRequestHeader
from broker.processors.base import BrokerProcessor

if TYPE_CHECKING:
    from broker.broker import Broker


class ConsumerOffsetProcessor(BrokerProcessor):
    def __init__(self, broker: "Broker") -> None:
        super().__init__(broker)

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
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
        header = QueryConsumerOffsetRequestHeader.decode(cmd.ext_fields)
        offset = self.offsets.query_offset(header.consumer_group, header.topic, header.queue_id)
        if offset >= 0:
            return cmd.make_response(ResponseCode.SUCCESS, None, {"offset": str(offset)})
        if header.set_zero_if_not_found is not False and self._first_message_in_store(header.topic, header.queue_id):
            return cmd.make_response(ResponseCode.SUCCESS, None, {"offset": "0"})
        return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    def update_consumer_offset(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = UpdateConsumerOffsetRequestHeader.decode(cmd.ext_fields)
        group = header.consumer_group
        if self.groups.find_or_create(group) is None:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        if self.topics.get(header.topic) is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist")
        self.offsets.commit_offset(group, header.topic, header.queue_id, header.commit_offset,
                                   getattr(channel, "remote_addr", None))
        return cmd.make_response(ResponseCode.SUCCESS)
