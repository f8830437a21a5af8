"""END_TRANSACTION (37) and this project's GET_PENDING_TRANSACTIONS (9002) — transactions.md §3: remoting frames to
and from the messaging core's typed end-transaction (broker/core/transaction.py), where the checks are made and the
transaction service decides. UNKNOWN changes nothing and is never answered; one-way requests get no answer either.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.core.outcome import Outcome, Requester
from broker.core.transaction import EndTransactionRequest, EndTransactionService
from broker.transaction.service import UNKNOWN
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.jsonlenient import dumps_compact
from protocol.requests import read_request

log = logging.getLogger(__name__)


class TransactionProcessor:
    """``service`` decides; ``transactions`` (the TransactionService) lists what is pending; ``broker_name`` names
    this broker in that listing."""

    def __init__(self, service: EndTransactionService, transactions: Any, broker_name: str) -> None:
        self.service = service
        self.transactions = transactions
        self.broker_name = broker_name

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.END_TRANSACTION: self.end_transaction,
            RequestCode.GET_PENDING_TRANSACTIONS: self.get_pending_transactions,
        }

    def end_transaction(self, channel: Any, cmd: RemotingCommand):
        header = read_request(cmd)
        request = EndTransactionRequest(header.producer_group, header.tran_state_table_offset,
                                        header.commit_log_offset, header.commit_or_rollback,
                                        bool(header.from_transaction_check), Requester(channel.remote_addr),
                                        header.transaction_id, wait=not cmd.flag & 2)
        result = self.service.end(request)
        if type(result) is Outcome:
            if result.ok and request.decision == UNKNOWN:
                return None  # pending: nothing changes and nothing is answered, as the reference does
            return cmd.make_response(result.code, result.remark or None)
        return self._answer_later(cmd, header, result)

    async def _answer_later(self, cmd: RemotingCommand, header: Any, pending: Any) -> RemotingCommand:
        outcome = await pending
        if not outcome.ok and cmd.flag & 2:
            log.warning("END_TRANSACTION from producer group %s for %s refused: %s", header.producer_group,
                        header.msg_id, outcome.remark)
        return cmd.make_response(outcome.code, outcome.remark or None)

    def get_pending_transactions(self, channel: Any, cmd: RemotingCommand):
        body = {"brokerName": self.broker_name, "pending": self.transactions.pending(),
                "counters": dict(self.transactions.counters)}
        return cmd.make_response(0, None, None, dumps_compact(body))
