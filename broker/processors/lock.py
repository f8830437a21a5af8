"""LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) — reference §4.9 (orderly consumers)."""

from __future__ import annotations

from typing import Any

from broker.managers.rebalance_lock import RebalanceLockManager
from broker.managers.topic_config import validate_group
from protocol.bodies import LockBatchResponseBody
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import HeaderError
from protocol.requests import read_request


class LockProcessor:
    """Grants and releases per-queue locks through the broker's RebalanceLockManager."""

    def __init__(self, locks: RebalanceLockManager) -> None:
        self.locks = locks

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.LOCK_BATCH_MQ: self.lock_batch_mq,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch_mq,
        }

    def lock_batch_mq(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        try:
            request = read_request(cmd)
        except HeaderError as exc:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, str(exc))
        problem = validate_group(request.consumer_group)
        if problem is not None:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"consumerGroup: {problem}")
        granted = self.locks.try_lock_batch(request.consumer_group, request.mq_set, request.client_id)
        return cmd.make_response(ResponseCode.SUCCESS, None, None, LockBatchResponseBody(granted).encode())

    def unlock_batch_mq(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        try:
            request = read_request(cmd)
        except HeaderError as exc:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, str(exc))
        problem = validate_group(request.consumer_group)
        if problem is not None:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"consumerGroup: {problem}")
        self.locks.unlock_batch(request.consumer_group, request.mq_set, request.client_id)
        return cmd.make_response(ResponseCode.SUCCESS)
