"""Transactional messages over gRPC (grpc-proxy.md §3.1 step 5, §5.5, §8, §11), on the broker's own transaction path.

* A SendMessage with message_type TRANSACTION is the remoting half send: properties TRAN_MSG=true and PGROUP (the
  topic: gRPC producers have no group, the reference registers them under each topic they publish), sent by the
  messaging core as a remoting one is (broker/core/send.py), so the message waits in the half queue. The answer's
  transaction_id is the message id, as the reference's (the half message carries it as __transactionId__); the
  broker's HalfIds (broker/transaction/half_ids.py) leads from it to the half record END_TRANSACTION needs. Ids of the
  older form (offset message id + 16 hex digits of the half-queue offset) are still understood.
* EndTransaction becomes the core's typed EndTransactionRequest (broker/core/transaction.py; producer group = the
  topic), which checks that the half record is the message and topic the client names and decides exactly as for a
  remoting producer.
* Transaction checks: TelemetryStreams keeps every open Telemetry stream and the topics its producer publishes;
  GrpcTransactions is registered with the broker's TransactionService as a CheckRecipient. When the check finds an
  open half message of a group (= topic) with no remoting producer connected, it gets a
  RecoverOrphanedTransactionCommand{message, transaction_id of the checked copy} on one of those streams (round
  robin), and the SDK answers with EndTransaction source=SOURCE_SERVER_CHECK.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import AsyncIterator

from broker.core.outcome import Outcome, Requester
from broker.core.transaction import (REASON_NOT_THIS_TRANSACTION, REASON_WRITE_FAILED, EndTransactionRequest,
                                     EndTransactionService)
from broker.grpc.common import record_message, status
from broker.transaction.service import COMMIT, ROLLBACK, UNKNOWN
from protocol.codes import ResponseCode
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb
from protocol.ids import decode_offset_msg_id
from protocol.message import MessageRecord

log = logging.getLogger(__name__)

_QUEUE_OFFSET_HEX = 16
_MAX_PENDING_PUSHES = 1024  # commands queued for one stream that its client does not read

# ---- transaction ids ---------------------------------------------------------------------------------------------
def transaction_id(offset_msg_id: str, half_queue_offset: int) -> str:
    """The id a transactional send answers with: the half record's offset message id + its half-queue offset."""
    return f"{offset_msg_id}{half_queue_offset:0{_QUEUE_OFFSET_HEX}X}"


def parse_transaction_id(text: str) -> tuple[int, int]:
    """(commit-log offset, half-queue offset) of a transaction id; ValueError when it is not one of ours."""
    offset_msg_id, queue_hex = text[:-_QUEUE_OFFSET_HEX], text[-_QUEUE_OFFSET_HEX:]
    if len(text) <= _QUEUE_OFFSET_HEX or not all(c in "0123456789abcdefABCDEF" for c in queue_hex):
        raise ValueError("not an offset message id followed by 16 hex digits")
    _, _, commit_log_offset = decode_offset_msg_id(offset_msg_id)
    return commit_log_offset, int(queue_hex, 16)


def check_transaction_id(copy: MessageRecord) -> str:
    """The transaction id a check names: the message id (UNIQ_KEY), as the reference asks producers with."""
    return copy.properties.get("UNIQ_KEY") or transaction_id(copy.offset_msg_id, copy.queue_offset)


def half_send_properties(props: dict[str, str], message: pb.Message) -> None:
    """What makes a gRPC send a half message (grpc-proxy.md §8): TRAN_MSG=true, PGROUP (set by the caller: the
    topic), the first check delay; a delivery time is dropped, as the Java producer drops DELAY (transactions.md §2.1)."""
    props["TRAN_MSG"] = "true"
    props.pop("DELAY", None)
    sp = message.system_properties
    if sp.HasField("orphaned_transaction_recovery_duration"):
        duration = sp.orphaned_transaction_recovery_duration
        seconds = duration.seconds + (1 if duration.nanos > 0 else 0)
        if seconds > 0:
            props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(seconds)


# ---- the message a check carries ---------------------------------------------------------------------------------
def half_record_message(record: MessageRecord) -> pb.Message:
    """A stored half record as the pb.Message a producer's checker sees: its real topic and queue, the properties
    the producer sent, message_id = UNIQ_KEY, an MD5 body digest, message_type TRANSACTION."""
    props = record.properties
    message = record_message(record, props.get("REAL_TOPIC", record.topic),
                             int(props.get("REAL_QID", record.queue_id) or 0), record.queue_offset,
                             record.reconsume_times + 1)
    message.system_properties.message_type = pb.TRANSACTION
    return message


# ---- Telemetry streams -------------------------------------------------------------------------------------------
class TelemetryStream:
    """One open Telemetry stream: what the client writes, merged with what the server pushes to it."""

    def __init__(self, owner: "TelemetryStreams", client_id: str) -> None:
        self.owner = owner
        self.client_id = client_id
        self.topics: frozenset[str] = frozenset()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._pushed = 0

    async def merged(self, request_iterator: AsyncIterator[spb.TelemetryCommand]
                     ) -> AsyncIterator[tuple[bool, spb.TelemetryCommand]]:
        """(pushed, command): the client's commands (pushed=False) and the server's (True), until the client's side
        ends."""
        reader = asyncio.ensure_future(self._read(request_iterator))
        try:
            while True:
                pushed, command = await self._queue.get()
                if command is None:
                    return
                if pushed:
                    self._pushed -= 1
                yield pushed, command
        finally:
            reader.cancel()

    async def _read(self, request_iterator: AsyncIterator[spb.TelemetryCommand]) -> None:
        try:
            async for command in request_iterator:
                self._queue.put_nowait((False, command))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the client went away: the stream ends
            log.debug("telemetry stream of %s ended: %s", self.client_id, exc)
        self._queue.put_nowait((False, None))

    def publishing(self, settings: pb.Settings) -> None:
        """A producer's Settings: the topics it publishes, where its transaction checks come from."""
        if settings.WhichOneof("pub_sub") == "publishing":
            self.topics = frozenset(t.name for t in settings.publishing.topics)
            self.owner._index(self)

    def push(self, command: spb.TelemetryCommand) -> bool:
        if self._pushed >= _MAX_PENDING_PUSHES:
            return False
        self._pushed += 1
        self._queue.put_nowait((True, command))
        return True

    def close(self) -> None:
        self.owner._remove(self)


