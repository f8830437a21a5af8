"""Recalling a timed message (RocketMQ 5.x RECALL_MESSAGE, 370): what ``Producer.recall_message`` sends, and where.

A send of a timed message (``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS`` properties) is answered with
a recall handle (``SendResult.recall_handle``). The handle names the broker that keeps the message: the recall goes to
that broker's master, found in the topic's route (protocol/recall.py reads the handle; an earlier release's handle
names the broker by the address in its offset message id)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from client.errors import MQBrokerError, MQClientError
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.ids import decode_offset_msg_id
from protocol.recall import parse_recall_handle

if TYPE_CHECKING:
    from client.instance import ClientInstance

__all__ = ["recall_timed_message"]


async def recall_timed_message(instance: "ClientInstance", group: str, topic: str, recall_handle: str,
                               timeout: float) -> str:
    """Send RECALL_MESSAGE for ``recall_handle`` of ``topic`` to the broker the handle names; the recalled message's
    id. MQClientError for a handle no broker gave out or a broker the route does not know; MQBrokerError with the
    broker's code and remark when it refuses (recall disabled, delivered or recalled already...)."""
    if topic.startswith(("%RETRY%", "%DLQ%")):
        raise MQClientError(f"topic {topic!r} is not supported: timed messages of retry and dead-letter topics cannot "
                            f"be recalled")
    try:
        handle = parse_recall_handle(recall_handle)
    except ValueError as exc:
        raise MQClientError(f"{exc}: {recall_handle[:80]!r}") from None
    if handle.broker_name:
        try:
            addr = await instance.find_master_addr(handle.broker_name, topic)
        except MQBrokerError:
            raise MQClientError(f"the broker {handle.broker_name!r} of the recall handle is not in the route of "
                                f"topic {topic!r}") from None
    else:  # an earlier release's handle: the offset message id holds the broker's address
        try:
            host, port, _ = decode_offset_msg_id(handle.offset_msg_id)
        except ValueError:
            raise MQClientError(f"recall handle is invalid: {recall_handle[:80]!r}") from None
        addr = f"{host}:{port}"
    fields = {"producerGroup": group, "topic": topic, "recallHandle": recall_handle}
    if handle.broker_name:
        fields["bname"] = handle.broker_name
    reply = await instance.invoke_broker(addr, RemotingCommand(code=RequestCode.RECALL_MESSAGE, ext_fields=fields),
                                         timeout)
    if reply.code != ResponseCode.SUCCESS:
        raise MQBrokerError(reply.code, reply.remark, addr)
    return (reply.ext_fields or {}).get("msgId") or handle.message_id
