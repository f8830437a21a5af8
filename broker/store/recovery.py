"""Startup recovery: find the valid end of the commit log and make CQs/index agree with it.

Normal (clean shutdown, no ``abort`` file): the offset recorded at shutdown (checkpoint confirmPhyOffset) is the
end; nothing valid may follow it, and the last ``NORMAL_VERIFY_BYTES`` before it are verified (magic, sizes, body
CRC). Without that offset the last three files are verified.
Abnormal (``abort`` present): records are verified from the newest file older than the checkpoint's min
timestamp - 3 s; the torn tail (damage with nothing valid after it) is cut.
Either way, damage followed by valid records is an unreadable *region* (log_scan): reported (log line,
``stats``), its consume-queue units read as missing, and nothing after it is lost. Consume queues that do not
cover the commit log (deleted, cut short, lost at a crash) are re-built from it by re-dispatching what they miss.
"""

from __future__ import annotations

import logging
import struct
import time
from typing import TYPE_CHECKING

from protocol.hashing import tags_code as compute_tags_code
from protocol.message import (
    BORNHOST_V6_FLAG,
    MAGIC_V2,
    STOREHOST_V6_FLAG,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    check_record,
)
from protocol.properties import decode_properties

import broker.store.log_scan as log_scan  # the module itself (tests spy on it), not the package
from .consume_queue import FILLER_SIZE

if TYPE_CHECKING:  # pragma: no cover
    from .message_store import MessageStore

log = logging.getLogger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
NORMAL_VERIFY_BYTES = 16 << 20  # verified with CRC before the clean-shutdown offset at a normal start
MAX_REGION_LOG_LINES = 20
_DAY_MS = 86_400_000
_NO_CQ_TYPES = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


def schedule_tags_code(properties: dict[str, str], queue_id: int, store_timestamp: int,
                       delay_levels_ms: list[int]) -> int:
    """tagsCode of a SCHEDULE_TOPIC_XXXX record: its delivery time (§5.5)."""
    try:
        level = int(properties.get("DELAY", "0"))
    except ValueError:
        level = 0
    if level <= 0:
        level = queue_id + 1
    if not delay_levels_ms:
        return store_timestamp
    level = min(level, len(delay_levels_ms))
    return store_timestamp + delay_levels_ms[level - 1]


def recover(store: MessageStore, abnormal: bool) -> None:
    """Run the recovery appropriate to how the previous process ended."""
    started = time.monotonic()
    cl = store.commit_log
    cp = store.checkpoint
    _check_checkpoint(store)
    files = cl.mfq.files
    redispatch_from = None
    verified_from = None  # the abnormal scan checked every record from here to `end`
    regions: list[log_scan.Region] = []
    if not files:
        end = cl.max_offset
    elif not abnormal:
        end, regions = _normal_end(store)
    else:
        start_ts = cp.min_timestamp(store.config.message_index_enable) - 3000
        start = files[cl.find_recover_start(start_ts)].file_from_offset
        if cl.cut_at is not None:
            start = min(start, files[-1].file_from_offset)
        result = log_scan.scan(cl, start, verify_crc=True)
        end, regions = result.end, result.regions
        redispatch_from = verified_from = start
        _log_torn_tail(cl, end)
    cl.set_end(end)
    cl.corrupt_regions = [(r.start, r.end) for r in regions]
    truncated = 0
    for cq in store.iter_consume_queues():
        truncated += cq.truncate_beyond(end)
    if truncated:
        log.warning("recovery: dropped %d consume queue units pointing beyond the commit log end", truncated)
    missing_units = _report_regions(store, regions)
    uncovered = _first_uncovered(store, end)
    if uncovered is not None and (redispatch_from is None or uncovered < redispatch_from):
        log.warning("recovery: consume queues cover the commit log up to offset %d of %d (missing or cut "
                    "short): re-building them from there", uncovered, end)
        redispatch_from = uncovered
    redispatched = 0
    if redispatch_from is not None and redispatch_from < end:
        redispatched, again_from = redispatch(store, redispatch_from, end, find_gaps=True,
                                              verified_from=verified_from)
        if again_from is not None:
            log.warning("recovery: consume queues miss records from before offset %d: re-building them from "
                        "offset %d", redispatch_from, min(again_from, redispatch_from))
            redispatched += redispatch(store, min(again_from, redispatch_from), end)[0]
    cl_min = cl.min_offset
    for cq in store.iter_consume_queues():
        cq.correct_min_offset(cl_min)
    store.stats["recovery_corrupt_regions"] = len(regions)
    store.stats["recovery_corrupt_bytes"] = sum(r.size for r in regions)
    store.stats["recovery_missing_units"] = missing_units
    log.info("store recovery (%s) done in %.3fs: commit log [%d, %d), %d records re-dispatched, %d unreadable "
             "regions", "abnormal" if abnormal else "normal", time.monotonic() - started, cl_min, end, redispatched,
             len(regions))


