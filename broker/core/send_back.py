"""A consumer's send-back (CONSUMER_SEND_MSG_BACK, reference §4.8) and the resend of a dead letter (RESEND_DLQ_MESSAGE,
the console's and mqadmin's) in the messaging core: a typed request in, one Outcome out.

Both write a copy of a stored record elsewhere: a failed message to ``%RETRY%<group>`` through the delay path
(SCHEDULE_TOPIC_XXXX, level 3 + reconsumeTimes unless the client chose one), or to ``%DLQ%<group>`` queue 0 once it
has been consumed again too often (broker/core/retries.py, the rule a send to a retry topic follows too) or the client
asked for it (delayLevel < 0); a dead letter back to its group's retry topic or to a topic. The copy is stored as a
send is (SendService.store_one): refused when too few replicas are in sync, acknowledged after the flush (SYNC_FLUSH)
and a slave's acknowledgement (SYNC_MASTER). The remoting processor (broker/processors/retry.py) only translates.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Protocol

from broker.acl.authorizer import Needs
from broker.acl.resources import RecordTopics, send_back_needs
from broker.core.outcome import Outcome, Requester
from broker.core.retries import FIRST_RETRY_DELAY_LEVEL, dead_letter_topic, reconsume_limit
from broker.core.send_types import SendResult
from broker.managers.derived_names import consumer_group_problem
from broker.managers.topic_config import DLQ_GROUP_TOPIC_PREFIX, retry_topic, validate_group
from broker.schedule.delay import to_schedule_topic
from broker.store.types import MessageToStore, QueryResult, message_from_record
from protocol.codes import PERM_WRITE, ResponseCode
from protocol.ids import decode_offset_msg_id
from protocol.message import MessageRecord, RecordError, decode_record

__all__ = ["REASON_ALREADY_RESENT", "ResendRequest", "ResendResult", "SendBackRequest", "SendBackService"]

log = logging.getLogger(__name__)

PROP_RETRY_TOPIC = "RETRY_TOPIC"
PROP_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROP_DELAY = "DELAY"
PROP_CLUSTER = "CLUSTER"
# Cleared when a dead message is re-sent as a fresh message (retry/delay bookkeeping of its old life).
RESEND_CLEARED_PROPERTIES = ("RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "DELAY", "REAL_TOPIC", "REAL_QID",
                             "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC",
                             "TIMER_DELAY_MS")
#: Outcome.reason of a resend refused because the letter was resent before (its value: that audit entry)
REASON_ALREADY_RESENT = "already_resent"
_LOCAL = Requester("127.0.0.1:0", "console")


@dataclass(slots=True)
class SendBackRequest:
    """A message ``group`` failed to consume, at commit-log ``offset``, to be delivered again: ``delay_level`` 0 lets
    the broker choose (3 + its reconsume times), < 0 sends it straight to the dead letters, > 0 is that level;
    ``max_reconsume_times`` the client's limit (None: the group's)."""

    group: str
    offset: int
    delay_level: int = 0
    max_reconsume_times: int | None = None
    requester: Requester = _LOCAL

    def needs(self, records: RecordTopics | None = None) -> Needs:
        """SUB on the group and on the topic of the record at ``offset`` (found through ``records``, the store)."""
        return send_back_needs(records, self.group, self.offset)


@dataclass(slots=True)
class ResendRequest:
    """Resend ``group``'s dead letter, named by its commit-log ``offset`` or by ``msg_id`` (an offset message id or
    its UNIQ_KEY), to the group's retry topic (the default: only this group consumes it again), to ``topic``, or to
    the topic it was first sent to (``to_original_topic``); queue ``queue_id`` (None: any). ``force``: even if it was
    resent before."""

    group: str
    offset: int | None = None
    msg_id: str | None = None
    topic: str | None = None
    to_original_topic: bool = False
    queue_id: int | None = None
    force: bool = False
    requester: Requester = _LOCAL


@dataclass(slots=True)
class ResendResult:
    """Where a resent dead letter went; ``dead_id`` names the letter, ``count`` how many times it has been resent."""

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    uniq_key: str | None
    dead_id: str
    count: int


class RecordReader(Protocol):
    """The store's reads a send-back uses."""

    def look_record(self, phys_offset: int) -> MessageRecord | None: ...
    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> QueryResult: ...


