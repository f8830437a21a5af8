"""Consumption retry family: CONSUMER_SEND_MSG_BACK (36, reference §4.8), GET_ALL_DELAY_OFFSET (45)
and the project extension RESEND_DLQ_MESSAGE (9001).

A failed message is copied to ``%RETRY%<group>`` through the delay path (SCHEDULE_TOPIC_XXXX, level
3 + reconsumeTimes unless the client chose one), or to ``%DLQ%<group>`` queue 0 once it has been
re-consumed maxReconsumeTimes times or the client asked for it (delayLevel < 0).

Listing a DLQ needs no special request: it is the ordinary topic ``%DLQ%<group>`` with one queue,
readable with GET_MIN_OFFSET/GET_MAX_OFFSET (31/30) and PULL_MESSAGE (11) on queue 0, and searchable
by key with QUERY_MESSAGE (12). RESEND_DLQ_MESSAGE puts one dead message back (by default through the group's retry
topic); it is an admin request of the messaging core (broker/core/admin/resend.py), translated here.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any

from broker.managers.topic_config import dlq_topic, retry_topic
from broker.core.admin import ResendDeadLetterRequest
from broker.core.outcome import Outcome, Requester
from broker.schedule.delay import to_schedule_topic
from broker.store.types import MessageToStore, PutResult, message_from_record
from protocol.codes import PERM_WRITE, RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.message import MessageRecord
from protocol.requests import read_request
from broker.processors.base import GroupChecks

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.managers.subscription_group import SubscriptionGroupManager
    from broker.managers.topic_config import TopicConfigManager
    from broker.schedule.service import ScheduleMessageService
    from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

DEFAULT_MAX_RECONSUME_TIMES = 16
FIRST_RETRY_DELAY_LEVEL = 3  # delayLevel 0 -> 3 + reconsumeTimes (10 s, 30 s, 1 min, ...)
MIN_VERSION_WITH_MAX_RECONSUME_TIMES = 121  # V3_4_9: older clients' maxReconsumeTimes is ignored

PROP_RETRY_TOPIC = "RETRY_TOPIC"
PROP_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROP_DELAY = "DELAY"
PROP_CLUSTER = "CLUSTER"


class RetryProcessor(GroupChecks):
    """Writes retried and re-sent messages to the store (through the delay path for retries)."""

    def __init__(self, config: "BrokerConfig", store: "MessageStore", topics: "TopicConfigManager",
                 groups: "SubscriptionGroupManager", schedule: "ScheduleMessageService", admin: Any = None) -> None:
        super().__init__()
        self.admin = admin  # broker/core/admin's AdminService: RESEND_DLQ_MESSAGE
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.schedule = schedule
        self._random = random.Random()

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.CONSUMER_SEND_MSG_BACK: self.consumer_send_msg_back,
            RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            RequestCode.RESEND_DLQ_MESSAGE: self.resend_dlq_message,
        }

    # ---- helpers ------------------------------------------------------------------------------
    def _look_record(self, phys_offset: int) -> MessageRecord | None:
        return self.store.look_record(phys_offset)

    def _put(self, message: MessageToStore):
        """The store's put coroutine (ASYNC_FLUSH completes without suspending)."""
        return self.store.put_message(message)

    # ---- CONSUMER_SEND_MSG_BACK ---------------------------------------------------------------
    def consumer_send_msg_back(self, channel: Any, cmd: RemotingCommand):
        header = read_request(cmd)
        group = header.group
        problem = self.consumer_group_problem(group)
        if problem is not None:  # before find_or_create: a bad name must not become a persisted group
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"group: {problem}")
        group_config = self.groups.find_or_create(group)
        if group_config is None:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                     f"subscription group not exist, {group}")
        if not self.config.broker_permission & PERM_WRITE:
            return cmd.make_response(ResponseCode.NO_PERMISSION,
                                     f"the broker[{self.config.broker_ip1}] sending message is forbidden")
        if group_config.retry_queue_nums <= 0:
            return cmd.make_response(ResponseCode.SUCCESS)  # the group wants no retries: dropped
        retry_config = self.topics.create_retry_topic(group, group_config.retry_queue_nums)
        if retry_config is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"topic[{retry_topic(group)}] not exist")
        if not retry_config.perm & PERM_WRITE:
            return cmd.make_response(ResponseCode.NO_PERMISSION,
                                     f"the topic[{retry_config.topic_name}] sending message is forbidden")
        record = self._look_record(header.offset)
        if record is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}")

        properties = dict(record.properties)
        if not properties.get(PROP_RETRY_TOPIC):
            properties[PROP_RETRY_TOPIC] = record.topic
        max_times = header.max_reconsume_times
        if max_times is None or max_times < 0 or cmd.version < MIN_VERSION_WITH_MAX_RECONSUME_TIMES:
            max_times = group_config.retry_max_times
        if max_times is None or max_times < 0:
            max_times = DEFAULT_MAX_RECONSUME_TIMES
        delay_level = header.delay_level
        if record.reconsume_times >= max_times or delay_level < 0:
            dlq_config = self.topics.create_dlq_topic(group)
            if dlq_config is None:
                return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"topic[{dlq_topic(group)}] not exist")
            if not dlq_config.perm & PERM_WRITE:
                return cmd.make_response(ResponseCode.NO_PERMISSION,
                                         f"the topic[{dlq_config.topic_name}] sending message is forbidden")
            topic, queue_id = dlq_config.topic_name, 0
            properties.pop(PROP_DELAY, None)
        else:
            topic = retry_config.topic_name
            queue_id = self._random.randrange(99_999_999) % max(1, retry_config.write_queue_nums)
            if delay_level == 0:
                delay_level = FIRST_RETRY_DELAY_LEVEL + record.reconsume_times
            properties[PROP_DELAY] = str(delay_level)
        if not properties.get(PROP_ORIGIN_MESSAGE_ID):
            properties[PROP_ORIGIN_MESSAGE_ID] = record.offset_msg_id
        properties[PROP_CLUSTER] = self.config.broker_cluster_name
        message = message_from_record(record, topic, queue_id, properties, record.reconsume_times + 1)
        to_schedule_topic(message, properties, self.schedule.max_level)
        return self._answer_send_back(cmd, self._put(message))

    async def _answer_send_back(self, cmd: RemotingCommand, put) -> RemotingCommand:
        result: PutResult = await put
        if result.ok:
            return cmd.make_response(ResponseCode.SUCCESS)
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, result.status.name)

    # ---- GET_ALL_DELAY_OFFSET -----------------------------------------------------------------
    def get_all_delay_offset(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, None, None, self.schedule.encode_json())

    # ---- RESEND_DLQ_MESSAGE (project extension) -----------------------------------------------
    def resend_dlq_message(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand | Any:
        """Translated to the core's ResendDeadLetterRequest (broker/core/admin/resend.py), which does the work."""
        header = read_request(cmd)
        request = ResendDeadLetterRequest(
            header.group, header.offset, header.msg_id, header.topic, header.queue_id,
            bool(header.to_original_topic), bool(header.force),
            Requester(getattr(channel, "remote_addr", "?"), "remoting",
                      access_key=(cmd.ext_fields or {}).get("AccessKey")))
        outcome = self.admin.resend_dead_letter(request)
        if type(outcome) is Outcome:
            return self._answer_resend(cmd, outcome)
        return self._resent(cmd, outcome)

    async def _resent(self, cmd: RemotingCommand, pending: Any) -> RemotingCommand:
        return self._answer_resend(cmd, await pending)

    @staticmethod
    def _answer_resend(cmd: RemotingCommand, outcome: Outcome) -> RemotingCommand:
        """The copy's msgId, topic, queueId, queueOffset (uniqKey) on success; a refusal of a letter resent before
        carries when, by whom and how often."""
        if outcome.ok:
            return cmd.make_response(ResponseCode.SUCCESS, None, outcome.value)
        if outcome.value:
            return cmd.make_response(outcome.code, outcome.remark, outcome.value)
        return cmd.make_response(outcome.code, outcome.remark)