class TelemetryStreams:
    """The open Telemetry streams of the endpoint, by producer topic (the gRPC producer group)."""

    def __init__(self) -> None:
        self._by_topic: dict[str, list[TelemetryStream]] = {}
        self._turn = itertools.count()

    def open(self, client_id: str) -> TelemetryStream:
        return TelemetryStream(self, client_id)

    def for_topic(self, topic: str) -> list[TelemetryStream]:
        return list(self._by_topic.get(topic, ()))

    def pick(self, topic: str) -> TelemetryStream | None:
        """A producer stream of `topic`, round robin (the reference asks any producer instance of the group)."""
        streams = self._by_topic.get(topic)
        return streams[next(self._turn) % len(streams)] if streams else None

    def _index(self, stream: TelemetryStream) -> None:
        self._remove(stream)
        for topic in stream.topics:
            self._by_topic.setdefault(topic, []).append(stream)

    def _remove(self, stream: TelemetryStream) -> None:
        for topic in list(self._by_topic):
            streams = self._by_topic[topic]
            if stream in streams:
                streams.remove(stream)
                if not streams:
                    del self._by_topic[topic]


# ---- EndTransaction and checks -----------------------------------------------------------------------------------
class GrpcTransactions:
    """EndTransaction translated to and from the messaging core (broker/core/transaction.py), and the CheckRecipient
    that turns the broker's transaction checks into RecoverOrphanedTransactionCommands on producers' Telemetry
    streams."""

    def __init__(self, ender: EndTransactionService, streams: TelemetryStreams) -> None:
        self.ender = ender
        self.streams = streams

    # CheckRecipient (broker.transaction.service)
    def send_check(self, group: str, copy: MessageRecord) -> bool:
        stream = self.streams.pick(group)
        if stream is None:
            return False
        command = spb.TelemetryCommand(recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
            message=half_record_message(copy), transaction_id=check_transaction_id(copy)))
        if not stream.push(command):
            log.warning("transaction check of %s: the telemetry stream of %s is not read; not sent",
                        copy.properties.get("UNIQ_KEY"), stream.client_id)
            return False
        log.info("transaction check of %s sent to gRPC producer %s of topic %s", copy.properties.get("UNIQ_KEY"),
                 stream.client_id, group)
        return True

    def _half_of(self, tx_id: str) -> tuple[int, int]:
        """(commit-log offset, half-queue offset) of the half record a transaction id names; ValueError if none."""
        found = self.ender.transactions.half_ids.find(tx_id)
        return found if found is not None else parse_transaction_id(tx_id)

    def typed(self, request: spb.EndTransactionRequest, requester: Requester) -> tuple[EndTransactionRequest,
                                                                                       pb.Status | None]:
        """The core's request (its producer group is the topic, as gRPC producers' half messages name it; the half
        record must be of this topic and message), and the status refusing what cannot be decoded (None: none)."""
        topic = request.topic.name
        decision = {pb.COMMIT: COMMIT, pb.ROLLBACK: ROLLBACK}.get(request.resolution, UNKNOWN)
        typed = EndTransactionRequest(topic, -1, -1, decision, request.source == pb.SOURCE_SERVER_CHECK, requester,
                                      request.transaction_id, topic, request.message_id)
        if not request.transaction_id:
            return typed, status(pb.INVALID_TRANSACTION_ID, "the transaction id is empty")
        if not request.message_id:
            return typed, status(pb.ILLEGAL_MESSAGE_ID, "the message id is empty")
        try:
            typed.commit_log_offset, typed.tran_state_table_offset = self._half_of(request.transaction_id)
        except ValueError as exc:
            return typed, status(pb.INVALID_TRANSACTION_ID,
                                 f"transaction id {request.transaction_id!r} names no open transaction ({exc})")
        return typed, None

    async def end_transaction(self, typed: EndTransactionRequest) -> pb.Status:
        result = self.ender.end(typed)  # UNKNOWN: OK, the transaction stays open and will be checked
        outcome = result if type(result) is Outcome else await result
        if outcome.ok:
            return status(pb.OK, outcome.remark)
        return status(_end_code(outcome), outcome.remark)


def _end_code(outcome: Outcome) -> int:
    """A refused decision as a gRPC code: a half record the decision cannot apply to (wrong group or offset, already
    decided) is an invalid transaction id; a failed write is the server's."""
    if outcome.reason == REASON_NOT_THIS_TRANSACTION:
        return pb.INVALID_TRANSACTION_ID
    if outcome.reason == REASON_WRITE_FAILED:
        return pb.INTERNAL_SERVER_ERROR
    return {
        ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
        ResponseCode.INVALID_PARAMETER: pb.BAD_REQUEST,
        ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
        ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    }.get(outcome.code, pb.INTERNAL_SERVER_ERROR)


__all__ = ["GrpcTransactions", "TelemetryStreams", "TelemetryStream", "transaction_id", "parse_transaction_id",
           "half_record_message", "half_send_properties"]