class MessageSink(Protocol):
    """The send core's store path (SendService.store_one) and its delay levels."""

    def store_one(self, message: MessageToStore, queue_id: int, uniq_key: str | None,
                  timed: int = 0) -> Outcome[SendResult] | Awaitable[Outcome[SendResult]]: ...
    def delay_max_level(self) -> int: ...


class SendBackService:
    """Built by the Broker with ``config`` (BrokerConfig, read live: permissions and the cluster name), the store's
    record reads, the topic and subscription-group registries, ``sink`` (the send service: its store path and delay
    levels) and ``resends`` (broker/managers/dlq_resends.py's DlqResendLog, the resend audit; None: no audit)."""

    def __init__(self, config: Any, records: RecordReader, topics: Any, groups: Any, sink: MessageSink,
                 resends: Any = None) -> None:
        self.config = config
        self.records = records
        self.topics = topics
        self.groups = groups
        self.sink = sink
        self.resends = resends
        self._random = random.Random()
        self._valid_groups: set[str] = set()  # consumer groups whose names passed the checks

    # ---- CONSUMER_SEND_MSG_BACK ------------------------------------------------------------------------------------
    def send_back(self, request: SendBackRequest) -> Outcome[SendResult] | Awaitable[Outcome[SendResult]]:
        """Copy the failed message to the group's retry topic (delayed) or dead letters. SUCCESS once stored (and
        flushed and acknowledged where the broker waits for that); SYSTEM_ERROR with the put status's name when the
        copy was not (or was stored but not in time), as the reference answers; a success without value when the
        group wants no retries (the message is dropped)."""
        group = request.group
        problem = self._group_problem(group)
        if problem is not None:  # before find_or_create: a bad name must not become a persisted group
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, f"group: {problem}", "group")
        group_config = self.groups.find_or_create(group)
        if group_config is None:
            return Outcome.refused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        config = self.config
        if not config.broker_permission & PERM_WRITE:
            return Outcome.refused(ResponseCode.NO_PERMISSION,
                                   f"the broker[{config.broker_ip1}] sending message is forbidden")
        if group_config.retry_queue_nums <= 0:
            return Outcome.success()  # the group wants no retries: dropped
        retry_config = self.topics.create_retry_topic(group, group_config.retry_queue_nums)
        if retry_config is None:
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, f"topic[{retry_topic(group)}] not exist")
        if not retry_config.perm & PERM_WRITE:
            return Outcome.refused(ResponseCode.NO_PERMISSION,
                                   f"the topic[{retry_config.topic_name}] sending message is forbidden")
        record = self.records.look_record(request.offset)
        if record is None:
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {request.offset}")

        properties = dict(record.properties)
        if not properties.get(PROP_RETRY_TOPIC):
            properties[PROP_RETRY_TOPIC] = record.topic
        delay_level = request.delay_level
        reconsume_times = record.reconsume_times + 1
        if reconsume_times > reconsume_limit(request.max_reconsume_times, group_config) or delay_level < 0:
            dlq_config, refusal = dead_letter_topic(self.topics, group)
            if refusal is not None:
                return refusal
            if not dlq_config.perm & PERM_WRITE:
                return Outcome.refused(ResponseCode.NO_PERMISSION,
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
        properties[PROP_CLUSTER] = config.broker_cluster_name
        message = message_from_record(record, topic, queue_id, properties, reconsume_times)
        to_schedule_topic(message, properties, self.sink.delay_max_level())
        stored = self.sink.store_one(message, queue_id, message.uniq_key)
        if type(stored) is Outcome:
            return _send_back_answer(stored)
        return self._send_back_later(stored)

    @staticmethod
    async def _send_back_later(pending: Awaitable[Outcome[SendResult]]) -> Outcome[SendResult]:
        return _send_back_answer(await pending)

    def _group_problem(self, group: str | None) -> str | None:
        """A consumer group's name and its derived topics' (%RETRY%, %DLQ%): None when legal (remembered)."""
        if group in self._valid_groups:
            return None
        problem = validate_group(group) or consumer_group_problem(group)
        if problem is None:
            if len(self._valid_groups) > 100_000:
                self._valid_groups.clear()
            self._valid_groups.add(group)
        return problem

    # ---- RESEND_DLQ_MESSAGE ----------------------------------------------------------------------------------------
    def resend(self, request: ResendRequest) -> Outcome[ResendResult] | Awaitable[Outcome[ResendResult]]:
        """Put one dead letter back as a fresh message (reconsume count 0, its retry and delay bookkeeping cleared).
        Refused when it was resent before unless ``force`` (delivering it twice only on purpose): the refusal's
        value is the earlier resend's audit entry, its reason REASON_ALREADY_RESENT. A letter stored but not
        acknowledged in time is answered with that code (FLUSH_SLAVE_TIMEOUT...), its value set and its resend
        audited."""
        group = request.group
        problem = validate_group(group)
        if problem is not None:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, f"group: {problem}", "group")
        if request.offset is None and not request.msg_id:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, "either 'offset' or 'msgId' is required")
        dlq = DLQ_GROUP_TOPIC_PREFIX + group
        record = self._find_dead_record(request, dlq)
        if record is None:
            which = request.offset if request.offset is not None else request.msg_id
            return Outcome.refused(ResponseCode.QUERY_NOT_FOUND, f"no message {which} in {dlq}")
        resends = self.resends
        earlier = resends.last(group, record.physical_offset) if resends is not None else None
        if earlier is not None and not request.force:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(earlier["at"] / 1000))
            return Outcome(int(ResponseCode.INVALID_PARAMETER),
                           f"dead letter {record.uniq_key or record.offset_msg_id} of group {group} was already "
                           f"resent to {earlier['target']} at {when} by {earlier['by']} ({earlier['count']} time(s)); "
                           "resend it again with force=true", earlier, REASON_ALREADY_RESENT)
        properties = dict(record.properties)
        original = properties.get(PROP_RETRY_TOPIC) or properties.get("REAL_TOPIC")
        if not request.topic and not request.to_original_topic:
            # Default: only this group consumes it again, through its retry topic (the original topic would hand a
            # duplicate to every other group subscribed to it).
            target = retry_topic(group)
            group_config = self.groups.find_or_create(group)
            if group_config is not None and self.topics.get(target) is None:
                self.topics.create_retry_topic(group, group_config.retry_queue_nums)
        else:
            target = request.topic or original
        if not target:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER,
                                   "the dead message names no original topic (RETRY_TOPIC); give 'topic'", "topic")
        target_config = self.topics.get(target)
        if target_config is None:
            return Outcome.refused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{target}] not exist", "topic")
        if not target_config.perm & PERM_WRITE:
            return Outcome.refused(ResponseCode.NO_PERMISSION, f"the topic[{target}] sending message is forbidden")
        queue_nums = max(1, target_config.write_queue_nums)
        queue_id = request.queue_id
        if queue_id is None or queue_id < 0:
            queue_id = self._random.randrange(99_999_999) % queue_nums
        elif queue_id >= queue_nums:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER,
                                   f"queueId[{queue_id}] is illegal, topic[{target}] has {queue_nums} queues")
        for key in RESEND_CLEARED_PROPERTIES:
            properties.pop(key, None)
        if target == retry_topic(group) and original:
            properties[PROP_RETRY_TOPIC] = original  # the consumer sees the topic the message was first sent to
        properties[PROP_CLUSTER] = self.config.broker_cluster_name
        message = message_from_record(record, target, queue_id, properties, 0)
        who = request.requester
        who = f"{who.access_key}@{who.remote_addr}" if who.access_key else who.remote_addr
        stored = self.sink.store_one(message, queue_id, message.uniq_key)
        if type(stored) is Outcome:
            return self._resent(stored, group, record, target, who)
        return self._resent_later(stored, group, record, target, who)

    async def _resent_later(self, pending: Awaitable[Outcome[SendResult]], group: str, record: MessageRecord,
                            topic: str, who: str) -> Outcome[ResendResult]:
        return self._resent(await pending, group, record, topic, who)

    def _resent(self, stored: Outcome[SendResult], group: str, record: MessageRecord, topic: str,
                who: str) -> Outcome[ResendResult]:
        """The resend's Outcome; a stored letter is audited (and logged: an operator's action, never traffic)."""
        sent = stored.value
        if sent is None:
            return Outcome(stored.code, stored.remark, None, stored.reason)
        new_msg_id = sent.msg_ids[0] if sent.msg_ids else ""
        dead_id = record.uniq_key or record.offset_msg_id
        count = 1
        resends = self.resends
        if resends is not None:
            count = resends.record(group, record.physical_offset, dead_id, topic, new_msg_id, who)["count"]
        log.info("DLQ resend by %s: group %s, message %s (dead letter at commit-log offset %d) to %s as %s%s",
                 who, group, dead_id, record.physical_offset, topic, new_msg_id,
                 f" (resent {count} times)" if count > 1 else "")
        return Outcome(stored.code, stored.remark,
                       ResendResult(new_msg_id, topic, sent.queue_id, sent.queue_offset, sent.transaction_id, dead_id,
                                    count))

    def _find_dead_record(self, request: ResendRequest, dlq: str) -> MessageRecord | None:
        """By commit-log offset, offset message id, or UNIQ_KEY (newest copy in the DLQ)."""
        records = self.records
        if request.offset is not None:
            record = records.look_record(request.offset)
            return record if record is not None and record.topic == dlq else None
        msg_id = (request.msg_id or "").strip()
        if not msg_id:
            return None
        try:
            _, _, phys = decode_offset_msg_id(msg_id)
        except ValueError:
            phys = -1
        record = records.look_record(phys)
        if record is not None and record.topic == dlq:
            return record
        found = records.query_message(dlq, msg_id, 32, 0, 2**62)
        candidates = []
        for raw in found.records:
            try:
                candidate = decode_record(raw)
            except (RecordError, ValueError):
                continue
            if candidate.topic == dlq and candidate.uniq_key == msg_id:
                candidates.append(candidate)
        return max(candidates, key=lambda r: r.physical_offset) if candidates else None


