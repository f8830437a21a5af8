"""Startup recovery: find the valid end of the commit log and make CQs/index agree with it.

Normal (clean shutdown, no ``abort`` file): trust the offset recorded at shutdown
(checkpoint confirmPhyOffset), checking that nothing valid follows it; without it,
scan the last three files (magic + sizes).
Abnormal (``abort`` present): verify records by magic, sizes and body CRC from the
newest file older than the checkpoint's min timestamp - 3 s, cut the torn tail,
truncate CQ units beyond the end and re-dispatch records missing from CQs/index.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from protocol.hashing import tags_code as compute_tags_code
from protocol.message import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, check_record, decode_record
from protocol.properties import decode_properties

if TYPE_CHECKING:  # pragma: no cover
    from .message_store import MessageStore

log = logging.getLogger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
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
    files = cl.mfq.files
    redispatch_from = None
    if not files:
        end = cl.max_offset
    elif not abnormal:
        end = _normal_end(store)
    else:
        start_ts = cp.min_timestamp(store.config.message_index_enable) - 3000
        start_idx = cl.find_recover_start(start_ts)
        end = cl.scan_valid_end(start_idx, verify_crc=True)
        redispatch_from = files[start_idx].file_from_offset
        if end < cl.mfq.max_offset:
            log.warning("abnormal recovery: commit log valid up to %d; dropping everything after it", end)
    cl.set_end(end)
    truncated = 0
    for cq in store.iter_consume_queues():
        truncated += cq.truncate_beyond(end)
    if truncated:
        log.warning("recovery: dropped %d consume queue units pointing beyond the commit log end", truncated)
    redispatched = 0
    if redispatch_from is not None and redispatch_from < end:
        redispatched = _redispatch(store, redispatch_from, end)
    cl_min = cl.min_offset
    for cq in store.iter_consume_queues():
        cq.correct_min_offset(cl_min)
    log.info("store recovery (%s) done in %.3fs: commit log [%d, %d), %d records re-dispatched",
             "abnormal" if abnormal else "normal", time.monotonic() - started, cl_min, end, redispatched)


def _normal_end(store: MessageStore) -> int:
    cl = store.commit_log
    files = cl.mfq.files
    fsize = cl.file_size
    confirm = store.checkpoint.confirm_phy_offset
    if confirm > 0 and files[0].file_from_offset <= confirm <= files[-1].end_offset:
        if confirm == files[-1].end_offset:
            return confirm
        mf = cl.mfq.find(confirm)
        if mf is not None:
            r = check_record(mf.mm, confirm - mf.file_from_offset, fsize, False)
            if r == 0:
                return confirm
            # Something valid follows (e.g. written by another broker version): scan from there.
            return cl.scan_valid_end(files.index(mf), verify_crc=False)
    return cl.scan_valid_end(max(0, len(files) - 3), verify_crc=False)


def _redispatch(store: MessageStore, start: int, end: int) -> int:
    """Re-build CQ units and index entries for records in [start, end) that are missing."""
    cl = store.commit_log
    index = store.index
    index_from = index.last_phy_offset if index is not None and index.files else -1
    delay_levels = store.delay_levels_ms
    count = 0
    for mf, pos, size in cl.iter_record_positions(start, end):
        phys = mf.file_from_offset + pos
        rec = decode_record(mf.mm, pos, decode_properties=False)
        tran = rec.sys_flag & 0xC
        cq = None
        if tran not in _NO_CQ_TYPES:
            cq = store.get_or_create_consume_queue(rec.topic, rec.queue_id)
            if rec.queue_offset < cq.max_offset:
                cq = None  # already present
        need_index = index is not None and tran != TRANSACTION_ROLLBACK_TYPE and phys > index_from
        if cq is None and not need_index:
            continue
        props = decode_properties(rec.raw_properties.decode("utf-8", "replace")) if rec.raw_properties else {}
        if cq is not None:
            if rec.topic == SCHEDULE_TOPIC:
                tags = schedule_tags_code(props, rec.queue_id, rec.store_timestamp, delay_levels)
            else:
                tags = compute_tags_code(props.get("TAGS"))
            cq.put_at(rec.queue_offset, phys, size, tags)
            count += 1
        if need_index:
            hashes = []
            hasher = index.hasher
            uniq = props.get("UNIQ_KEY")
            if uniq:
                hashes.append(hasher(rec.topic, uniq))
            keys = props.get("KEYS")
            if keys:
                for key in keys.split(" "):
                    if key:
                        hashes.append(hasher(rec.topic, key))
            if hashes:
                index.put(hashes, [phys] * len(hashes), rec.store_timestamp)
    return count
