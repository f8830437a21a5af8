"""TimerMessageService: delivers the timed messages waiting in ``rmq_sys_wheel_timer`` at their own time.

Timed messages are stored in arrival order, but come due in any order, so the service keeps the pending ones in a
heap ordered by delivery time (delivery time, timer-queue offset, commit-log offset: ~100 bytes each), fed by
reading the timer queue as it grows. One task delivers what is due, then sleeps until the next delivery time
(bounded by MAX_IDLE_S) or until a new timed message arrives.

Progress: the frontier (every timer-queue offset below it is delivered or recalled) and the offsets finished out of
order above it, in ``config/timerProgress.json`` plus a journal of finished offsets (one line per delivery round,
written after the copies are stored: a kill -9 loses neither, and re-delivers at most the copies of the round it
interrupted). Loading reads both, then the timer queue from the frontier.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
import time
from typing import Any, Callable

from broker.background import BackgroundService
from broker.managers.persistence import ChangeJournal, open_json_file
from broker.store.types import GetStatus
from broker.timer.timed import TIMER_TOPIC, deliver_ms_of, restore_from_timer
from protocol.message import MessageRecord, RecordError, iter_records

log = logging.getLogger(__name__)

FILE_NAME = "timerProgress.json"
MAX_IDLE_S = 1.0
SCAN_BATCH = 256
SCAN_MAX_PER_PASS = 20_000  # timer records read into the heap per pass (the rest on the next pass)
DELIVER_MAX_PER_PASS = 2_000
RETRY_AFTER_FAILURE_S = 0.1
SNAPSHOT_EVERY_RECORDS = 5_000
# Pending deliveries held in memory at most (~100 bytes each). Beyond it the timer queue is read further only as
# deliveries free room: later-stored messages may then come late, but memory stays bounded.
MAX_PENDING_IN_MEMORY = 1_000_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TimerMessageService(BackgroundService):
    """Owned by the Broker (masters): ``load()`` before ``start()``, ``stop()`` before the store shuts down."""

    task_name = "timer-delivery"

    def __init__(self, store: Any, config_dir: str, clock_ms: Callable[[], int] = _now_ms) -> None:
        self.store = store
        self.path = os.path.join(config_dir, FILE_NAME)
        self._file = open_json_file(self.path)
        self._journal = ChangeJournal(self.path)
        self._clock_ms = clock_ms
        self.frontier = 0  # timer-queue offsets below are finished
        self.finished: set[int] = set()  # finished offsets at or above the frontier
        self.scanned = 0  # the next timer-queue offset to read into the heap
        self._heap: list[tuple[int, int, int]] = []  # (deliver ms, timer-queue offset, commit-log offset)
        self._records_since_snapshot = 0
        self.delivered = 0
        self._delivering: int | None = None
        self._full_warned = False
        self._wake = asyncio.Event()

    @property
    def pending(self) -> int:
        return len(self._heap)

    # ---- persistence -----------------------------------------------------------------------------------------
    def load(self) -> None:
        document = self._file.load()
        if isinstance(document, dict):
            self.frontier = max(0, int(document.get("frontier") or 0))
            self.finished = {int(o) for o in document.get("finished") or () if int(o) >= self.frontier}
        for record in self._journal.read():
            try:
                self.finished.update(int(o) for o in record.get("f") or () if int(o) >= self.frontier)
            except (TypeError, ValueError):
                log.warning("skipping a bad timer journal record")
        self._advance()
        self.scanned = self.frontier

    def _finish(self, offsets: list[int]) -> None:
        if not offsets:
            return
        self.finished.update(o for o in offsets if o >= self.frontier)
        self._advance()
        try:
            self._journal.append({"f": offsets})
        except OSError as exc:
            log.error("cannot write the timer journal %s: %s", self.path, exc)
        self._records_since_snapshot += 1
        if self._records_since_snapshot >= SNAPSHOT_EVERY_RECORDS:
            self._snapshot()

    def _advance(self) -> None:
        while self.frontier in self.finished:
            self.finished.discard(self.frontier)
            self.frontier += 1

    def _snapshot(self) -> None:
        segment = self._journal.rotate()
        self._records_since_snapshot = 0
        try:
            self._file.save({"frontier": self.frontier, "finished": sorted(self.finished)})
        except OSError as exc:
            log.error("cannot save %s: %s", self.path, exc)
            return
        self._journal.drop_through(segment)

    # ---- lifecycle -------------------------------------------------------------------------------------------
    async def stop(self) -> None:
        await super().stop()
        self._snapshot()
        self._journal.close()

    def on_message_arrival(self, topic: str, queue_id: int, max_offset: int, tags: Any = None) -> None:
        if topic == TIMER_TOPIC:
            self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            wait = MAX_IDLE_S
            try:
                self.scan()
                wait = await self.deliver_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("delivering timed messages failed; retrying")
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, min(wait, MAX_IDLE_S)))
            except asyncio.TimeoutError:
                pass

    # ---- reading the timer queue -----------------------------------------------------------------------------
    def scan(self) -> int:
        """Read newly stored timer records into the heap; returns how many."""
        added = 0
        for _ in range(SCAN_MAX_PER_PASS // SCAN_BATCH):
            if len(self._heap) >= MAX_PENDING_IN_MEMORY:
                if not self._full_warned:
                    log.warning("%d timed messages are pending in memory (the most held); later ones are read as "
                                "these are delivered", len(self._heap))
                    self._full_warned = True
                break
            self._full_warned = False
            result = self.store.get_messages(TIMER_TOPIC, 0, self.scanned, SCAN_BATCH)
            if result.status is GetStatus.OFFSET_TOO_SMALL:  # expired files took the oldest ones
                log.warning("timed messages at timer-queue offsets %d..%d were deleted before delivery",
                            self.scanned, result.next_begin_offset - 1)
                self._finish(list(range(max(self.scanned, self.frontier), result.next_begin_offset)))
                self.scanned = result.next_begin_offset
                continue
            if not result.message_count:
                if result.status is not GetStatus.FOUND and result.next_begin_offset > self.scanned and \
                        result.status not in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.OFFSET_OVERFLOW_BADLY):
                    self.scanned = result.next_begin_offset
                    continue
                break
            for buffer in result.buffers:
                for record in _records(buffer):
                    if record.queue_offset >= self.scanned and record.queue_offset not in self.finished \
                            and record.queue_offset >= self.frontier:
                        heapq.heappush(self._heap, (deliver_ms_of(record), record.queue_offset,
                                                    record.physical_offset))
                        added += 1
            self.scanned = max(self.scanned, result.next_begin_offset)
        return added

    # ---- delivering --------------------------------------------------------------------------------------------
    async def deliver_due(self) -> float:
        """Write the due messages to their topics; returns the seconds until the next one is due."""
        now = self._clock_ms()
        for _ in range(DELIVER_MAX_PER_PASS):
            if not self._heap or self._heap[0][0] > now:
                break
            _deliver_ms, offset, phys = self._heap[0]
            if offset in self.finished or offset < self.frontier:  # recalled
                heapq.heappop(self._heap)
                continue
            record = self.store.look_record(phys)
            copy = restore_from_timer(record) if record is not None else None
            if copy is None:
                log.error("the timed message at commit-log offset %d is unreadable; dropped", phys)
            else:
                self._delivering = offset
                try:
                    result = await self.store.put_message(copy)
                finally:
                    self._delivering = None
                if not result.ok:
                    log.warning("cannot deliver a timed message to %s: %s; retrying", copy.topic, result.status.name)
                    return RETRY_AFTER_FAILURE_S
                self.delivered += 1
            heapq.heappop(self._heap)
            self._finish([offset])
        if self._heap and self._heap[0][0] <= now:
            return 0.0
        return (self._heap[0][0] - now) / 1000 if self._heap else MAX_IDLE_S

    def recall(self, record: MessageRecord) -> bool:
        """Cancel a timed message before its time (RecallMessage); False when it was delivered or recalled."""
        offset = record.queue_offset
        if record.topic != TIMER_TOPIC or offset < self.frontier or offset in self.finished or \
                offset == self._delivering:
            return False
        self._finish([offset])
        return True


def _records(buffer: Any) -> list[MessageRecord]:
    try:
        return list(iter_records(buffer))
    except RecordError as exc:
        log.error("skipping unreadable timer records: %s", exc)
        return []
