"""Recall handles and the RECALL_MESSAGE headers (RocketMQ 5.x: cancel a timed message before its time).

A send of a timed message is answered with a recall handle (the remoting answer's ``recallHandle``, the gRPC entry's
``recall_handle``); RecallMessage names it back. The reference's handle, version 1, is the base64url text of
``v1 <topic> <brokerName> <deliverMs> <messageId>``: clients read only the broker name, to know where to send the
recall, and pass the rest back unread. This broker appends a sixth field, the offset message id of the record
waiting in the timer, so that it finds the record directly (the reference's decoder ignores fields past the fifth).
Handles of this broker's earlier releases, ``<offset msgId> <messageId>``, still parse.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from protocol.headers import F, Header

__all__ = ["RecallHandle", "RecallMessageRequestHeader", "RecallMessageResponseHeader", "build_recall_handle",
           "parse_recall_handle"]

_VERSION_1 = "v1"


@dataclass(frozen=True, slots=True)
class RecallHandle:
    """A parsed handle; ``topic`` and ``broker_name`` are empty in an earlier release's handle, ``offset_msg_id``
    empty in a handle without the sixth field."""

    topic: str
    broker_name: str
    deliver_ms: int
    message_id: str
    offset_msg_id: str


def build_recall_handle(topic: str, broker_name: str, deliver_ms: int, message_id: str, offset_msg_id: str) -> str:
    """The handle a send of a timed message is answered with."""
    raw = " ".join((_VERSION_1, topic, broker_name, str(deliver_ms), message_id, offset_msg_id))
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii")


def parse_recall_handle(text: str) -> RecallHandle:
    """The handle's fields; ValueError("recall handle is invalid") for text no broker gave out."""
    if not text:
        raise ValueError("recall handle is invalid")
    if " " in text:  # an earlier release's handle: base64url has no spaces
        offset_msg_id, _, message_id = text.partition(" ")
        if not offset_msg_id or not message_id:
            raise ValueError("recall handle is invalid")
        return RecallHandle("", "", 0, message_id, offset_msg_id)
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii") + b"=" * (-len(text) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        raise ValueError("recall handle is invalid") from None
    items = raw.split(" ")
    if len(items) < 5 or items[0] != _VERSION_1:
        raise ValueError("recall handle is invalid")
    try:
        deliver_ms = int(items[3])
    except ValueError:
        deliver_ms = -1  # the reference checks the time only as a number; an unreadable one is in the past
    return RecallHandle(items[1], items[2], deliver_ms, items[4], items[5] if len(items) > 5 else "")


class RecallMessageRequestHeader(Header):
    producer_group = F("producerGroup", str)
    topic = F("topic", str, required=True)
    recall_handle = F("recallHandle", str, required=True)
    broker_name = F("bname", str)


class RecallMessageResponseHeader(Header):
    msg_id = F("msgId", str, required=True)
