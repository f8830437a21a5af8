"""MessageStore facade: lifecycle, queues, pulls, offset/time queries, lookups; puts come from append.py.

Everything here runs on the event-loop thread; only fdatasync/checkpoint writes go to
executors (flush.py). A put appends the records to the commit log and writes the
ConsumeQueue units and index entries before it returns, so an acknowledged message is
immediately pullable and queryable.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from collections.abc import Callable, Iterator

from protocol.message import (MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE, MessageRecord, RecordError, decode_record,
                              record_names_problem_at)

from .recovery import recover, redispatch
from .append import ArrivalListener, MessageAppender
from .checkpoint import StoreCheckpoint
from .commit_log import CommitLog
from .consume_queue import CQ_UNIT, FILLER_SIZE, UNIT_SIZE, ConsumeQueue
from .flush import FlushService
from .index import IndexService
from .lock import StoreDirectoryLock
from .mapped_file import StoreFileError, remove_file
from .retention import ConsumerOffsetsSource, RetentionService, disk_used_ratio
from .unit_batch import ends_on_record, read_unit_batch
from .tombstones import FILE_NAME as TOMBSTONES_FILE, TopicTombstones
from .types import GetResult, GetStatus, IllegalRecordError, QueryResult, StoreConfig

__all__ = ["ArrivalListener", "MessageStore", "StoreConfig"]

log = logging.getLogger(__name__)

_PULL_HARD_CAP = 128 * 1024 * 1024
_SKIP_LOG_INTERVAL_S = 10.0
_SIZE_MAGIC = struct.Struct(">ii")


def _visible_units(units, count: int, limit: int) -> int:
    """How many of ``count`` consume-queue units point at records ending at or before ``limit`` (a queue's units
    point at increasing commit-log offsets: a binary search, once per read)."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        phys, size, _tags = CQ_UNIT.unpack_from(units, mid * UNIT_SIZE)
        if phys + size <= limit:
            lo = mid + 1
        else:
            hi = mid
    return lo


