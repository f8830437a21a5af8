"""RESEND_DLQ_MESSAGE (this project's extension) in the messaging core: one dead letter of ``%DLQ%<group>`` put back,
by default through the group's retry topic (only that group consumes it again; the original topic would hand a
duplicate to every other group subscribed to it), with an audit of who resent what, when and where to."""

from __future__ import annotations

import logging
import random
import time
from typing import Any

from broker.core.admin.requests import ResendDeadLetterRequest, who
from broker.core.outcome import Outcome
from broker.managers.topic_config import DLQ_GROUP_TOPIC_PREFIX, retry_topic, validate_group
from broker.store.types import PutResult, message_from_record
from protocol.codes import PERM_WRITE, ResponseCode
from protocol.ids import decode_offset_msg_id
from protocol.message import MessageRecord, RecordError, decode_record

__all__ = ["DeadLetterResender", "RESEND_CLEARED_PROPERTIES"]

log = logging.getLogger(__name__)

PROP_RETRY_TOPIC = "RETRY_TOPIC"
PROP_CLUSTER = "CLUSTER"
# Cleared when a dead message is re-sent as a fresh message (retry/delay bookkeeping of its old life).
RESEND_CLEARED_PROPERTIES = ("RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "DELAY", "REAL_TOPIC", "REAL_QID",
                             "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC",
                             "TIMER_DELAY_MS")


class DeadLetterResender:
    """``config`` (the cluster name stamped on the copy), ``store`` (look the letter up, put the copy), ``topics`` /
    ``groups`` (the target topic, the group's retry topic created on demand), ``resends`` (the audit, None: none)."""

    def __init__(self, config: Any, store: Any, topics: Any, groups: Any, resends: Any = None) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.resends = resends
        self._random = random.Random()

    def find(self, request: ResendDeadLetterRequest, dlq: str) -> MessageRecord | None:
        """By commit-log offset, offset message id, or UNIQ_KEY (newest copy in the DLQ)."""
        if request.offset is not None:
            record = self.store.look_record(request.offset)
            return record if record is not None and record.topic == dlq else None
        msg_id = (request.msg_id or "").strip()
        if not msg_id:
            return None
        try:
            _, _, phys = decode_offset_msg_id(msg_id)
        except ValueError:
            phys = -1
        record = self.store.look_record(phys)
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

    def resend(self, request: ResendDeadLetterRequest) -> Outcome | Any:
        """A refusal now, or an awaitable of the Outcome whose value is the copy's ``msgId``, ``topic``, ``queueId``,
        ``queueOffset`` (and ``uniqKey``), as the remoting answer's fields. The refusal of a letter resent before
        (reason ``"resent"``) carries ``resentAt``, ``resentBy`` and ``resentCount`` as its value."""
        group = request.group
        problem = validate_group(group)
        if problem is not None:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, f"group: {problem}", "group")
        if request.offset is None and not request.msg_id:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, "either 'offset' or 'msgId' is required")
        dlq = DLQ_GROUP_TOPIC_PREFIX + group
        record = self.find(request, dlq)
        if record is None:
            which = request.offset if request.offset is not None else request.msg_id
            return Outcome.refused(ResponseCode.QUERY_NOT_FOUND, f"no message {which} in {dlq}")
        resends = self.resends
        earlier = resends.last(group, record.physical_offset) if resends is not None else None
        if earlier is not None and not request.force:
            # resending twice delivers the message twice: only on purpose
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(earlier["at"] / 1000))
            refusal: Outcome = Outcome.refused(
                ResponseCode.INVALID_PARAMETER,
                f"dead letter {record.uniq_key or record.offset_msg_id} of group {group} was already resent "
                f"to {earlier['target']} at {when} by {earlier['by']} ({earlier['count']} time(s)); resend it again "
                "with force=true", "resent")
            refusal.value = {"resentAt": str(earlier["at"]), "resentBy": earlier["by"],
                             "resentCount": str(earlier["count"])}
            return refusal
        properties = dict(record.properties)
        original = properties.get(PROP_RETRY_TOPIC) or properties.get("REAL_TOPIC")
        if not request.topic and not request.to_original_topic:
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
            return Outcome.refused(ResponseCode.NO_PERMISSION, f"the topic[{target}] sending message is forbidden",
                                   "topic")
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
        return self._stored(self.store.put_message(message), group, record, target, queue_id, message.uniq_key,
                            who(request.requester))

    async def _stored(self, put: Any, group: str, record: MessageRecord, topic: str, queue_id: int,
                      uniq_key: str | None, by: str) -> Outcome[dict[str, str]]:
        result: PutResult = await put
        if not result.ok:
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, result.status.name)
        new_msg_id = result.msg_ids[0] if result.msg_ids else ""
        fields = {"msgId": new_msg_id, "topic": topic, "queueId": str(queue_id),
                  "queueOffset": str(result.queue_offset)}
        if uniq_key:
            fields["uniqKey"] = uniq_key
        dead_id = record.uniq_key or record.offset_msg_id
        count = 1
        if self.resends is not None:
            count = self.resends.record(group, record.physical_offset, dead_id, topic, new_msg_id, by)["count"]
        # the audit line: one per resend (an operator's action, never per message of the traffic)
        log.info("DLQ resend by %s: group %s, message %s (dead letter at commit-log offset %d) to %s as %s%s",
                 by, group, dead_id, record.physical_offset, topic, new_msg_id,
                 f" (resent {count} times)" if count > 1 else "")
        return Outcome.success(fields)
