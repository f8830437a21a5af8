"""ScheduleMessageService: re-delivers SCHEDULE_TOPIC_XXXX records to their real topic when due (§5.6).

Each delay level is a FIFO queue (``level - 1``) whose consume-queue tagsCode is the delivery time, and
since every record of a level waits the same delay, delivery times never decrease along a queue. One
task scans every level from its offset, delivers the due prefix, and then sleeps until the earliest
next delivery time (bounded by ``MAX_IDLE_S``) or until a new schedule record arrives.

Progress (``{"offsetTable":{level:offset}}``) lives in ``config/delayOffset.json``. It is written right
after each delivery round, once the commit log holding the delivered copies has been flushed, so the
file never claims a delivery that is not on disk (no loss). A crash between a delivery and that write
would re-deliver the copies of that round; to avoid such duplicates, ``load()`` skips schedule records
whose copy already exists in the real topic (found through the index by UNIQ_KEY, matching born
timestamp and reconsumeTimes, stored after the schedule record). Without the index
(``messageIndexEnable=false``) at most one round may be delivered twice after a kill -9.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Callable

from broker.managers.persistence import open_json_file
from protocol.json_body import as_int
from broker.schedule.delay import SCHEDULE_TOPIC, restore_from_schedule
from protocol.jsonlenient import dumps_compact
from protocol.message import RecordError, decode_record

if TYPE_CHECKING:
    from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

FILE_NAME = "delayOffset.json"
DELIVER_BATCH = 256  # records per level per round before the other levels get their turn
MAX_IDLE_S = 1.0  # re-check at least this often (clock jumps, missed wake-ups)
RETRY_AFTER_FAILURE_S = 0.1  # a failed put (disk full, store stopping) is retried this soon
DEDUP_SCAN_LIMIT = 100_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class ScheduleMessageService:
    """Owned by the Broker: ``load()`` before ``start()``, ``stop()`` before the store shuts down."""

    def __init__(self, store: "MessageStore", config_dir: str, delay_levels_ms: list[int],
                 clock_ms: Callable[[], int] = _now_ms) -> None:
        self.store = store
        self.delay_levels_ms = list(delay_levels_ms)
        self.path = os.path.join(config_dir, FILE_NAME)
        self._file = open_json_file(self.path)
        self._clock_ms = clock_ms
        self.offsets: dict[int, int] = {}  # level (1-based) -> next schedule-queue offset to deliver
        self.delivered = 0
        self.deduplicated = 0
        self._persisted: dict[int, int] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._running = False

    @property
    def max_level(self) -> int:
        return len(self.delay_levels_ms)

    # ---- persistence -----------------------------------------------------------------------------
    def encode(self) -> dict:
        return {"offsetTable": {str(level): offset for level, offset in sorted(self.offsets.items())}}

    def encode_json(self) -> bytes:
        """The delayOffset.json document (GET_ALL_DELAY_OFFSET body)."""
        return dumps_compact(self.encode())

    def decode(self, obj: object) -> None:
        table = obj.get("offsetTable") if isinstance(obj, dict) else None
        offsets: dict[int, int] = {}
        for level, offset in (table or {}).items():
            level_no = as_int(level, -1)
            if level_no >= 1:
                offsets[level_no] = max(0, as_int(offset, 0))
        self.offsets = offsets

    def load(self) -> None:
        """Read delayOffset.json (or its .bak) and skip records already delivered before a crash."""
        obj = self._file.load()
        if obj is not None:
            self.decode(obj)
        self._persisted = dict(self.offsets)
        self._skip_already_delivered()
        if self.offsets != self._persisted:
            self.persist()

    def persist(self) -> None:
        snapshot = self.encode()
        self._file.save(snapshot)
        self._persisted = dict(self.offsets)

    async def _persist_after_flush(self) -> None:
        """Make the delivered copies durable, then record the progress that covers them."""
        snapshot_offsets = dict(self.offsets)
        if snapshot_offsets == self._persisted:
            return
        await self.store.flush()
        snapshot = {"offsetTable": {str(k): v for k, v in sorted(snapshot_offsets.items())}}
        await asyncio.to_thread(self._file.save, snapshot)
        self._persisted = snapshot_offsets

    # ---- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        self._stopping = False
        self._running = True
        self._wakeup = asyncio.Event()
        self.store.add_arrival_listener(self._on_arrival, SCHEDULE_TOPIC)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="schedule-delivery")

    async def stop(self, timeout: float = 5.0) -> None:
        """Finish the current round, stop, and persist the final offsets."""
        self._stopping = True
        self._running = False
        self._wakeup.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except asyncio.TimeoutError:
                log.warning("schedule delivery did not stop within %.1f s; cancelling", timeout)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            except Exception:
                log.exception("schedule delivery failed")
        if self.offsets != self._persisted:
            try:
                await self.store.flush()
            except Exception:
                log.exception("flushing the store before persisting delay offsets failed")
            try:
                self.persist()
            except OSError:
                log.exception("persisting %s failed", self.path)

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags: object) -> None:
        if topic == SCHEDULE_TOPIC and self._running:
            self._wakeup.set()

    # ---- delivery --------------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._stopping:
            self._wakeup.clear()
            try:
                delivered, next_due_ms = await self.deliver_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("schedule delivery round failed")
                delivered, next_due_ms = 0, self._clock_ms() + int(RETRY_AFTER_FAILURE_S * 1000)
            if delivered:
                try:
                    await self._persist_after_flush()
                except Exception:
                    log.exception("persisting %s failed", self.path)
            if self._stopping:
                break
            delay_s = (next_due_ms - self._clock_ms()) / 1000.0
            if delay_s <= 0:
                await asyncio.sleep(0)
                continue
            try:
                await asyncio.wait_for(self._wakeup.wait(), min(delay_s, MAX_IDLE_S))
            except asyncio.TimeoutError:
                pass

    async def deliver_due(self) -> tuple[int, int]:
        """One round over every level: deliver what is due. Returns (delivered, next due time in ms);
        the next due time is "now" when some level still has due records waiting."""
        now = self._clock_ms()
        next_due = now + int(MAX_IDLE_S * 1000)
        total = 0
        for level in range(1, self.max_level + 1):
            if self._stopping:
                break
            delivered, level_next = await self._deliver_level(level, now)
            total += delivered
            if level_next is not None and level_next < next_due:
                next_due = level_next
        return total, next_due

    async def _deliver_level(self, level: int, now: int) -> tuple[int, int | None]:
        cq = self.store.get_consume_queue(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return 0, None
        offset = self.offsets.get(level, 0)
        if offset < cq.min_offset:
            offset = cq.min_offset
        delay_ms = self.delay_levels_ms[level - 1]
        delivered = 0
        next_due: int | None = None
        while offset < cq.max_offset:
            if delivered >= DELIVER_BATCH or self._stopping:
                next_due = now
                break
            unit = cq.get_unit(offset)
            if unit is None:  # unit file gone (retention): skip to where data exists again
                offset = max(offset + 1, cq.min_offset)
                continue
            phys, size, deliver_at = unit
            if deliver_at > now + delay_ms:  # the clock went back: never wait longer than the level's delay
                deliver_at = now
            if deliver_at > now:
                next_due = deliver_at
                break
            ok = await self._deliver_one(phys, size, level, offset)
            if not ok:
                next_due = now + int(RETRY_AFTER_FAILURE_S * 1000)
                break
            offset += 1
            delivered += 1
        if offset != self.offsets.get(level, 0):
            self.offsets[level] = offset
        return delivered, next_due

    async def _deliver_one(self, phys: int, size: int, level: int, offset: int) -> bool:
        """Write the real-topic copy of one schedule record; False when it must be retried later."""
        raw = self.store.look_message_by_offset(phys, size)
        if raw is None:
            log.warning("schedule record level %d offset %d (commit log %d) is gone; skipped", level, offset, phys)
            return True
        try:
            record = decode_record(raw)
        except (RecordError, ValueError) as exc:
            log.warning("schedule record level %d offset %d is unreadable (%s); skipped", level, offset, exc)
            return True
        message = restore_from_schedule(record)
        if message is None:
            log.warning("schedule record level %d offset %d has no REAL_TOPIC; skipped", level, offset)
            return True
        result = await self.store.put_message(message)
        if not result.ok:
            log.warning("delivering delayed message to %s failed: %s", message.topic, result.status.name)
            return False
        self.delivered += 1
        return True

    # ---- crash recovery --------------------------------------------------------------------------
    def _skip_already_delivered(self) -> None:
        """After a crash the persisted offsets may trail deliveries that reached the commit log; skip
        those records (they are a prefix of each level from its persisted offset)."""
        if getattr(self.store, "index", None) is None:
            return
        now = self._clock_ms()
        for level in range(1, self.max_level + 1):
            cq = self.store.get_consume_queue(SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            offset = max(self.offsets.get(level, 0), cq.min_offset)
            start = offset
            claimed: set[int] = set()  # copies already matched to an earlier record (same-key duplicates)
            while offset < cq.max_offset and offset - start < DEDUP_SCAN_LIMIT:
                unit = cq.get_unit(offset)
                if unit is None or unit[2] > now or not self._copy_exists(unit[0], unit[1], claimed):
                    break
                offset += 1
            if offset != start:
                log.warning("delay level %d: %d message(s) were delivered before an unclean stop; "
                            "not delivering them again", level, offset - start)
                self.deduplicated += offset - start
                self.offsets[level] = offset

    def _copy_exists(self, phys: int, size: int, claimed: set[int]) -> bool:
        raw = self.store.look_message_by_offset(phys, size)
        if raw is None:
            return False
        try:
            record = decode_record(raw)
        except (RecordError, ValueError):
            return False
        props = record.properties
        topic = props.get("REAL_TOPIC")
        uniq_key = props.get("UNIQ_KEY")
        if not topic or not uniq_key:
            return False
        # The index keeps times at one-second granularity: search from a little before the record.
        found = self.store.query_message(topic, uniq_key, 64, max(0, record.store_timestamp - 2000), 2**62)
        for candidate_raw in found.records:
            try:
                candidate = decode_record(candidate_raw)
            except (RecordError, ValueError):
                continue
            if (candidate.physical_offset > phys and candidate.physical_offset not in claimed
                    and candidate.reconsume_times == record.reconsume_times
                    and candidate.born_timestamp == record.born_timestamp
                    and candidate.properties.get("REAL_QID") == props.get("REAL_QID")
                    and "DELAY" not in candidate.properties):
                claimed.add(candidate.physical_offset)
                return True
        return False