def _send_back_answer(stored: Outcome[SendResult]) -> Outcome[SendResult]:
    """A send-back's answer to its store Outcome (reference §4.8 step 8): SUCCESS only when stored in time, else
    SYSTEM_ERROR with why (the put status's name for a copy stored late)."""
    if stored.ok or stored.code == ResponseCode.SYSTEM_ERROR:
        return stored
    return Outcome(int(ResponseCode.SYSTEM_ERROR), stored.remark, stored.value, stored.reason)


def resend_fields(outcome: Outcome) -> dict[str, str] | None:
    """A resend's answer fields, the same for the remoting answer and the console: the copy's ``msgId``, ``topic``,
    ``queueId``, ``queueOffset`` (and ``uniqKey``); for a letter resent before, ``resentAt``, ``resentBy`` and
    ``resentCount``; None for any other refusal."""
    value = outcome.value
    if outcome.reason == REASON_ALREADY_RESENT:
        return {"resentAt": str(value["at"]), "resentBy": value["by"], "resentCount": str(value["count"])}
    if not isinstance(value, ResendResult):
        return None
    fields = {"msgId": value.msg_id, "topic": value.topic, "queueId": str(value.queue_id),
              "queueOffset": str(value.queue_offset)}
    if value.uniq_key:
        fields["uniqKey"] = value.uniq_key
    return fields