def _check_checkpoint(store: MessageStore) -> None:
    """Ignore a checkpoint whose values cannot be right (garbage, another format): verify the log instead."""
    cp = store.checkpoint
    now = store._clock_ms() if store._clock_ms is not None else int(time.time() * 1000)
    stamps = (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp)
    offsets = (cp.master_flushed_offset, cp.confirm_phy_offset)
    if all(0 <= t <= now + _DAY_MS for t in stamps) and all(0 <= o < 1 << 56 for o in offsets):
        return
    log.warning("checkpoint %s holds implausible values (timestamps %s, offsets %s): ignoring it and verifying "
                "the commit log instead", cp.path, stamps, offsets)
    cp.physic_msg_timestamp = cp.logics_msg_timestamp = cp.index_msg_timestamp = 0
    cp.master_flushed_offset = cp.confirm_phy_offset = 0


def _normal_end(store: MessageStore) -> tuple[int, list[log_scan.Region]]:
    cl = store.commit_log
    files = cl.mfq.files
    confirm = store.checkpoint.confirm_phy_offset
    if confirm > 0 and files[0].file_from_offset <= confirm <= files[-1].end_offset:
        regions = []
        end = confirm
        mf = cl.mfq.find(confirm)
        if mf is not None and check_record(mf.mm, confirm - mf.file_from_offset, cl.file_size, False) != 0:
            # Something valid follows (e.g. written by another broker version): verify it and keep it.
            after = log_scan.scan(cl, confirm, verify_crc=True)
            end, regions = after.end, after.regions
            _log_torn_tail(cl, end)
        before = _verify_before(cl, confirm)
        if before is not None:
            return end, before + regions
        log.warning("recovery: the checkpoint's end offset %d is not where the records end: verifying the last "
                    "files instead", confirm)
    result = log_scan.scan(cl, files[max(0, len(files) - 3)].file_from_offset, verify_crc=True)
    _log_torn_tail(cl, result.end)
    return result.end, result.regions


def _verify_before(cl, confirm: int) -> list[log_scan.Region] | None:
    """Verify (magic, sizes, CRC) the last NORMAL_VERIFY_BYTES before a clean shutdown's end offset, and all of a
    last file that was cut short; damage there is a region. None if the records do not end at ``confirm``."""
    first_file = cl.mfq.files[0].file_from_offset
    start = max(first_file, confirm - NORMAL_VERIFY_BYTES)
    if cl.cut_at is not None:
        start = min(start, cl.mfq.files[-1].file_from_offset)
    mf = cl.mfq.find(start)
    if mf is None or mf.file_from_offset != start:
        first = log_scan.find_record_start(cl, start, confirm, True)
        if first is None:
            log.warning("recovery: no verifiable record in the %d bytes before offset %d", confirm - start, confirm)
            return []
        start = first
    result = log_scan.scan(cl, start, verify_crc=True, stop=confirm, trusted_end=confirm)
    return result.regions if result.end == confirm else None


