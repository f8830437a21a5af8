"""Consumption retry family: CONSUMER_SEND_MSG_BACK (36, reference §4.8), GET_ALL_DELAY_OFFSET (45)
and the project extension RESEND_DLQ_MESSAGE (9001).

Send-backs and dead-letter resends are the messaging core's (broker/core/send_back.py: where the copy goes, the
retry and dead-letter rule, stored as a send is, with its in-sync, flush and replication waits); this processor only
translates the remoting headers into its typed requests and the Outcomes back into responses.

Listing a DLQ needs no special request: it is the ordinary topic ``%DLQ%<group>`` with one queue,
readable with GET_MIN_OFFSET/GET_MAX_OFFSET (31/30) and PULL_MESSAGE (11) on queue 0, and searchable
by key with QUERY_MESSAGE (12). RESEND_DLQ_MESSAGE puts one dead message back on its original topic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.core.outcome import Outcome, Requester
from broker.core.send_back import REASON_ALREADY_RESENT, ResendRequest, SendBackRequest, resend_fields
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.requests import read_request

if TYPE_CHECKING:
    from broker.core.send_back import SendBackService
    from broker.schedule.service import ScheduleMessageService

MIN_VERSION_WITH_MAX_RECONSUME_TIMES = 121  # V3_4_9: older clients' maxReconsumeTimes is ignored


class RetryProcessor:
    """``core``: the send-back service (broker/core/send_back.py); ``schedule``: the delay levels' progress."""

    def __init__(self, core: "SendBackService", schedule: "ScheduleMessageService") -> None:
        self.core = core
        self.schedule = schedule

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.CONSUMER_SEND_MSG_BACK: self.consumer_send_msg_back,
            RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            RequestCode.RESEND_DLQ_MESSAGE: self.resend_dlq_message,
        }

    @staticmethod
    def _requester(channel: Any, cmd: RemotingCommand) -> Requester:
        return Requester(getattr(channel, "remote_addr", "?"), "remoting",
                         access_key=(cmd.ext_fields or {}).get("AccessKey"))

    # ---- CONSUMER_SEND_MSG_BACK ---------------------------------------------------------------
    def consumer_send_msg_back(self, channel: Any, cmd: RemotingCommand):
        header = read_request(cmd)
        max_times = header.max_reconsume_times
        if max_times is not None and (max_times < 0 or cmd.version < MIN_VERSION_WITH_MAX_RECONSUME_TIMES):
            max_times = None  # the group's
        request = SendBackRequest(header.group, header.offset, header.delay_level, max_times,
                                  self._requester(channel, cmd))
        result = self.core.send_back(request)
        if type(result) is Outcome:
            return self._send_back_response(cmd, result)
        return self._send_back_later(cmd, result)

    @staticmethod
    def _send_back_response(cmd: RemotingCommand, outcome: Outcome) -> RemotingCommand:
        if outcome.ok:
            return cmd.make_response(ResponseCode.SUCCESS)
        return cmd.make_response(outcome.code, outcome.remark)

    async def _send_back_later(self, cmd: RemotingCommand, pending: Any) -> RemotingCommand:
        return self._send_back_response(cmd, await pending)

    # ---- GET_ALL_DELAY_OFFSET -----------------------------------------------------------------
    def get_all_delay_offset(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, None, None, self.schedule.encode_json())

    # ---- RESEND_DLQ_MESSAGE (project extension) -----------------------------------------------
    def resend_dlq_message(self, channel: Any, cmd: RemotingCommand):
        header = read_request(cmd)
        request = ResendRequest(header.group, header.offset, header.msg_id, header.topic,
                                bool(header.to_original_topic), header.queue_id, bool(header.force),
                                self._requester(channel, cmd))
        result = self.core.resend(request)
        if type(result) is Outcome:
            return self._resend_response(cmd, result)
        return self._resend_later(cmd, result)

    @staticmethod
    def _resend_response(cmd: RemotingCommand, outcome: Outcome) -> RemotingCommand:
        fields = resend_fields(outcome)
        if fields is None or outcome.reason == REASON_ALREADY_RESENT:
            return cmd.make_response(outcome.code, outcome.remark, fields)
        return cmd.make_response(outcome.code, None if outcome.ok else outcome.remark, fields)

    async def _resend_later(self, cmd: RemotingCommand, pending: Any) -> RemotingCommand:
        return self._resend_response(cmd, await pending)