class MessageStore(MessageAppender):
    """RocketMQ-format store: commitlog/, consumequeue/, index/, checkpoint, abort."""

    def __init__(self, config: StoreConfig, clock_ms: Callable[[], int] | None = None,
                 flush_observer: Callable[[float], None] | None = None,
                 consumer_offsets: ConsumerOffsetsSource | None = None) -> None:
        self.config = config
        self._clock_ms = clock_ms
        self._flush_observer = flush_observer  # told each commit-log flush's duration (seconds): metrics
        self.root_dir = config.root_dir
        self.commit_log = CommitLog(config.commit_log_path, config.mapped_file_size_commit_log, config.store_host,
                                    preallocate=config.warm_mapped_file_enable)
        self.cq_root = os.path.join(config.root_dir, "consumequeue")
        self.consume_queues: dict[str, dict[int, ConsumeQueue]] = {}
        self.index: IndexService | None = (
            IndexService(os.path.join(config.root_dir, "index"), config.max_hash_slot_num, config.max_index_num)
            if config.message_index_enable else None)
        self.checkpoint = StoreCheckpoint(os.path.join(config.root_dir, "checkpoint"))
        self.abort_path = os.path.join(config.root_dir, "abort")
        self.tombstones = TopicTombstones(os.path.join(config.root_dir, TOMBSTONES_FILE))
        self.delay_levels_ms = config.delay_levels_ms()
        self.flush_service: FlushService | None = None
        self.retention = RetentionService(self, consumer_offsets)
        self.last_store_timestamp = 0
        self._listeners: list[ArrivalListener] = []
        self._topic_listeners: dict[str, list[ArrivalListener]] = {}  # topic -> listeners of its puts only
        self._topic_bytes: dict[str, bytes] = {}
        self._loaded = False
        self._started = False
        self._shutdown = False
        self.directory_lock = StoreDirectoryLock(self.root_dir)
        self._disk_check_at = 0
        self._disk_refuse_remark: str | None = None
        self.disk_used_ratio = 0.0
        # put_appends: commit-log appends (a batch or a run of sends stored together is one); flush_waits: SYNC_FLUSH
        # waits (one per put, or per run of sends)
        self.stats = {"put_messages": 0, "put_bytes": 0, "put_failures": 0, "put_appends": 0, "flush_waits": 0,
                      "get_found": 0,
                      "get_messages": 0, "get_misses": 0, "get_skipped_units": 0,
                      # what the last start-up recovery found unreadable in the commit log (recovery.py)
                      "recovery_corrupt_regions": 0, "recovery_corrupt_bytes": 0, "recovery_missing_units": 0}
        self._skip_log_at = 0.0
        self._skip_log_pending = 0
        # controller mode (controller.md §7): consumers see no record ending past this commit-log offset (the
        # confirmOffset of allAckInSyncStateSet); None: everything is visible
        self.visible_limit: int | None = None
        # a slave's log (append_replicated): where the next replicated record to dispatch starts; None when not
        # replicating (the next frame's records are dispatched from the log's end)
        self.replica_dispatched: int | None = None

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        """Open all files, run normal or abnormal recovery, create the ``abort`` marker.

        A store that cannot be opened raises StoreFileError with a one-line reason (no traceback for users)."""
        self.lock()
        self.disk_used_ratio = disk_used_ratio(self.config.commit_log_path)  # from boot, not after the first put
        abnormal = os.path.exists(self.abort_path)
        try:
            self.checkpoint.load()
            self.commit_log.load()
            self.tombstones.load()
            self._load_consume_queues()
            if self.index is not None:
                self.index.load()
            recover(self, abnormal)
            self.tombstones.prune(self.commit_log.min_offset)
            self.last_store_timestamp = max(self.checkpoint.physic_msg_timestamp, 0)
            self.checkpoint.confirm_phy_offset = 0  # only valid right after a clean shutdown
            with open(self.abort_path, "w") as f:
                f.write(str(os.getpid()))
        except OSError as exc:
            name = exc.filename or self.root_dir
            raise StoreFileError("cannot open the store file %s: %s" % (name, exc.strerror or exc)) from exc
        self.flush_service = FlushService(self, self._flush_observer)
        self._loaded = True

    def lock(self) -> None:
        """Own the store directory (StoreLockedError if another process does); idempotent. The broker calls it
        before reading its config files, load() otherwise."""
        if not self.directory_lock.held:
            self.directory_lock.acquire()

    @property
    def locked(self) -> bool:
        return self.directory_lock.held

    def unlock(self) -> None:
        self.directory_lock.release()

    def _load_consume_queues(self) -> None:
        if not os.path.isdir(self.cq_root):
            return
        for topic in sorted(os.listdir(self.cq_root)):
            tdir = os.path.join(self.cq_root, topic)
            if not os.path.isdir(tdir):
                continue
            for qname in sorted(os.listdir(tdir)):
                if not qname.lstrip("-").isdigit():
                    continue
                cq = ConsumeQueue(self.cq_root, topic, int(qname), self.config.mapped_file_size_consume_queue)
                cq.load()
                last = cq.last_unit()
                if last is not None and self.tombstones.is_dead(topic, last[0]):
                    # The process died between persisting the tombstone and removing the files.
                    log.warning("removing consume queue %s/%s of a deleted topic", topic, qname)
                    cq.destroy()
                    continue
                self.consume_queues.setdefault(topic, {})[int(qname)] = cq

    async def start(self) -> None:
        """Start flush and retention services."""
        if not self._loaded:
            self.load()
        if self._started:
            return
        self.flush_service.start()
        self.retention.start()
        self._started = True

    async def shutdown(self) -> None:
        """Stop services, flush everything, write the checkpoint with the end offset, remove ``abort``."""
        if self._shutdown or not self._loaded:
            return
        self._shutdown = True
        await self.retention.stop()
        fs = self.flush_service
        await fs.stop()
        await fs.flush_commit_log()
        await fs.flush_logics()
        self.checkpoint.confirm_phy_offset = self.commit_log.max_offset
        await asyncio.get_running_loop().run_in_executor(None, self.checkpoint.save)
        fs.close()
        self._close_files()
        remove_file(self.abort_path)
        self.unlock()
        self._started = False

    def close(self) -> None:
        """Release mappings and the lock without any clean-shutdown bookkeeping (as after a crash)."""
        self._shutdown = True
        if self.flush_service is not None:
            self.flush_service.abandon()
        if self.retention._task is not None:
            self.retention._task.cancel()
        self._close_files()
        self.unlock()

    def _close_files(self) -> None:
        self.commit_log.close()
        for cq in self.iter_consume_queues():
            cq.close()
        if self.index is not None:
            self.index.close()

    # ------------------------------------------------------------------ queues
    def iter_consume_queues(self) -> Iterator[ConsumeQueue]:
        for queues in self.consume_queues.values():
            yield from queues.values()

    def get_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self.consume_queues.get(topic)
        return queues.get(queue_id) if queues is not None else None

    def get_or_create_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queues = self.consume_queues.get(topic)
        if queues is None:
            queues = self.consume_queues[topic] = {}
        cq = queues.get(queue_id)
        if cq is None:
            cq = queues[queue_id] = ConsumeQueue(self.cq_root, topic, queue_id,
                                                 self.config.mapped_file_size_consume_queue)
        return cq

    def topics_and_queues(self) -> dict[str, list[int]]:
        return {topic: sorted(queues) for topic, queues in self.consume_queues.items()}

    def delete_topic(self, topic: str) -> None:
        """Delete the topic's ConsumeQueues (commit-log data expires normally).

        A tombstone (commit-log end offset now) is persisted first, so recovery never re-builds queues from the
        deleted incarnation's records; a re-created topic starts again at queue offset 0. Raises OSError when
        the tombstone cannot be written (nothing is deleted then)."""
        if self.commit_log.max_offset > self.commit_log.min_offset:
            self.tombstones.add(topic, self.commit_log.max_offset)
        queues = self.consume_queues.pop(topic, None)
        if queues:
            for cq in queues.values():
                cq.destroy()
        try:
            os.rmdir(os.path.join(self.cq_root, topic))
        except OSError:
            pass

    def is_deleted_record(self, topic: str, phys_offset: int) -> bool:
        """True when the commit-log record of ``topic`` at ``phys_offset`` predates a deletion of the topic."""
        return self.tombstones.is_dead(topic, phys_offset)

    # ------------------------------------------------------------------ disk
    def _disk_refusal(self, now_ms: int) -> str | None:
        """Cached (≈1 s) disk usage check; a remark when puts must be refused."""
        if now_ms >= self._disk_check_at:
            self._disk_check_at = now_ms + self.config.disk_check_interval_ms
            ratio = disk_used_ratio(self.config.commit_log_path)
            self.disk_used_ratio = ratio
            limit = self.config.disk_space_warning_level_ratio
            if ratio >= limit:
                if self._disk_refuse_remark is None:
                    log.error("disk usage %.1f%% >= %d%%: refusing new messages", ratio, limit)
                self._disk_refuse_remark = (
                    "service not available now: the broker's disk is full (%.1f%% used >= diskSpaceWarningLevelRatio "
                    "%d%%)" % (ratio, limit))
            else:
                self._disk_refuse_remark = None
        return self._disk_refuse_remark

    # ------------------------------------------------------------------ get
    def get_messages(self, topic: str, queue_id: int, offset: int, max_nums: int, max_bytes: int | None = None,
                     tag_filter: Callable[[int], bool] | None = None, max_scan: int = 800,
                     record_filter: Callable[[memoryview], bool] | None = None) -> GetResult:
        """Read up to ``max_nums`` records from ``offset`` (statuses per §4.4.3)."""
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            self.stats["get_misses"] += 1
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_off = cq.min_offset
        max_off = cq.max_offset
        if max_off == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
        if offset < min_off:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, max_off, min_off, max_off)
        cq_file = cq.file_for(offset)
        if cq_file is None:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.next_file_start(offset), min_off, max_off)
        if max_nums < 1:
            max_nums = 1
        if max_bytes is None:
            max_bytes = self.config.max_transfer_bytes_on_message_in_memory
        max_bytes = min(max_bytes, _PULL_HARD_CAP)
        filtered = tag_filter is not None or record_filter is not None
        scan = max(max_scan, max_nums) if filtered else max_nums
        cq_pos = offset * UNIT_SIZE - cq_file.file_from_offset
        scan = min(scan, max_off - offset, (cq_file.wrote_position - cq_pos) // UNIT_SIZE)
        units = cq_file.mm[cq_pos:cq_pos + scan * UNIT_SIZE]
        if self.visible_limit is not None:
            scan = _visible_units(units, scan, self.visible_limit)
            if not scan:  # nothing confirmed yet: as if at the queue's end (the pull is held)
                return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
            units = units[:scan * UNIT_SIZE]

        read = None
        if record_filter is None:  # per batch; None when the slice holds something the walk must look at
            read = read_unit_batch(self.commit_log.mfq, units, scan, max_nums, max_bytes, tag_filter)
        if read is None:
            read = self._read_units(units, max_nums, max_bytes, tag_filter, record_filter, False)
        if read is None:  # a record run did not end on a record boundary: some unit has a wrong size
            read = self._read_units(units, max_nums, max_bytes, tag_filter, record_filter, True)
        buffers, count, total, examined, missing, fillers = read
        if missing:
            self._log_skipped_units(topic, queue_id, offset, missing, self.commit_log.min_offset)
        next_begin = offset + examined
        if count:
            status = GetStatus.FOUND
            self.stats["get_found"] += 1
            self.stats["get_messages"] += count
        else:
            status = GetStatus.MESSAGE_WAS_REMOVING if missing or fillers else GetStatus.NO_MATCHED_MESSAGE
            self.stats["get_misses"] += 1
        return GetResult(status, next_begin, min_off, max_off, buffers, count, total)

    def _read_units(self, units: memoryview | bytes, max_nums: int, max_bytes: int,
                    tag_filter: Callable[[int], bool] | None, record_filter: Callable[[memoryview], bool] | None,
                    strict: bool) -> tuple[list, int, int, int, int, int] | None:
        """Collect the records the consume-queue ``units`` point at: (buffers, count, bytes, units examined, units
        skipped because their record is gone, recovery fillers stepped over).

        A unit must point at a record of its size inside the commit log. A unit that does not (file deleted, beyond
        the end, not a record, wrong size) ends the batch there once something was read, and is skipped while
        nothing was: a pull never moves past a message it did not return. Records are sliced as contiguous runs;
        the header is read for the first record of each run and the run's end must be a record boundary (one or two
        header reads per run instead of one per record). If a run's end is not, this returns None and the caller
        reads again with ``strict`` (every header read) to find the unit at fault."""
        cl = self.commit_log
        cl_min = cl.min_offset
        mfq = cl.mfq
        buffers: list = []
        count = total = examined = missing = fillers = 0
        run_file = None
        run_start = run_end = run_len = 0
        f_start = f_end = -1
        mf = mm = None
        head = _SIZE_MAGIC.unpack_from
        for phys, size, tags in CQ_UNIT.iter_unpack(units):
            if count and (count >= max_nums or total + size > max_bytes) and (size != FILLER_SIZE or count >= max_nums):
                break
            if tag_filter is not None and not tag_filter(tags):
                examined += 1
                continue
            if not (f_start <= phys and phys + size <= f_end and size >= MIN_RECORD_SIZE):
                if size == FILLER_SIZE:  # recovery's gap filler: no message there
                    examined += 1
                    fillers += 1
                    continue
                found = None if phys < cl_min or size < MIN_RECORD_SIZE else mfq.find(phys)
                if found is not None and phys + size <= found.file_from_offset + found.wrote_position:
                    mf = found
                    mm = mf.mm
                    f_start = mf.file_from_offset
                    f_end = f_start + mf.wrote_position
                else:  # nothing there: end the batch at the gap, or skip it while nothing was read
                    if count:
                        break
                    examined += 1
                    missing += 1
                    continue
            pos = phys - f_start
            contiguous = mf is run_file and pos == run_end
            if strict or not contiguous:
                rec_size, magic = head(mm, pos)
                if rec_size != size or (magic != MAGIC_V1 and magic != MAGIC_V2):  # not a record of this size
                    if count:
                        break
                    examined += 1
                    missing += 1
                    continue
            examined += 1
            if record_filter is not None and not record_filter(mf.view[pos:pos + size]):
                continue
            if contiguous:
                run_end = pos + size
                run_len += 1
            else:
                if run_file is not None:
                    if run_len > 1 and not strict and not ends_on_record(run_file, run_end):
                        return None
                    buffers.append(run_file.view[run_start:run_end])
                run_file = mf
                run_start = pos
                run_end = pos + size
                run_len = 1
            count += 1
            total += size
        if run_file is not None:
            if run_len > 1 and not strict and not ends_on_record(run_file, run_end):
                return None
            buffers.append(run_file.view[run_start:run_end])
        return buffers, count, total, examined, missing, fillers

    def _log_skipped_units(self, topic: str, queue_id: int, offset: int, count: int, cl_min: int) -> None:
        """Rate-limited report of consume-queue units skipped because their commit-log record is gone."""
        self.stats["get_skipped_units"] += count
        now = time.monotonic()
        if now < self._skip_log_at:
            self._skip_log_pending += count
            return
        self._skip_log_at = now + _SKIP_LOG_INTERVAL_S
        more, self._skip_log_pending = self._skip_log_pending, 0
        log.warning("pull %s/%d: skipped %d consume queue unit(s) from offset %d whose commit log record is gone "
                    "(deleted below commit log min offset %d, or invalid)%s", topic, queue_id, count, offset, cl_min,
                    "; %d more skipped since the last report" % more if more else "")

    # ------------------------------------------------------------------ offsets & time
    def get_max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def get_message_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """STORETIMESTAMP of the message at a queue offset, -1 if unavailable."""
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return -1
        unit = cq.get_unit(offset)
        if unit is None or unit[0] < self.commit_log.min_offset:
            return -1
        return self.commit_log.store_timestamp_at(unit[0])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None or cq.max_offset <= cq.min_offset:
            return -1
        return self.get_message_store_time(topic, queue_id, cq.min_offset)

    def get_offset_by_time(self, topic: str, queue_id: int, ts_ms: int, upper: bool = False) -> int:
        """LOWER: first offset stored at/after ``ts_ms`` (max offset if none); UPPER: last offset stored
        at/before ``ts_ms`` (0 if none). Binary search over store timestamps (non-decreasing per queue)."""
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        if lo >= hi:
            return hi if not upper else 0
        store_time = self._unit_store_time
        if not upper:
            while lo < hi:  # first offset with time >= ts
                mid = (lo + hi) // 2
                if store_time(cq, mid) >= ts_ms:
                    hi = mid
                else:
                    lo = mid + 1
            return lo
        first, lo, hi = lo, lo, hi
        while lo < hi:  # first offset with time > ts
            mid = (lo + hi) // 2
            if store_time(cq, mid) > ts_ms:
                hi = mid
            else:
                lo = mid + 1
        return lo - 1 if lo > first else 0

    def _unit_store_time(self, cq: ConsumeQueue, offset: int) -> int:
        unit = cq.get_unit(offset)
        if unit is None:
            return -1
        return self.commit_log.store_timestamp_at(unit[0])

    # ------------------------------------------------------------------ lookups
    @property
    def commit_log_min_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def commit_log_max_offset(self) -> int:
        return self.commit_log.max_offset

    def look_message_by_offset(self, phys_offset: int, size: int | None = None) -> bytes | None:
        """The raw record at a commit-log offset (None if there is no record there)."""
        if phys_offset < self.commit_log.min_offset or phys_offset >= self.commit_log.max_offset:
            return None
        return self.commit_log.read_record(phys_offset, size)

    # ---- replication (a slave's log is written by its master's bytes) ---------------------------------
    def append_replicated(self, offset: int, data: bytes) -> int:
        """Write a frame of the master's log at its offset, then dispatch the records it completed to the consume
        queues and index (a record cut by the frame's end waits for the next one). Returns the new log end.
        Raises ValueError when offset is not this log's end, IllegalRecordError (the bytes from that record on are
        cut again, nothing of it is dispatched) when a complete record has an illegal topic or queue id."""
        cl = self.commit_log
        dispatched = self.replica_dispatched
        if dispatched is None or not cl.mfq.files:
            dispatched = cl.max_offset if cl.mfq.files else offset
        cl.append_raw(offset, data)
        end = cl.max_offset
        last = dispatched
        for mf, pos, size in cl.iter_record_positions(dispatched, end):
            last = mf.file_from_offset + pos + size
        stopped_in = cl.mfq.find(last) if last < end else None
        if stopped_in is not None:  # a complete record whose topic or queue id would become a bad path: refuse it
            base = stopped_in.file_from_offset
            problem = record_names_problem_at(stopped_in.mm, last - base, min(cl.file_size, end - base))
            if problem is not None:
                cl.cut_tail(last)
                self.replica_dispatched = last
                redispatch(self, dispatched, last)
                raise IllegalRecordError(f"the record at commit log offset {last} is refused: {problem}")
        redispatch(self, dispatched, end)
        if last == dispatched and end - dispatched >= 8:
            nxt = cl.mfq.find(dispatched)
            if nxt is not None and nxt.file_from_offset + cl.file_size <= end:
                last = nxt.file_from_offset + cl.file_size  # only a BLANK marker and padding were left
        self.replica_dispatched = last
        self.last_store_timestamp = int(time.time() * 1000)
        return end

    def look_record(self, phys_offset: int) -> MessageRecord | None:
        """The decoded record at a commit-log offset; None when there is none or it does not decode."""
        if phys_offset < 0:
            return None
        try:
            raw = self.look_message_by_offset(phys_offset)
            return decode_record(raw) if raw else None
        except (RecordError, ValueError, IndexError):
            return None

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> QueryResult:
        """Records indexed under ``topic#key`` (UNIQ_KEY or a KEYS entry) stored within [begin_ts, end_ts]."""
        index = self.index
        if index is None:
            return QueryResult([], 0, 0)
        records: list[bytes] = []
        cl_min = self.commit_log.min_offset
        seen = set()
        for phys in index.query(topic, key, max_num + 16, begin_ts, end_ts):  # room for hash collisions
            if len(records) >= max_num:
                break
            if phys in seen or phys < cl_min or self.tombstones.is_dead(topic, phys):
                continue
            seen.add(phys)
            raw = self.look_message_by_offset(phys)
            if raw is None:
                continue
            try:  # the index stores hashes only: keep real matches
                rec = decode_record(raw)
            except ValueError:
                continue
            if rec.topic != topic:
                continue
            if rec.properties.get("UNIQ_KEY") != key and key not in rec.properties.get("KEYS", "").split(" "):
                continue
            records.append(raw)
        return QueryResult(records, index.last_update_timestamp, index.last_phy_offset)

    # ------------------------------------------------------------------ maintenance
    async def flush(self) -> None:
        """Flush commit log, consume queues, index and checkpoint now."""
        await self.flush_service.flush_commit_log()
        await self.flush_service.flush_logics()

    def clean_expired_files(self, **kwargs) -> list[str]:
        """Run one retention pass now (see RetentionService.clean_once)."""
        return self.retention.clean_once(**kwargs)

    def runtime_stats(self) -> dict[str, object]:
        return dict(self.stats, commit_log_min_offset=self.commit_log.min_offset,
                    commit_log_max_offset=self.commit_log.max_offset,
                    commit_log_flushed_offset=self.flush_service.commit_log_flushed_offset
                    if self.flush_service else 0,
                    disk_used_ratio=self.disk_used_ratio, topics=len(self.consume_queues))