def _log_torn_tail(cl, end: int) -> None:
    tail = cl.mfq.find(end)
    if tail is not None and any(tail.mm[end - tail.file_from_offset:end - tail.file_from_offset + 8]):
        log.warning("recovery: invalid or torn record at commit log offset %d (%s) with nothing valid after it; "
                    "the log ends there", end, log_scan.describe_damage(cl, end, True))


def _report_regions(store: MessageStore, regions: list[log_scan.Region]) -> int:
    """Log each unreadable region and make the consume-queue units pointing into it read as missing."""
    if not regions:
        return 0
    cl = store.commit_log
    total = 0
    for n, region in enumerate(regions):
        hit = []
        for cq in store.iter_consume_queues():
            for offset in cq.offsets_pointing_into(region.start, region.end):
                unit = cq.get_unit(offset)
                if unit is not None and unit[1] != FILLER_SIZE:
                    cq.mark_missing(offset)
                    hit.append("%s/%d@%d" % (cq.topic, cq.queue_id, offset))
        total += len(hit)
        if n < MAX_REGION_LOG_LINES:
            mf = cl.mfq.find(region.start)
            where = ("%s +%d" % (mf.path, region.start - mf.file_from_offset) if mf is not None
                     else "a missing file")
            log.error("commit log damaged: %d unreadable bytes at offset %d (%s): %s; valid records after it are "
                      "kept; %d consume queue unit(s) there now read as missing%s", region.size, region.start,
                      where, region.reason, len(hit), (": " + ", ".join(hit[:10])) if hit else "")
    if len(regions) > MAX_REGION_LOG_LINES:
        log.error("commit log damaged: %d more unreadable regions not listed", len(regions) - MAX_REGION_LOG_LINES)
    return total


def _first_uncovered(store: MessageStore, end: int) -> int | None:
    """Lowest commit-log offset the consume queues may be missing records from (None: they cover all).

    Like the reference, a healthy set of queues covers the log up to the furthest record any of them holds; a
    queue whose file was cut short covers only up to its own last record; no queue at all covers nothing."""
    cl = store.commit_log
    furthest = None
    damaged = None
    for cq in store.iter_consume_queues():
        covered = _verified_cover(cl, cq)
        if cq.damaged:
            low = covered if covered is not None else cl.min_offset
            damaged = low if damaged is None else min(damaged, low)
        elif covered is not None and (furthest is None or covered > furthest):
            furthest = covered
    start = furthest if furthest is not None else cl.min_offset
    if damaged is not None:
        start = min(start, damaged)
    start = max(start, cl.min_offset)
    for region_start, region_end in cl.corrupt_regions:  # nothing to re-build from unreadable bytes
        if region_start <= start < region_end:
            start = region_end
    return start if start < end else None


def _verified_cover(cl, cq) -> int | None:
    """End of a queue's newest record if the commit log confirms it (a record boundary), else the start of the
    file holding it; None if the queue holds nothing."""
    newest = cq.newest_record()
    if newest is None:
        return None
    phys, size = newest
    covered = phys + size
    if log_scan.record_size_at(cl, phys, False) == size:
        return covered
    mf = cl.mfq.find(covered)
    return mf.file_from_offset if mf is not None else covered


_UNIQ_KEY_NAME = b"UNIQ_KEY\x01"
_KEYS_NAME = b"KEYS\x01"
_HEAD = struct.Struct(">iiiiiqqi")  # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_LONG = struct.Struct(">q")


