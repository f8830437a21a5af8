"""Admin requests the broker relays to one consumer: GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309).

As in the reference broker, mqadmin sends the request to a broker with ``consumerGroup`` and ``clientId``; the broker
finds that client's connection among the group's, forwards the request on it (for 309 with the message, read from the
commit log by its offset message id, as the body) and relays the client's answer. A client that is not connected, a
group the broker does not know, or a client that does not answer in time gets SYSTEM_ERROR with a remark saying so.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from broker.managers.consumer_manager import ConsumerManager
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.ids import decode_offset_msg_id
from protocol.requests import read_request

if TYPE_CHECKING:
    from broker.store.message_store import MessageStore

CALL_CLIENT_TIMEOUT_S = 10.0  # the reference's Broker2Client timeout


class ClientCallProcessor:
    """Finds the client's connection among its group's and relays the request on it."""

    def __init__(self, consumers: ConsumerManager, store: "MessageStore", broker_name: str) -> None:
        self.consumers = consumers
        self.store = store
        self.broker_name = broker_name

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.get_consumer_running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_message_directly,
        }

    def _client_channel(self, cmd: RemotingCommand) -> tuple[Any, RemotingCommand | None]:
        header = read_request(cmd)
        group, client_id = header.consumer_group, header.client_id
        if not group or not client_id:
            return None, cmd.make_response(ResponseCode.SYSTEM_ERROR, "consumerGroup and clientId are required")
        info = self.consumers.get_group(group)
        if info is None:
            return None, cmd.make_response(ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{group}> not exist")
        client = info.clients.get(client_id)
        if client is None or getattr(client.channel, "closed", False):
            return None, cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                           f"The Consumer <{group}> <{client_id}> not online")
        return client.channel, None

    async def _call(self, channel: Any, cmd: RemotingCommand, body: bytes | None) -> RemotingCommand:
        fields = dict(cmd.ext_fields or {})
        request = RemotingCommand.request(cmd.code, fields, body if body is not None else cmd.body, opaque=0)
        try:
            reply = await channel.invoke(request, CALL_CLIENT_TIMEOUT_S)
        except (asyncio.TimeoutError, TimeoutError):
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"invoke consumer <{fields.get('consumerGroup')}> <{fields.get('clientId')}> "
                                     f"timed out after {CALL_CLIENT_TIMEOUT_S:.0f} s")
        except (ConnectionError, OSError) as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"invoke consumer <{fields.get('consumerGroup')}> <{fields.get('clientId')}> "
                                     f"failed: {exc}")
        return cmd.make_response(reply.code, reply.remark, dict(reply.ext_fields or {}) or None, reply.body or b"")

    def get_consumer_running_info(self, channel: Any, cmd: RemotingCommand):
        client_channel, refusal = self._client_channel(cmd)
        if refusal is not None:
            return refusal
        return self._call(client_channel, cmd, None)

    def consume_message_directly(self, channel: Any, cmd: RemotingCommand):
        client_channel, refusal = self._client_channel(cmd)
        if refusal is not None:
            return refusal
        msg_id = read_request(cmd).msg_id or ""
        try:
            _, _, phys = decode_offset_msg_id(msg_id)
        except ValueError:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"msgId {msg_id!r} is not an offset message id (32 hex digits naming this "
                                     "broker and a commit-log offset)")
        raw = self.store.look_message_by_offset(phys) if phys >= 0 else None
        if not raw:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"no message at commit-log offset {phys} ({msg_id})")
        cmd.ext_fields = dict(cmd.ext_fields or {}, brokerName=self.broker_name)
        return self._call(client_channel, cmd, bytes(raw))
