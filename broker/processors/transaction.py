"""END_TRANSACTION (37) and this project's GET_PENDING_TRANSACTIONS (9002) — transactions.md §3.

Decisions are handled by broker.transaction.service.TransactionService: validation with the reference's remarks,
the committed message and the op record written before the answer (one-way requests get none), UNKNOWN changes
nothing and is never answered; a second decision for the same transaction is refused with a remark.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from broker.processors.base import BrokerProcessor
from broker.transaction.service import COMMIT, ROLLBACK, UNKNOWN
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import EndTransactionRequestHeader
from protocol.jsonlenient import dumps_compact
from protocol.requests import read_request

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger(__name__)


class TransactionProcessor(BrokerProcessor):
    def __init__(self, broker: "Broker") -> None:
        super().__init__(broker)
        self.service = broker.transaction_service

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.END_TRANSACTION: self.end_transaction,
            RequestCode.GET_PENDING_TRANSACTIONS: self.get_pending_transactions,
        }

    def end_transaction(self, channel: Any, cmd: RemotingCommand):
        header = read_request(cmd)
        decision = header.commit_or_rollback
        if decision not in (UNKNOWN, COMMIT, ROLLBACK):
            return cmd.make_response(ResponseCode.INVALID_PARAMETER,
                                     f"commitOrRollback must be 0 (UNKNOWN), 8 (COMMIT) or 12 (ROLLBACK), got {decision}")
        if not self.config.is_master:
            return cmd.make_response(ResponseCode.SLAVE_NOT_AVAILABLE, "a slave takes no transaction decisions")
        if decision == UNKNOWN:
            return None  # pending: nothing changes and nothing is answered, as the reference does
        return self._decide(cmd, header)

    async def _decide(self, cmd: RemotingCommand, header: EndTransactionRequestHeader) -> RemotingCommand:
        code, remark = await self.service.end_transaction(
            header.producer_group, header.tran_state_table_offset, header.commit_log_offset,
            header.commit_or_rollback, bool(header.from_transaction_check), wait=not cmd.flag & 2)
        if code != ResponseCode.SUCCESS and cmd.flag & 2:
            log.warning("END_TRANSACTION from producer group %s for %s refused: %s", header.producer_group,
                        header.msg_id, remark)
        return cmd.make_response(code, remark)

    def get_pending_transactions(self, channel: Any, cmd: RemotingCommand):
        body = {"brokerName": self.config.broker_name, "pending": self.service.pending(),
                "counters": dict(self.service.counters)}
        return cmd.make_response(ResponseCode.SUCCESS, None, None, dumps_compact(body))