def redispatch(store: MessageStore, start: int, end: int, find_gaps: bool = False,
               verified_from: int | None = None) -> tuple[int, int | None]:
    """Re-build CQ units and index entries for records in [start, end) that are missing; returns how many CQ
    units were written and, with ``find_gaps``, the offset to start again from when a queue misses records from
    before ``start`` (those records are then left for that second pass instead of being filled over).

    Only the fixed fields and the topic are parsed for records that are already dispatched;
    properties are decoded only for records that need a CQ unit or index entries."""
    cl = store.commit_log
    index = store.index
    index_from = index.last_phy_offset if index is not None and index.files else -1
    delay_levels = store.delay_levels_ms
    topics: dict[bytes, str] = {}
    queues: dict[tuple[bytes, int], object] = {}  # (raw topic, queue id) -> its consume queue, once looked up
    count = 0
    again_from = None
    for mf, pos, size in cl.iter_record_positions(start, end, verified_from):
        mm = mf.mm
        phys = mf.file_from_offset + pos
        _total, magic, _crc, queue_id, _flag, queue_offset, _phys, sys_flag = _HEAD.unpack_from(mm, pos)
        tran = sys_flag & 0xC
        need_index = index is not None and tran != TRANSACTION_ROLLBACK_TYPE and phys > index_from
        born_len = 20 if sys_flag & BORNHOST_V6_FLAG else 8
        store_len = 20 if sys_flag & STOREHOST_V6_FLAG else 8
        p = pos + 48 + born_len + 8 + store_len + 12
        body_len = _INT.unpack_from(mm, p)[0]
        p += 4 + body_len
        if magic == MAGIC_V2:
            topic_len = _SHORT.unpack_from(mm, p)[0]
            p += 2
        else:
            topic_len = mm[p]
            p += 1
        raw_topic = mm[p:p + topic_len]
        if not need_index and tran not in _NO_CQ_TYPES:  # the common case: already in its queue, skip at once
            known = queues.get((raw_topic, queue_id))
            if known is not None and queue_offset < known.max_offset:
                continue
        topic = topics.get(raw_topic)
        if topic is None:
            topic = topics[raw_topic] = raw_topic.decode("utf-8", "replace")
        if store.is_deleted_record(topic, phys):
            continue  # a deleted incarnation of the topic: its queues and index entries stay gone
        cq = None
        if tran not in _NO_CQ_TYPES:
            cq = store.get_or_create_consume_queue(topic, queue_id)
            queues[(raw_topic, queue_id)] = cq
            if queue_offset < cq.max_offset:
                cq = None  # already present
            elif find_gaps and queue_offset > cq.max_offset:
                gap_from = _gap_start(cl, cq)
                again_from = gap_from if again_from is None else min(again_from, gap_from)
                cq = None
        if cq is None and not need_index:
            continue
        p += topic_len
        props_len = _SHORT.unpack_from(mm, p)[0]
        if cq is None and (props_len <= 0 or (_UNIQ_KEY_NAME not in (raw := mm[p + 2:p + 2 + props_len])
                                              and _KEYS_NAME not in raw)):
            continue  # only the index could need it, and it has no key to index
        props = decode_properties(mm[p + 2:p + 2 + props_len].decode("utf-8", "replace")) if props_len > 0 else {}
        store_ts = _LONG.unpack_from(mm, pos + 48 + born_len)[0]
        if cq is not None:
            if topic == SCHEDULE_TOPIC:
                tags = schedule_tags_code(props, queue_id, store_ts, delay_levels)
            else:
                tags = compute_tags_code(props.get("TAGS"))
            cq.put_at(queue_offset, phys, size, tags)
            count += 1
        if need_index:
            keys = []
            uniq = props.get("UNIQ_KEY")
            if uniq:
                keys.append(uniq)
            for key in props.get("KEYS", "").split(" "):
                if key:
                    keys.append(key)
            if keys:
                index.put(index.hasher.hash_many(topic, keys), [phys] * len(keys), store_ts)
    return count, again_from


def _gap_start(cl, cq) -> int:
    """Where to re-dispatch from to find what a queue misses: its newest record (or its file), else the log start."""
    newest = cq.newest_record()
    if newest is None:
        return cl.min_offset
    phys, size = newest
    if log_scan.record_size_at(cl, phys, False) == size:
        return phys
    mf = cl.mfq.find(phys)
    return mf.file_from_offset if mf is not None else cl.min_offset
