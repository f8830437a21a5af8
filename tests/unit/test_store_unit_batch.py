"""The per-batch pull path (broker/store/unit_batch.py) answers exactly as the per-unit walk of the store
(MessageStore._read_units) does: same records, counts, bytes and next offsets for unfiltered and TAG-filtered pulls,
under every count and byte limit, over records interleaved between queues and files, and over slices the batch path
hands back to the walk (recovery fillers, records removed by retention, units with a wrong size, a replica's visible
limit)."""

from __future__ import annotations

import random

import pytest

import broker.store.message_store as message_store
from broker.store import GetStatus
from broker.store.consume_queue import CQ_UNIT, UNIT_SIZE
from broker.store.unit_batch import read_unit_batch, unit_columns
from protocol.hashing import tags_code
from protocol.message import iter_records

from tests.support.store import make_msg, open_store

TAGS = ["TagA", "TagB", "TagC", "TagD"]


def _answer(store, *args, **kwargs) -> tuple:
    g = store.get_messages(*args, **kwargs)
    return (g.status, g.next_begin_offset, g.min_offset, g.max_offset, g.message_count, g.buffer_total_size,
            g.body())


def _walk_only(monkeypatch):
    monkeypatch.setattr(message_store, "read_unit_batch", lambda *args: None)


def _both(store, monkeypatch, *args, **kwargs) -> tuple:
    """The answer of the batch path, checked equal to the walk's."""
    batch = _answer(store, *args, **kwargs)
    with monkeypatch.context() as m:
        _walk_only(m)
        walk = _answer(store, *args, **kwargs)
    assert batch == walk, (args, kwargs)
    return batch


async def _fill(store, rng: random.Random, count: int, queues: int = 3) -> None:
    sent = 0
    while sent < count:
        n = rng.choice([1, 2, 5, 17, 40])
        queue_id = rng.randrange(queues)
        msgs = [make_msg(sent + i, queue_id=queue_id, tag=rng.choice(TAGS), body=b"b" * rng.randrange(1, 300))
                for i in range(n)]
        assert (await store.put_messages(msgs)).ok
        sent += n


def test_unit_columns_unpack_any_count() -> None:
    units = b"".join(CQ_UNIT.pack(i * 1000, 100 + i, -i) for i in range(700))
    for count in (0, 1, 2, 3, 127, 255, 256, 257, 511, 512, 700):
        phys, sizes, tags = unit_columns(memoryview(units), count)
        assert phys == [i * 1000 for i in range(count)] and sizes == [100 + i for i in range(count)]
        assert tags == [-i for i in range(count)]


async def test_batch_equals_walk_under_every_limit(tmp_path, monkeypatch) -> None:
    store = open_store(tmp_path)
    rng = random.Random(29)
    await _fill(store, rng, 1500)
    codes = {tag: tags_code(tag) for tag in TAGS}
    filters = [None, {codes["TagA"]}.__contains__, {codes["TagB"], codes["TagD"]}.__contains__,
               {tags_code("nothing")}.__contains__]
    for queue_id in range(3):
        max_off = store.get_max_offset("TopicTest", queue_id)
        for _ in range(60):
            offset = rng.randrange(max_off + 1)
            max_nums = rng.choice([1, 2, 7, 32, 100, 500])
            max_bytes = rng.choice([1, 200, 1000, 5000, 1 << 20])
            tag_filter = rng.choice(filters)
            _both(store, monkeypatch, "TopicTest", queue_id, offset, max_nums, max_bytes=max_bytes,
                  tag_filter=tag_filter, max_scan=rng.choice([1, 10, 800]))
    # and whole queues read to their end with each filter: every record once
    for tag_filter in filters:
        for queue_id, (max_nums, max_bytes, max_scan) in enumerate([(64, 4096, 800), (1, 1 << 20, 10),
                                                                     (3, 1 << 20, 12)]):
            offset, seen = 0, 0
            while True:
                answer = _both(store, monkeypatch, "TopicTest", queue_id, offset, max_nums, max_bytes=max_bytes,
                               tag_filter=tag_filter, max_scan=max_scan)
                if answer[0] not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
                    break
                seen += len(list(iter_records(answer[6])))
                offset = answer[1]
            assert offset == store.get_max_offset("TopicTest", queue_id)
    store.close()


async def test_batch_hands_unusual_slices_to_the_walk(tmp_path, monkeypatch) -> None:
    store = open_store(tmp_path)
    rng = random.Random(7)
    await _fill(store, rng, 800, queues=2)
    cq = store.get_consume_queue("TopicTest", 0)
    tag_a = {tags_code("TagA")}.__contains__
    # a recovery filler in the middle: the batch path declines, the walk steps over it
    cq.mark_missing(cq.min_offset + 5)
    mf = cq.file_for(cq.min_offset)
    pos = cq.min_offset * UNIT_SIZE - mf.file_from_offset
    assert read_unit_batch(store.commit_log.mfq, mf.mm[pos:pos + 10 * UNIT_SIZE], 10, 32, 1 << 20, None) is None
    for offset in range(cq.min_offset, cq.min_offset + 8):
        for tag_filter in (None, tag_a):
            _both(store, monkeypatch, "TopicTest", 0, offset, 32, tag_filter=tag_filter)
    # a unit whose size is not its record's: the walk ends the batch before it
    unit_offset = cq.min_offset + 20
    phys, size, tags = cq.get_unit(unit_offset)
    umf = cq.file_for(unit_offset)
    CQ_UNIT.pack_into(umf.mm, unit_offset * UNIT_SIZE - umf.file_from_offset, phys, size + 1, tags)
    for offset in range(unit_offset - 3, unit_offset + 2):
        for tag_filter in (None, tag_a):
            _both(store, monkeypatch, "TopicTest", 0, offset, 32, tag_filter=tag_filter)
    # records removed by retention: the first commit-log file goes, its units point at nothing
    first = store.commit_log.mfq.files[0]
    store.commit_log.mfq.remove_first(1)
    first.destroy()
    cq_min = cq.min_offset
    for offset in range(cq_min, cq_min + 40, 3):
        for tag_filter in (None, tag_a):
            answer = _both(store, monkeypatch, "TopicTest", 0, offset, 32, tag_filter=tag_filter)
            assert answer[0] in (GetStatus.FOUND, GetStatus.MESSAGE_WAS_REMOVING, GetStatus.NO_MATCHED_MESSAGE)
    store.close()


@pytest.mark.parametrize("tagged", [False, True])
async def test_visible_limit_is_kept(tmp_path, monkeypatch, tagged) -> None:
    store = open_store(tmp_path)
    await _fill(store, random.Random(3), 300, queues=1)
    cq = store.get_consume_queue("TopicTest", 0)
    phys, size, _ = cq.get_unit(100)
    store.visible_limit = phys + size  # offsets 0..100 are confirmed
    tag_filter = {tags_code("TagC")}.__contains__ if tagged else None
    offset = 0
    while True:
        answer = _both(store, monkeypatch, "TopicTest", 0, offset, 32, tag_filter=tag_filter)
        if answer[0] not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
            break
        offset = answer[1]
    assert offset == 101 and answer[0] is GetStatus.OFFSET_OVERFLOW_ONE
    store.close()
