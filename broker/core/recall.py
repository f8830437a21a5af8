"""RECALL in the messaging core: a typed RecallRequest in, one Outcome (the recalled message's id) out, whichever
protocol brought it — a 5.x SDK's RecallMessage over gRPC or a RECALL_MESSAGE (370) over remoting.

A timed message waits in the timer topic until its time (broker/timer); a recall cancels it there, so it is never
delivered. The handle (protocol/recall.py) is what the send of that message was answered with: ``handle_for`` builds
it for both front ends. The checks follow the reference's RecallMessageProcessor, in its order: recall enabled
(``recallMessageEnable``), a master, the broker writable unless ``allowRecallWhenBrokerNotWriteable``, the topic
known, the handle readable and naming this topic and this broker; then the record it names must be the message of
that topic still waiting (else REASON_NOT_FOUND: delivered, recalled already, or never sent here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from broker.acl.accounts import PUB
from broker.acl.authorizer import Needs
from broker.acl.resources import topic_resource
from broker.core.outcome import Outcome, Requester
from broker.managers.topic_config import TIMER_TOPIC
from protocol.codes import PERM_WRITE, ResponseCode
from protocol.ids import decode_offset_msg_id
from protocol.recall import build_recall_handle, parse_recall_handle

__all__ = ["REASON_HANDLE", "REASON_NOT_FOUND", "RecallRequest", "RecallService"]

# Outcome.reason of refusals: the handle cannot be read or names another topic or broker (gRPC: BAD_REQUEST), or the
# message it names is not waiting here (gRPC: NOT_FOUND)
REASON_HANDLE = "recall_handle"
REASON_NOT_FOUND = "not_found"
_NOT_AVAILABLE = "recall failed, broker service not available"


class TopicLookup(Protocol):
    def get(self, topic: str) -> Any: ...


class RecordLookup(Protocol):
    """The store, as a recall reads it: a record by its commit-log offset."""

    def look_record(self, phys_offset: int) -> Any: ...


class TimedRecall(Protocol):
    """The 5.x timer: cancels a waiting record (False when it was delivered or recalled already)."""

    def recall(self, record: Any) -> bool: ...


@dataclass(frozen=True, slots=True)
class RecallRequest:
    """Cancel the timed message ``handle`` names, of ``topic``."""

    topic: str
    handle: str
    producer_group: str = ""
    requester: Requester | None = None

    def needs(self) -> Needs:
        """PUB on the topic, as the reference's RECALL_MESSAGE (Action.PUB)."""
        return [topic_resource(self.topic, PUB)]


class RecallService:
    """Built with ``config`` (read live: the switches, role, permission and broker name), the topic registry, the
    store's record lookup and the timer."""

    def __init__(self, config: Any, topics: TopicLookup, records: RecordLookup, timer: TimedRecall) -> None:
        self.config = config
        self.topics = topics
        self.records = records
        self.timer = timer

    def handle_for(self, topic: str, deliver_ms: int, message_id: str, offset_msg_id: str) -> str:
        """The recall handle a send of a timed message is answered with (SendResult.timed = its delivery time)."""
        return build_recall_handle(topic, self.config.broker_name, deliver_ms, message_id, offset_msg_id)

    def recall(self, request: RecallRequest) -> Outcome[str]:
        config = self.config
        if not config.recall_message_enable:
            return Outcome.refused(ResponseCode.NO_PERMISSION,
                                   "recall failed, operation is forbidden (recallMessageEnable=false)")
        if config.broker_role == "SLAVE":
            return Outcome.refused(ResponseCode.SLAVE_NOT_AVAILABLE, _NOT_AVAILABLE)
        if not config.broker_permission & PERM_WRITE and not config.allow_recall_when_broker_not_writeable:
            return Outcome.refused(ResponseCode.SERVICE_NOT_AVAILABLE, _NOT_AVAILABLE)
        topic = request.topic
        if self.topics.get(topic) is None:
            return Outcome.refused(ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist")
        try:
            handle = parse_recall_handle(request.handle)
        except ValueError as exc:
            return Outcome.refused(ResponseCode.ILLEGAL_OPERATION, f"recall failed, {exc}: {request.handle[:80]!r}",
                                   REASON_HANDLE)
        if handle.topic and handle.topic != topic:
            return Outcome.refused(ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match", REASON_HANDLE)
        if handle.broker_name and handle.broker_name != config.broker_name:
            return Outcome.refused(ResponseCode.ILLEGAL_OPERATION,
                                   f"recall failed, the handle names broker {handle.broker_name!r}, this is "
                                   f"{config.broker_name!r}", REASON_HANDLE)
        try:
            phys = decode_offset_msg_id(handle.offset_msg_id)[2]
        except ValueError:
            return Outcome.refused(ResponseCode.ILLEGAL_OPERATION,
                                   f"recall failed, the handle {request.handle[:80]!r} is not one this broker gave out",
                                   REASON_HANDLE)
        message_id = handle.message_id
        record = self.records.look_record(phys)
        if record is None or record.topic != TIMER_TOPIC or record.properties.get("REAL_TOPIC") != topic \
                or record.properties.get("UNIQ_KEY") != message_id:
            return Outcome.refused(ResponseCode.ILLEGAL_OPERATION, f"recall failed, no timed message {message_id} of "
                                   f"{topic}", REASON_NOT_FOUND)
        if not self.timer.recall(record):
            return Outcome.refused(ResponseCode.ILLEGAL_OPERATION, f"recall failed, the timed message {message_id} "
                                   f"was delivered or recalled already", REASON_NOT_FOUND)
        return Outcome.success(message_id)
