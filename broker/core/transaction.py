"""END_TRANSACTION in the messaging core (transactions.md §3): a typed EndTransactionRequest in, one Outcome out,
whichever protocol brought it.

The decision itself (the committed message and the op record written before the answer, a second decision refused)
is the transaction service's (broker/transaction/service.py); here are the checks every protocol shares: a known
decision, a master to take it, and — when the request names them (a gRPC EndTransaction does) — that the half record
at the offset is of the topic and the message the producer says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.acl.accounts import PUB
from broker.acl.authorizer import Needs
from broker.acl.resources import RecordTopics, end_transaction_needs, topic_resource
from broker.core.outcome import Outcome, Requester
from broker.transaction.half import HALF_TOPIC
from broker.transaction.service import COMMIT, ROLLBACK, UNKNOWN
from protocol.codes import ResponseCode

__all__ = ["EndTransactionRequest", "EndTransactionService", "REASON_NOT_THIS_TRANSACTION", "REASON_WRITE_FAILED"]

# Outcome.reason of refusals: the half record does not match the request (gRPC: INVALID_TRANSACTION_ID), or writing
# the decision failed (gRPC: INTERNAL_SERVER_ERROR)
REASON_NOT_THIS_TRANSACTION = "not_this_transaction"
REASON_WRITE_FAILED = "write_failed"
_PENDING = "no resolution given: the transaction stays open and will be checked again"


@dataclass(slots=True)
class EndTransactionRequest:
    """COMMIT, ROLLBACK or UNKNOWN (``decision``: 8, 12, 0) of the half record at ``commit_log_offset`` whose
    half-queue offset is ``tran_state_table_offset``, by ``producer_group``. ``expect_topic`` / ``expect_message_id``
    (None: not checked): the half record must be of this topic and message. ``wait``: answer once the decision is
    recorded (False for a one-way request nobody reads the answer of)."""

    producer_group: str | None
    tran_state_table_offset: int
    commit_log_offset: int
    decision: int
    from_check: bool = False
    requester: Requester | None = None
    transaction_id: str | None = None
    expect_topic: str | None = None
    expect_message_id: str | None = None
    wait: bool = True

    def needs(self, records: RecordTopics | None = None) -> Needs:
        """What the requester must be allowed: PUB on the topic it names when the core checks the half record is of
        that topic; else PUB on the half record's real topic (found through ``records``)."""
        if self.expect_topic is not None:
            return [topic_resource(self.expect_topic, PUB)]
        return end_transaction_needs(records, self.commit_log_offset)


class EndTransactionService:
    """``config`` (BrokerConfig, read live: the role changes at run time); ``transactions`` the TransactionService."""

    def __init__(self, config: Any, transactions: Any) -> None:
        self.config = config
        self.transactions = transactions

    def end(self, request: EndTransactionRequest) -> Outcome | Any:
        """The Outcome now (a refusal, or SUCCESS for UNKNOWN: nothing changes), or an awaitable of it."""
        decision = request.decision
        if decision not in (UNKNOWN, COMMIT, ROLLBACK):
            return Outcome.refused(ResponseCode.INVALID_PARAMETER,
                                   f"commitOrRollback must be 0 (UNKNOWN), 8 (COMMIT) or 12 (ROLLBACK), got {decision}")
        if not self.config.is_master:
            return Outcome.refused(ResponseCode.SLAVE_NOT_AVAILABLE, "a slave takes no transaction decisions")
        if decision == UNKNOWN:
            return Outcome.success(remark=_PENDING)  # pending: nothing changes
        if request.expect_topic is not None or request.expect_message_id is not None:
            refusal = self._mismatch(request)
            if refusal is not None:
                return refusal
        return self._decide(request)

    def _mismatch(self, request: EndTransactionRequest) -> Outcome | None:
        """The half record named must be of the topic and message the request names (checked before it is
        touched)."""
        offset = request.commit_log_offset
        named = request.transaction_id or f"at commit-log offset {offset}"
        half = self.transactions.look(offset)
        if half is None or half.topic != HALF_TOPIC or half.physical_offset != offset:
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, f"transaction id {named}: no half message at "
                                   f"commit-log offset {offset}", REASON_NOT_THIS_TRANSACTION)
        uniq = half.properties.get("UNIQ_KEY")
        if request.expect_message_id is not None and uniq != request.expect_message_id:
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, f"transaction id {named} belongs to message {uniq}, "
                                   f"not {request.expect_message_id}", REASON_NOT_THIS_TRANSACTION)
        real_topic = half.properties.get("REAL_TOPIC")
        if request.expect_topic is not None and real_topic != request.expect_topic:
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, f"transaction id {named} belongs to topic "
                                   f"{real_topic}, not {request.expect_topic}", REASON_NOT_THIS_TRANSACTION)
        return None

    async def _decide(self, request: EndTransactionRequest) -> Outcome:
        code, remark = await self.transactions.end_transaction(
            request.producer_group, request.tran_state_table_offset, request.commit_log_offset, request.decision,
            request.from_check, wait=request.wait)
        if code == ResponseCode.SUCCESS:
            return Outcome.success(remark=remark or "")
        reason = ""
        if code == ResponseCode.SYSTEM_ERROR:
            reason = REASON_WRITE_FAILED if (remark or "").startswith(("storing", "recording")) \
                else REASON_NOT_THIS_TRANSACTION
        return Outcome.refused(code, remark or "", reason)
