"""QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15) — reference §4.5 — and INVOKE_BROKER_TO_RESET_OFFSET
(222) over remoting: header -> the core's typed request (broker/core/offsets.py) -> Outcome -> RemotingCommand.

The checks and the offsets themselves are the core's :class:`~broker.core.offsets.OffsetService`. What stays here is
remoting's: Java clients send updates one-way, so a refused update is also logged (rate-limited) — nobody else would
ever see it — and a reset is told to the group's online consumers as RESET_CONSUMER_CLIENT_OFFSET frames.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.clients import tell_offset_reset
from broker.core.offsets import OffsetService, QueryConsumerOffset, ResetOffset, ResetResult, UpdateConsumerOffset
from broker.core.outcome import Outcome
from broker.log_limit import RateLimitedLog
from broker.managers.consumer_manager import ConsumerManager
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.requests import read_request

log = logging.getLogger(__name__)
_refusals = RateLimitedLog(log)


class ConsumerOffsetProcessor:
    """Committed offsets over remoting: translated for the core; a reset also tells the group's online consumers."""

    def __init__(self, offsets: OffsetService, consumers: ConsumerManager, broker_name: str) -> None:
        self.offsets = offsets
        self.consumers = consumers
        self.broker_name = broker_name

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
        }

    def query_consumer_offset(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        outcome = self.offsets.query(QueryConsumerOffset(header.consumer_group, header.topic, header.queue_id,
                                                         header.set_zero_if_not_found is not False))
        if not outcome.ok:
            return cmd.make_response(outcome.code, outcome.remark)
        return cmd.make_response(ResponseCode.SUCCESS, None, {"offset": str(outcome.value)})

    def update_consumer_offset(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        outcome = self.offsets.update(UpdateConsumerOffset(header.consumer_group, header.topic, header.queue_id,
                                                           header.commit_offset, getattr(channel, "remote_addr", None)))
        if not outcome.ok:
            _refusals.warning(("update-offset", outcome.code), "consumer offset update from %s refused (code %d): %s",
                              getattr(channel, "remote_addr", "?"), outcome.code, outcome.remark)
            return cmd.make_response(outcome.code, outcome.remark)
        return cmd.make_response(ResponseCode.SUCCESS)

    async def reset_offset(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        """Move a group's offsets on a topic to the first message stored at or after `timestamp` (-1: the end).

        As the reference broker: per queue the new offset is taken when `isForce` or when it is behind the committed
        one, and every online consumer of the group is sent RESET_CONSUMER_CLIENT_OFFSET with the table (it drops
        the queues and resumes there). Unlike it, the committed offsets are also written (persisted before the
        answer, by the core), so a group with nobody online is reset too instead of being refused with
        CONSUMER_NOT_ONLINE. The answer carries the table (ResetOffsetBody) and ``online`` = how many consumers
        were told."""
        header = read_request(cmd)
        requester = getattr(channel, "remote_addr", "?")
        outcome: Outcome[ResetResult] = await self.offsets.reset(
            ResetOffset(header.group, header.topic, header.timestamp, bool(header.is_force), requester))
        result = outcome.value
        if result is None:
            return cmd.make_response(outcome.code, outcome.remark)
        _table, body, told = tell_offset_reset(self.consumers, self.broker_name, result)
        log.info("offsets of group %s on topic %s reset to %s by %s (timestamp %d, %d consumer(s) told)",
                 result.group, result.topic, result.offsets, requester, result.timestamp, told)
        return cmd.make_response(ResponseCode.SUCCESS, None, {"online": str(told)}, body)
