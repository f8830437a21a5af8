"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) — reference §4.3 — and RECALL_MESSAGE (370):
remoting frames to and from the messaging core's typed send (broker/core/send.py), where every check is made and the
store written, and its recall (broker/core/recall.py). A timed message's answer carries its ``recallHandle``.

Decoded here: the request header (the object the ACL guard already read), the body, the batch body's entries, the
born host from the connection. Answered here: the core's Outcome as a response frame (a pre-encoded template for
SUCCESS). The ASYNC_FLUSH single send completes without creating a coroutine, and pipelined single sends read together
are handed to the core as one run (one append per queue).
"""

from __future__ import annotations

from typing import Any

from broker.core.outcome import Outcome, Requester
from broker.core.recall import RecallRequest, RecallService
from broker.core.send import STORED_CODES, Message, SendRequest, SendService
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, ResponseTemplate
from protocol.headers import SendMessageRequestHeader
from protocol.ids import pack_host
from protocol.recall import RecallMessageRequestHeader
from protocol.message import RecordError, iter_batch_entries
from protocol.requests import read_request

_SUCCESS = int(ResponseCode.SUCCESS)
_LOOPBACK = pack_host("127.0.0.1", 0)


class SendProcessor:
    """Translates send frames for ``service`` (its config gives the answer's MSG_REGION / TRACE_ON) and recall frames
    for ``recall``."""

    def __init__(self, service: SendService, recall: RecallService) -> None:
        self.service = service
        self.recall = recall
        self._region = service.region
        self._trace = "true" if service.trace_on else "false"
        self._ok_templates: dict[tuple[int, bool], ResponseTemplate] = {}  # (serialize type, with transactionId)

    def refresh_role(self) -> None:
        """The role changed (controller mode): the core reads it again."""
        self.service.refresh_role()

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.SEND_MESSAGE: self.send_message,
            RequestCode.SEND_MESSAGE_V2: self.send_message,
            RequestCode.SEND_BATCH_MESSAGE: self.send_batch_message,
            RequestCode.RECALL_MESSAGE: self.recall_message,
        }

    def run_handlers(self) -> dict[int, Any]:
        """Pipelined single sends read together are stored as one batch per queue (see send_run)."""
        return {
            RequestCode.SEND_MESSAGE: self.send_run,
            RequestCode.SEND_MESSAGE_V2: self.send_run,
        }

    # ---- decoding ----------------------------------------------------------------------------
    @staticmethod
    def _peer(channel: Any) -> tuple[Requester, bytes]:
        """The connection's requester and packed born host, made once per connection."""
        attrs = channel.attrs
        known = attrs.get("send_peer")
        if known is None:
            try:
                born_host = pack_host(channel.remote_host, channel.remote_port)
            except ValueError:
                born_host = _LOOPBACK
            known = attrs["send_peer"] = (Requester(channel.remote_addr, "remoting"), born_host)
        return known

    def _request(self, channel: Any, cmd: RemotingCommand, header: SendMessageRequestHeader) -> SendRequest:
        requester, born_host = self._peer(channel)
        message = Message(cmd.body, header.properties or "", None, header.flag or 0, header.sys_flag or 0,
                          header.born_timestamp or 0, born_host, header.reconsume_times or 0)
        return SendRequest(header.topic, (message,), header.queue_id, header.producer_group, requester,
                           header.default_topic, header.default_topic_queue_nums or 4,
                           header.max_reconsume_times if cmd.version >= 121 else None)

    # ---- answering ---------------------------------------------------------------------------
    def _answer(self, cmd: RemotingCommand, outcome: Outcome, batch: bool = False) -> RemotingCommand | bytes:
        value = outcome.value
        code = outcome.code
        if code == _SUCCESS and not value.timed:
            msg_id = ",".join(value.msg_ids) if batch else value.msg_ids[0]
            return self._ok_frame(cmd, msg_id, value.queue_id, value.queue_offset, value.transaction_id)
        if code in STORED_CODES and value is not None:  # a timed message, or stored but a flush or a slave was late
            ext = {"msgId": ",".join(value.msg_ids) if batch else value.msg_ids[0], "queueId": str(value.queue_id),
                   "queueOffset": str(value.queue_offset), "MSG_REGION": self._region, "TRACE_ON": self._trace}
            if value.transaction_id:
                ext["transactionId"] = value.transaction_id
            if value.timed and not batch:  # as the reference: not for batches (nor send-backs, not answered here)
                ext["recallHandle"] = self.recall.handle_for(read_request(cmd).topic, value.timed,
                                                             value.transaction_id or "", value.msg_ids[0])
            return cmd.make_response(code, outcome.remark, ext)
        return cmd.make_response(code, outcome.remark, {"MSG_REGION": self._region, "TRACE_ON": self._trace})

    def _result(self, cmd: RemotingCommand, result: Any, batch: bool = False) -> Any:
        """An Outcome answered now; an awaitable answered when it completes."""
        if type(result) is Outcome:
            return self._answer(cmd, result, batch)
        return self._answer_later(cmd, result, batch)

    async def _answer_later(self, cmd: RemotingCommand, pending: Any, batch: bool) -> RemotingCommand | bytes:
        return self._answer(cmd, await pending, batch)

    def _ok_frame(self, cmd: RemotingCommand, msg_id: str, queue_id: int, queue_offset: int,
                  transaction_id: str | None) -> bytes:
        """The SUCCESS answer as a pre-encoded frame: the same bytes the general encoder would produce."""
        key = (cmd.serialize_type, bool(transaction_id))
        template = self._ok_templates.get(key)
        if template is None:
            items = [("msgId", None), ("queueId", None), ("queueOffset", None), ("MSG_REGION", self._region),
                     ("TRACE_ON", self._trace)]
            if transaction_id:
                items.append(("transactionId", None))
            template = self._ok_templates[key] = ResponseTemplate(cmd.serialize_type, ResponseCode.SUCCESS, items)
        if transaction_id:
            return template.encode(cmd.opaque, msg_id, str(queue_id), str(queue_offset), transaction_id)
        return template.encode(cmd.opaque, msg_id, str(queue_id), str(queue_offset))

    # ---- handlers ----------------------------------------------------------------------------
    def send_message(self, channel: Any, cmd: RemotingCommand):
        return self._result(cmd, self.service.send(self._request(channel, cmd, read_request(cmd))))

    def send_run(self, channel: Any, cmds: list[RemotingCommand]) -> list[Any]:
        """Single sends read together from one connection, handed to the core as one run. Returns one result per
        request, as the single handler would (an exception object where one raised). The per-request work here is
        kept to the decoding and the answer (the connection's requester is looked up once per run)."""
        requester, born_host = self._peer(channel)
        requests: list[SendRequest] = []
        decoded: list[Any] = []  # per command: its index among requests, or the exception decoding raised
        for cmd in cmds:
            try:
                header = read_request(cmd)
                message = Message(cmd.body, header.properties or "", None, header.flag or 0, header.sys_flag or 0,
                                  header.born_timestamp or 0, born_host, header.reconsume_times or 0)
                requests.append(SendRequest(header.topic, (message,), header.queue_id, header.producer_group,
                                            requester, header.default_topic, header.default_topic_queue_nums or 4,
                                            header.max_reconsume_times if cmd.version >= 121 else None))
                decoded.append(len(requests) - 1)
            except Exception as exc:  # noqa: BLE001 - answered per request by the server
                decoded.append(exc)
        outcomes = self.service.send_run(requests)
        results: list[Any] = []
        ok_frame = self._ok_frame
        for cmd, where in zip(cmds, decoded):
            if type(where) is not int:
                results.append(where)
                continue
            result = outcomes[where]
            if type(result) is Outcome and result.code == _SUCCESS and not result.value.timed:  # the usual answer
                value = result.value
                results.append(ok_frame(cmd, value.msg_ids[0], value.queue_id, value.queue_offset,
                                        value.transaction_id))
            else:
                results.append(result if isinstance(result, BaseException) else self._result(cmd, result))
        return results

    def recall_message(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        """RECALL_MESSAGE: the core's recall, answered with the recalled message's id (``msgId``)."""
        header: RecallMessageRequestHeader = read_request(cmd)
        outcome = self.recall.recall(RecallRequest(header.topic, header.recall_handle, header.producer_group or "",
                                                   self._peer(channel)[0]))
        if outcome.ok:
            return cmd.make_response(_SUCCESS, None, {"msgId": outcome.value})
        return cmd.make_response(outcome.code, outcome.remark)

    def send_batch_message(self, channel: Any, cmd: RemotingCommand):
        header = read_request(cmd)
        requester, born_host = self._peer(channel)
        flag_sys, born, reconsume = header.sys_flag or 0, header.born_timestamp or 0, header.reconsume_times or 0
        try:
            messages = [Message(body, None, None, flag, flag_sys, born, born_host, reconsume, raw_props)
                        for flag, body, raw_props in iter_batch_entries(cmd.body)]
        except RecordError as exc:
            return cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, f"malformed batch body: {exc}",
                                     {"MSG_REGION": self._region, "TRACE_ON": self._trace})
        request = SendRequest(header.topic, messages, header.queue_id, header.producer_group, requester,
                              header.default_topic, header.default_topic_queue_nums or 4, None, True,
                              header.properties, flag_sys)
        return self._result(cmd, self.service.send(request), batch=True)
