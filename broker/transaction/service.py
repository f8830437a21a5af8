"""Transaction state of the broker: decisions (END_TRANSACTION) and the check-back service.

Everything durable is store data, as in the reference broker: half records, op records, and the check service's
progress as consumer offsets of CID_RMQ_SYS_TRANS, so open transactions and decisions survive a restart or kill -9.
In memory the service keeps the set of settled half-queue offsets (rebuilt from the op queue at start), which makes a
second COMMIT/ROLLBACK of the same transaction an error instead of a second copy (the reference publishes it twice).

The check run (every transactionCheckInterval ms) walks the half queue from its saved progress: settled records are
skipped; an open one younger than transactionTimeOut (or its CHECK_IMMUNITY_TIME_IN_SECONDS) stops the run (or, with
an immunity, is copied forward to keep it in view); an older one is copied with TRANSACTION_CHECK_TIMES + 1 and the
producer group is asked about the copy (CHECK_TRANSACTION_STATE, one-way, on a remoting producer's connection; with
none connected, through the registered CheckRecipients, e.g. the gRPC endpoint's Telemetry streams); one checked transactionCheckMax times, or
older than fileReservedTime, goes to TRANS_CHECK_MAX_TIME_TOPIC. A run yields to the event loop every few records and
stops after a bounded time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from broker.background import BackgroundService
from broker.transaction.half_ids import HalfIds
from broker.store.types import MessageToStore, PutResult
from broker.transaction.half import (
    CHECK_MAX_TOPIC,
    HALF_TOPIC,
    OP_TOPIC,
    PROP_CHECK_TIMES,
    PROP_IMMUNITY,
    PROP_PGROUP,
    PROP_REAL_TOPIC,
    SYSTEM_GROUP,
    check_copy,
    check_request,
    committed_from_sent,
    committed_message,
    given_up_message,
    op_message,
    parse_op_body,
    root_offset,
)
from protocol.codes import STORED_CODES, ResponseCode
from protocol.message import RecordError, MessageRecord, iter_records

log = logging.getLogger(__name__)

__all__ = ["TransactionService", "TransactionSettings", "CheckRecipient", "COMMIT", "ROLLBACK", "UNKNOWN"]

UNKNOWN, COMMIT, ROLLBACK = 0, 8, 12
_READ_BATCH = 32
_RECENT_MAX = 8192
_RECENT_MAX_BYTES = 64 * 1024 * 1024
_RECENT_MAX_BODY = 256 * 1024
_RUN_TIME_LIMIT_S = 60.0  # the reference gives up on a queue after 60 s and goes on next time


class _Store(Protocol):
    def get_messages(self, topic: str, queue_id: int, offset: int, max_nums: int, *args: Any, **kwargs: Any) -> Any: ...
    def get_min_offset(self, topic: str, queue_id: int) -> int: ...
    def get_max_offset(self, topic: str, queue_id: int) -> int: ...
    def look_record(self, phys_offset: int) -> MessageRecord | None: ...
    async def put_message(self, msg: MessageToStore) -> PutResult: ...
    def append_one(self, msg: MessageToStore) -> PutResult: ...


class _Offsets(Protocol):
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, client_host: str | None = None
                      ) -> None: ...
    def query_offset(self, group: str, topic: str, queue_id: int) -> int: ...


class CheckRecipient(Protocol):
    """Another way to reach producers with a transaction check than their remoting connection (the gRPC endpoint's
    Telemetry streams). Registered by the higher floor that owns those producers; this module never imports it."""

    def send_check(self, group: str, copy: MessageRecord) -> bool:
        """Ask a producer of `group` about the half record `copy` (the checked copy: its offsets are what the answer
        must name). False when no producer of the group is reachable this way."""
        ...


@dataclass
class TransactionSettings:
    timeout_ms: int = 6000
    check_interval_ms: int = 60_000
    check_max: int = 15
    file_reserved_hours: float = 72.0


class TransactionService(BackgroundService):
    task_name = "transaction-check"

    def __init__(self, store: _Store, offsets: _Offsets, settings: TransactionSettings, *, store_host: bytes,
                 broker_name: str, producer_channel: Callable[[str], Any | None],
                 store_message: Callable[[MessageToStore], Awaitable[Any]]) -> None:
        """``store_message``: how a committed message is stored (the send core's ``store_written``: as a send is,
        acknowledged by a slave on a replicating master, on disk with SYNC_FLUSH); its Outcome."""
        self.store = store
        self.store_message = store_message
        self.offsets = offsets
        self.settings = settings
        self.store_host = store_host
        self.broker_name = broker_name
        self.producer_channel = producer_channel
        self.check_recipients: list[CheckRecipient] = []  # tried when no remoting producer of the group is connected
        self.sync_flush = bool(getattr(getattr(store, "config", None), "sync_flush", True))
        self.settled: set[int] = set()  # half-queue offsets an op record settles
        self._settling: set[int] = set()  # decisions being written right now
        # Half messages as they were sent, by commit-log offset (most END_TRANSACTIONs follow within milliseconds):
        # a decision on one of them needs no read back from the log. Bounded in count and bytes.
        self._recent: dict[int, tuple[int, MessageToStore, dict[str, str], str | None]] = {}
        self._recent_bytes = 0
        # Decisions of one loop turn share one op record ("17,18,19,"), written at the end of the turn.
        self._op_offsets: list[int] = []
        self._op_written: asyncio.Future | None = None
        self.counters = {"commits": 0, "rollbacks": 0, "checks": 0, "discards": 0}
        # transaction id (UNIQ_KEY) -> its latest half record, for gRPC EndTransactions (half_ids.py)
        self.half_ids = HalfIds()
        self._wake = asyncio.Event()

    # ------------------------------------------------------------------ start-up
    def load(self) -> None:
        """Rebuild the settled set from the op queue (op records live as long as the commit log keeps them)."""
        offset = self.store.get_min_offset(OP_TOPIC, 0)
        end = self.store.get_max_offset(OP_TOPIC, 0)
        while offset < end:
            records, offset = self._read(OP_TOPIC, offset, 256)
            if not records:
                break
            for record in records:
                self.settled.update(parse_op_body(record.body))
        self._note_open_halves()

    def _note_open_halves(self) -> None:
        """The open half records past the check progress into half_ids (the ids producers hold across a restart);
        at most as many as it keeps."""
        offset = self.progress()
        end = self.store.get_max_offset(HALF_TOPIC, 0)
        walked = 0
        while offset < end and walked < self.half_ids.limit:
            records, offset = self._read(HALF_TOPIC, offset, 256)
            for record in records:
                walked += 1
                if not self.is_settled(record):
                    self.half_ids.note(record.properties.get("UNIQ_KEY"), record.physical_offset, record.queue_offset)

    # ------------------------------------------------------------------ reading
    def _read(self, topic: str, offset: int, max_nums: int) -> tuple[list[MessageRecord], int]:
        result = self.store.get_messages(topic, 0, offset, max_nums)
        records: list[MessageRecord] = []
        for buffer in result.buffers:
            try:
                records.extend(iter_records(bytes(buffer)))
            except RecordError as exc:
                log.warning("unreadable record in %s at offset %d: %s", topic, offset, exc)
        next_offset = result.next_begin_offset if result.next_begin_offset > offset else offset + max(1, len(records))
        return records, next_offset

    def look(self, commit_log_offset: int) -> MessageRecord | None:
        return self.store.look_record(commit_log_offset)

    def remember_half(self, phys_offset: int, queue_offset: int, message: MessageToStore, props: dict[str, str],
                      committed_text: str | None) -> None:
        """The send path stored a half message: keep it at hand for its END_TRANSACTION."""
        self.half_ids.note(props.get("UNIQ_KEY"), phys_offset, queue_offset)
        size = len(message.body)
        if size > _RECENT_MAX_BODY:
            return
        recent = self._recent
        while recent and (len(recent) >= _RECENT_MAX or self._recent_bytes + size > _RECENT_MAX_BYTES):
            self._forget(next(iter(recent)))  # oldest first
        recent[phys_offset] = (queue_offset, message, props, committed_text)
        self._recent_bytes += size

    def _forget(self, phys_offset: int) -> None:
        entry = self._recent.pop(phys_offset, None)
        if entry is not None:
            self._recent_bytes -= len(entry[1].body)

    def is_settled(self, record: MessageRecord) -> bool:
        return record.queue_offset in self.settled or root_offset(record) in self.settled

    # ------------------------------------------------------------------ END_TRANSACTION
    async def end_transaction(self, group: str, table_offset: int, commit_log_offset: int, decision: int,
                              from_check: bool, wait: bool = True) -> tuple[int, str | None]:
        """COMMIT or ROLLBACK the half record the producer names; (response code, remark). wait=False (one-way
        requests: nobody reads the answer) returns once the decision is queued for this turn's op record."""
        recent = self._recent.get(commit_log_offset)
        if recent is not None:
            queue_offset, sent, props, committed_text = recent
            pgroup, root = props.get(PROP_PGROUP), queue_offset
            uniq = props.get("UNIQ_KEY")
        else:
            half = self.look(commit_log_offset)
            if half is None:
                return ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed"
            if half.topic != HALF_TOPIC:
                return ResponseCode.SYSTEM_ERROR, (f"Find prepared transaction message failed: the record at "
                                                   f"commitLogOffset {commit_log_offset} is not a half message")
            queue_offset, pgroup, root = half.queue_offset, half.properties.get(PROP_PGROUP), root_offset(half)
            uniq = half.properties.get("UNIQ_KEY")
            if half.physical_offset != commit_log_offset:
                return ResponseCode.SYSTEM_ERROR, "The commit log offset wrong"
        if pgroup != group:
            return ResponseCode.SYSTEM_ERROR, "The producer group wrong"
        if queue_offset != table_offset:
            return ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong"
        keys = {queue_offset, root}
        if keys & self.settled or keys & self._settling:
            return ResponseCode.SYSTEM_ERROR, (f"The transaction of message {uniq} (half offset {queue_offset}) is "
                                               "already committed or rolled back; nothing changed")
        if decision == COMMIT:
            message = committed_from_sent(sent, props, committed_text, commit_log_offset) if recent is not None \
                else committed_message(half)
            self._settling |= keys
            try:
                stored = await self.store_message(message)
            finally:
                self._settling -= keys
            # a late flush or slave still commits, as in the reference: the message is in the log, so the decision
            # must be recorded
            if stored.code not in STORED_CODES or stored.value is None:
                why = stored.remark or stored.code
                return ResponseCode.SYSTEM_ERROR, f"storing the committed message failed: {why}"
        self.settled |= keys
        self._forget(commit_log_offset)
        self.half_ids.forget(uniq)
        self.counters["commits" if decision == COMMIT else "rollbacks"] += 1
        written = self._queue_op(sorted(keys, reverse=True))
        if not wait:
            return ResponseCode.SUCCESS, None
        if not await written:
            return ResponseCode.SYSTEM_ERROR, "recording the decision (op record) failed; it will be checked again"
        return ResponseCode.SUCCESS, None

    def _queue_op(self, offsets: list[int]) -> asyncio.Future:
        """Add offsets to this loop turn's op record; the future says whether it was stored."""
        self._op_offsets.extend(offsets)
        if self._op_written is None:
            loop = asyncio.get_running_loop()
            self._op_written = loop.create_future()
            loop.call_soon(self._write_ops)
        return self._op_written

    def _write_ops(self) -> None:
        offsets, self._op_offsets = self._op_offsets, []
        done, self._op_written = self._op_written, None
        message = op_message(offsets, self.store_host, int(time.time() * 1000), {})

        def settle(ok: bool) -> None:
            if not ok:
                # The decisions stay in memory; after a restart they would be checked again (and a producer
                # answering COMMIT then publishes a second copy, as with the reference broker).
                log.error("writing the op record for half offsets %s failed", offsets[:8])
            if done is not None and not done.done():
                done.set_result(ok)

        if not self.sync_flush:  # nothing to wait for: append now, no task
            settle(self.store.append_one(message).ok)
            return
        task = asyncio.ensure_future(self.store.put_message(message))
        task.add_done_callback(lambda t: settle(not t.cancelled() and t.exception() is None and t.result().ok))

    # ------------------------------------------------------------------ check service
    async def run(self) -> None:
        interval = self.settings.check_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction check run failed")

    def progress(self) -> int:
        saved = self.offsets.query_offset(SYSTEM_GROUP, HALF_TOPIC, 0)
        low = self.store.get_min_offset(HALF_TOPIC, 0)
        return max(saved, low) if saved >= 0 else low

    async def check_once(self) -> int:
        """One run over the half queue; returns how many checks were sent."""
        settings = self.settings
        started = time.monotonic()
        now_ms = int(time.time() * 1000)
        reserved_ms = settings.file_reserved_hours * 3600 * 1000
        offset = self.progress()
        end = self.store.get_max_offset(HALF_TOPIC, 0)  # copies appended by this run are not walked
        checks = 0
        while offset < end and time.monotonic() - started < _RUN_TIME_LIMIT_S:
            records, next_offset = self._read(HALF_TOPIC, offset, min(_READ_BATCH, end - offset))
            stop = False
            for record in records:
                if record.queue_offset >= end:
                    stop = True
                    break
                verdict = await self._handle(record, now_ms, reserved_ms)
                if verdict == "stop":
                    stop = True
                    break
                if verdict == "checked":
                    checks += 1
                offset = record.queue_offset + 1
            else:
                if not records:
                    offset = next_offset  # a gap (removed file): move on
            self.offsets.commit_offset(SYSTEM_GROUP, HALF_TOPIC, 0, offset)
            if stop:
                break
            await asyncio.sleep(0)  # let requests through between batches
        self._trim_settled(offset)
        return checks

    async def _handle(self, record: MessageRecord, now_ms: int, reserved_ms: float) -> str:
        if self.is_settled(record):
            return "settled"
        props = record.properties
        try:
            times = int(props.get(PROP_CHECK_TIMES, "0") or 0)
        except ValueError:
            times = 0
        if times >= self.settings.check_max or now_ms - record.born_timestamp > reserved_ms:
            await self._give_up(record, times)
            return "given up"
        age = now_ms - record.born_timestamp
        immunity_raw = props.get(PROP_IMMUNITY)
        immunity = self.settings.timeout_ms
        if immunity_raw:
            try:
                immunity = int(immunity_raw) * 1000
            except ValueError:
                pass
        if 0 <= age < immunity:
            if not immunity_raw:
                return "stop"  # everything behind it is younger: wait for the next run
            copy = await self._append(check_copy(record, None))  # immune: keep it in view, check it later
            return "deferred" if copy is not None else "stop"
        copy = await self._append(check_copy(record, times + 1))
        if copy is None:
            return "stop"
        self.half_ids.note(copy.properties.get("UNIQ_KEY"), copy.physical_offset, copy.queue_offset)
        self.counters["checks"] += 1
        self._send_check(copy)
        return "checked"

    async def _append(self, message: MessageToStore) -> MessageRecord | None:
        result = await self.store.put_message(message)
        if not result.ok:
            log.warning("transaction check: appending to %s failed (%s); trying again next run", message.topic,
                        result.status.name)
            return None
        return self.look(result.physical_offset)

    def add_check_recipient(self, recipient: CheckRecipient) -> None:
        if recipient not in self.check_recipients:
            self.check_recipients.append(recipient)

    def remove_check_recipient(self, recipient: CheckRecipient) -> None:
        if recipient in self.check_recipients:
            self.check_recipients.remove(recipient)

    def _send_check(self, copy: MessageRecord) -> None:
        group = copy.properties.get(PROP_PGROUP)
        channel = self.producer_channel(group) if group else None
        if channel is None and group:
            for recipient in list(self.check_recipients):
                try:
                    if recipient.send_check(group, copy):
                        return
                except Exception:
                    log.exception("transaction check of %s through %r failed", copy.properties.get("UNIQ_KEY"),
                                  recipient)
        if channel is None:
            log.warning("transaction check of %s: no producer of group %s is connected; checked again next run "
                        "(it counts)", copy.properties.get("UNIQ_KEY"), group)
            return
        try:
            channel.send_oneway(check_request(copy, self.store_host, self.broker_name))
        except Exception as exc:
            log.warning("sending the transaction check to %s failed: %s", getattr(channel, "remote_addr", "?"), exc)

    async def _give_up(self, record: MessageRecord, times: int) -> None:
        result = await self.store.put_message(given_up_message(record))
        if result.ok:
            self.counters["discards"] += 1
            log.warning("transaction %s of group %s given up after %d check(s); kept in %s, never published",
                        record.properties.get("UNIQ_KEY"), record.properties.get(PROP_PGROUP), times,
                        CHECK_MAX_TOPIC)

    def _trim_settled(self, progress: int) -> None:
        """Settled offsets below the progress are only needed for copies naming them: keep a bounded tail."""
        if len(self.settled) > 1_000_000:
            floor = progress - 1_000_000
            self.settled = {o for o in self.settled if o >= floor}

    # ------------------------------------------------------------------ operations
    def pending(self, limit_records: int = 20_000) -> list[dict]:
        """Open half messages per real topic and producer group: count and oldest born time. Reads at most
        limit_records half records past the check progress (one admin request must not hold the loop for long)."""
        by_key: dict[tuple[str, str], dict] = {}
        offset = self.progress()
        end = self.store.get_max_offset(HALF_TOPIC, 0)
        seen_roots: set[int] = set()
        walked = 0
        while offset < end and walked < limit_records:
            records, offset = self._read(HALF_TOPIC, offset, 256)
            if not records:
                continue
            for record in records:
                walked += 1
                root = root_offset(record)
                if self.is_settled(record) or root in seen_roots:
                    continue
                seen_roots.add(root)
                key = (record.properties.get(PROP_REAL_TOPIC, "?"), record.properties.get(PROP_PGROUP, "?"))
                entry = by_key.setdefault(key, {"topic": key[0], "producerGroup": key[1], "count": 0,
                                                "oldestBornTimestamp": record.born_timestamp})
                entry["count"] += 1
                entry["oldestBornTimestamp"] = min(entry["oldestBornTimestamp"], record.born_timestamp)
        return sorted(by_key.values(), key=lambda e: (e["topic"], e["producerGroup"]))
