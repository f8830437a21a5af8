"""Consumption retry family: CONSUMER_SEND_MSG_BACK (36, reference §4.8), GET_ALL_DELAY_OFFSET (45)
and the project extension RESEND_DLQ_MESSAGE (9001).

A failed message is copied to ``%RETRY%<group>`` through the delay path (SCHEDULE_TOPIC_XXXX, level
3 + reconsumeTimes unless the client chose one), or to ``%DLQ%<group>`` queue 0 once it has been
re-consumed maxReconsumeTimes times or the client asked for it (delayLevel < 0).

Listing a DLQ needs no special request: it is the ordinary topic ``%DLQ%<group>`` with one queue,
readable with GET_MIN_OFFSET/GET_MAX_OFFSET (31/30) and PULL_MESSAGE (11) on queue 0, and searchable
by key with QUERY_MESSAGE (12). RESEND_DLQ_MESSAGE puts one dead message back on its original topic.
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING, Any

from broker.managers.topic_config import DLQ_GROUP_TOPIC_PREFIX, dlq_topic, retry_topic
from broker.schedule.delay import to_schedule_topic
from broker.store.types import MessageToStore, PutResult, message_from_record
from protocol.codes import PERM_WRITE, RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import ResendDlqMessageRequestHeader
from protocol.ids import decode_offset_msg_id
from protocol.message import MessageRecord, RecordError, decode_record
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
# Cleared when a dead message is re-sent as a fresh message (retry/delay bookkeeping of its old life).
RESEND_CLEARED_PROPERTIES = ("RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "DELAY", "REAL_TOPIC", "REAL_QID",
                             "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC",
                             "TIMER_DELAY_MS")


class RetryProcessor(GroupChecks):
    """Writes retried and re-sent messages to the store (through the delay path for retries)."""

    def __init__(self, config: "BrokerConfig", store: "MessageStore", topics: "TopicConfigManager",
                 groups: "SubscriptionGroupManager", schedule: "ScheduleMessageService", resends: Any = None) -> None:
        super().__init__()
        self.resends = resends  # broker/managers/dlq_resends.py's DlqResendLog: the resend audit
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
    def _find_dead_record(self, header: ResendDlqMessageRequestHeader, dlq: str) -> MessageRecord | None:
        """By commit-log offset, offset message id, or UNIQ_KEY (newest copy in the DLQ)."""
        if header.offset is not None:
            record = self._look_record(header.offset)
            return record if record is not None and record.topic == dlq else None
        msg_id = (header.msg_id or "").strip()
        if not msg_id:
            return None
        try:
            _, _, phys = decode_offset_msg_id(msg_id)
        except ValueError:
            phys = -1
        record = self._look_record(phys)
        if record is not None and record.topic == dlq:
            return record
        found = self.store.query_message(dlq, msg_id, 32, 0, 2**62)
        candidates = []
        for raw in found.records:
            try:
                candidate = decode_record(raw)
            except (RecordError, ValueError):
                continue
            if candidate.topic == dlq and candidate.uniq_key == msg_id:
                candidates.append(candidate)
        return max(candidates, key=lambda r: r.physical_offset) if candidates else None

    def resend_dlq_message(self, channel: Any, cmd: RemotingCommand):
        header = read_request(cmd)
        problem = self.group_problem(header.group)
        if problem is not None:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"group: {problem}")
        if header.offset is None and not header.msg_id:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, "either 'offset' or 'msgId' is required")
        dlq = DLQ_GROUP_TOPIC_PREFIX + header.group
        record = self._find_dead_record(header, dlq)
        if record is None:
            which = header.offset if header.offset is not None else header.msg_id
            return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, f"no message {which} in {dlq}")
        resends = self.resends
        earlier = resends.last(header.group, record.physical_offset) if resends is not None else None
        if earlier is not None and not header.force:
            # resending twice delivers the message twice: only on purpose
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(earlier["at"] / 1000))
            return cmd.make_response(
                ResponseCode.INVALID_PARAMETER,
                f"dead letter {record.uniq_key or record.offset_msg_id} of group {header.group} was already resent "
                f"to {earlier['target']} at {when} by {earlier['by']} ({earlier['count']} time(s)); resend it again "
                "with force=true", {"resentAt": str(earlier["at"]), "resentBy": earlier["by"],
                                    "resentCount": str(earlier["count"])})
        properties = dict(record.properties)
        original = properties.get(PROP_RETRY_TOPIC) or properties.get("REAL_TOPIC")
        to_retry = not header.topic and not header.to_original_topic
        if to_retry:
            # Default: only this group consumes it again, through its retry topic (the original topic would hand a
            # duplicate to every other group subscribed to it).
            target = retry_topic(header.group)
            group_config = self.groups.find_or_create(header.group)
            if group_config is not None and self.topics.get(target) is None:
                self.topics.create_retry_topic(header.group, group_config.retry_queue_nums)
        else:
            target = header.topic or original
        if not target:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER,
                                     "the dead message names no original topic (RETRY_TOPIC); give 'topic'")
        target_config = self.topics.get(target)
        if target_config is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{target}] not exist")
        if not target_config.perm & PERM_WRITE:
            return cmd.make_response(ResponseCode.NO_PERMISSION, f"the topic[{target}] sending message is forbidden")
        queue_nums = max(1, target_config.write_queue_nums)
        queue_id = header.queue_id
        if queue_id is None or queue_id < 0:
            queue_id = self._random.randrange(99_999_999) % queue_nums
        elif queue_id >= queue_nums:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER,
                                     f"queueId[{queue_id}] is illegal, topic[{target}] has {queue_nums} queues")
        for key in RESEND_CLEARED_PROPERTIES:
            properties.pop(key, None)
        if target == retry_topic(header.group) and original:
            properties[PROP_RETRY_TOPIC] = original  # the consumer sees the topic the message was first sent to
        properties[PROP_CLUSTER] = self.config.broker_cluster_name
        message = message_from_record(record, target, queue_id, properties, 0)
        access_key = (cmd.ext_fields or {}).get("AccessKey")
        addr = getattr(channel, "remote_addr", "?")
        who = f"{access_key}@{addr}" if access_key else addr
        return self._answer_resend(cmd, self._put(message), target, queue_id, message.uniq_key,
                                   (header.group, record, who, resends))

    async def _answer_resend(self, cmd: RemotingCommand, put, topic: str, queue_id: int, uniq_key: str | None,
                             audit: tuple[str, MessageRecord, str, Any]) -> RemotingCommand:
        result: PutResult = await put
        if not result.ok:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, result.status.name)
        new_msg_id = result.msg_ids[0] if result.msg_ids else ""
        ext = {"msgId": new_msg_id, "topic": topic, "queueId": str(queue_id),
               "queueOffset": str(result.queue_offset)}
        if uniq_key:
            ext["uniqKey"] = uniq_key
        group, record, who, resends = audit
        dead_id = record.uniq_key or record.offset_msg_id
        count = 1
        if resends is not None:
            count = resends.record(group, record.physical_offset, dead_id, topic, new_msg_id, who)["count"]
        # the audit line: one per resend (an operator's action, never per message of the traffic)
        log.info("DLQ resend by %s: group %s, message %s (dead letter at commit-log offset %d) to %s as %s%s",
                 who, group, dead_id, record.physical_offset, topic, new_msg_id,
                 f" (resent {count} times)" if count > 1 else "")
        return cmd.make_response(ResponseCode.SUCCESS, None, ext)
