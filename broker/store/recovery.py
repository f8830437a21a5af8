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
        tail = cl.mfq.find(end)
        if tail is not None and any(tail.mm[end - tail.file_from_offset:end - tail.file_from_offset + 8]):
            log.warning("abnormal recovery: invalid or torn record at commit log offset %d; dropping everything "
                        "from there on", end)
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


_HEAD = struct.Struct(">iiiiiqqi")  # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_LONG = struct.Struct(">q")


def _redispatch(store: MessageStore, start: int, end: int) -> int:
    """Re-build CQ units and index entries for records in [start, end) that are missing.

    Only the fixed fields and the topic are parsed for records that are already dispatched;
    properties are decoded only for records that need a CQ unit or index entries."""
    cl = store.commit_log
    index = store.index
    index_from = index.last_phy_offset if index is not None and index.files else -1
    delay_levels = store.delay_levels_ms
    topics: dict[bytes, str] = {}
    count = 0
    for mf, pos, size in cl.iter_record_positions(start, end):
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
        topic = topics.get(raw_topic)
        if topic is None:
            topic = topics[raw_topic] = raw_topic.decode("utf-8", "replace")
        if store.is_deleted_record(topic, phys):
            continue  # a deleted incarnation of the topic: its queues and index entries stay gone
        cq = None
        if tran not in _NO_CQ_TYPES:
            cq = store.get_or_create_consume_queue(topic, queue_id)
            if queue_offset < cq.max_offset:
                cq = None  # already present
        if cq is None and not need_index:
            continue
        p += topic_len
        props_len = _SHORT.unpack_from(mm, p)[0]
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
    return count
