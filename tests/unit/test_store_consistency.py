"""The store serves exactly what was acknowledged: pulls never skip past a message they did not return, and a
deleted topic's records never come back through recovery (issue 11)."""

from __future__ import annotations

import json
import logging
import os

from protocol.message import iter_records

from broker.store import GetStatus, PutStatus
from broker.store.consume_queue import CQ_UNIT, FILLER_SIZE, UNIT_SIZE

from tests.support.store import make_msg, open_store


async def fill(store, n, topic="TopicTest", start=0, body=b"p" * 400, queue_id=0):
    for i in range(start, start + n):
        r = await store.put_message(make_msg(i, topic=topic, body=body, keys="key-%d" % i, queue_id=queue_id))
        assert r.status is PutStatus.PUT_OK


def pull_all(store, topic="TopicTest", queue_id=0, batch=32):
    """(results, records): every pull from offset 0 until the queue end, bounded."""
    results, recs, offset = [], [], 0
    for _ in range(1000):
        g = store.get_messages(topic, queue_id, offset, batch)
        if g.status in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
            return results, recs
        results.append((offset, g))
        recs.extend(iter_records(g.body()))
        offset = g.next_begin_offset
    raise AssertionError("too many pulls")


def readable(store, topic="TopicTest", queue_id=0) -> set[int]:
    """Queue offsets whose unit points at an intact record of its size."""
    cq = store.get_consume_queue(topic, queue_id)
    out = set()
    for off in range(cq.min_offset, cq.max_offset):
        phys, size, _tags = cq.get_unit(off)
        raw = store.look_message_by_offset(phys)
        if raw is not None and len(raw) == size:
            out.add(off)
    return out


def assert_never_skips(results, present: set[int]) -> None:
    """Every offset a pull moved past is either returned by that pull or has no record."""
    for offset, g in results:
        got = {r.queue_offset for r in iter_records(g.body())}
        passed = set(range(offset, g.next_begin_offset))
        skipped = (passed - got) & present
        assert not skipped, f"pull at {offset} -> {g} skipped readable offsets {sorted(skipped)[:5]}"


def write_unit(store, offset, phys, size, tags=0, topic="TopicTest", queue_id=0):
    cq = store.get_consume_queue(topic, queue_id)
    mf = cq.file_for(offset)
    CQ_UNIT.pack_into(mf.mm, offset * UNIT_SIZE - mf.file_from_offset, phys, size, tags)


# ---------------------------------------------------------------- pulls never skip
async def test_pull_ends_the_batch_at_units_pointing_into_a_deleted_commit_log_file(tmp_path, caplog):
    store = open_store(tmp_path)
    await fill(store, 400)
    cl = store.commit_log.mfq
    assert len(cl.files) >= 4
    doomed = cl.files[1]  # a file in the middle vanishes (manual deletion, lost disk)
    cl.files.remove(doomed)
    doomed.destroy()
    present = readable(store)
    assert 0 < len(present) < 400
    first_gap = min(set(range(400)) - present)
    assert first_gap > 10
    with caplog.at_level(logging.WARNING, logger="broker.store.message_store"):
        g = store.get_messages("TopicTest", 0, first_gap - 10, 32)
        assert g.status is GetStatus.FOUND and g.message_count == 10
        assert g.next_begin_offset == first_gap  # not + 32: the batch ends at the gap
        results, recs = pull_all(store)
    assert_never_skips(results, present)
    assert sorted(r.queue_offset for r in recs) == sorted(present)
    assert sum("skipped" in rec.getMessage() for rec in caplog.records) == 1  # rate-limited
    assert store.runtime_stats()["get_skipped_units"] == 400 - len(present)
    store.close()


async def test_pull_never_returns_or_skips_past_garbage_units(tmp_path):
    store = open_store(tmp_path)
    await fill(store, 60)
    cq = store.get_consume_queue("TopicTest", 0)
    phys10, size10, tags10 = cq.get_unit(10)
    write_unit(store, 10, phys10 + 7, size10, tags10)  # inside a record
    write_unit(store, 11, cq.get_unit(11)[0], size10 + 40, tags10)  # wrong size
    write_unit(store, 20, store.commit_log_max_offset + 1000, size10, tags10)  # beyond the end
    write_unit(store, 30, 0, FILLER_SIZE, 0)  # recovery's filler: silently stepped over
    phys45, size45, tags45 = cq.get_unit(45)
    assert cq.get_unit(44)[0] + cq.get_unit(44)[1] == phys45  # contiguous with the record before it
    write_unit(store, 45, phys45, size45 + 1, tags45)  # a wrong size inside a run of records
    write_unit(store, 50, phys45 + size45 + 1, cq.get_unit(50)[1], cq.get_unit(50)[2])  # off by the same byte
    present = readable(store)
    assert present == set(range(60)) - {10, 11, 20, 30, 45, 50}

    g = store.get_messages("TopicTest", 0, 0, 32)
    assert (g.status, g.message_count, g.next_begin_offset) == (GetStatus.FOUND, 10, 10)
    g = store.get_messages("TopicTest", 0, 10, 32)  # the gap comes first: skipped, then reading goes on
    recs = list(iter_records(g.body()))
    assert g.status is GetStatus.FOUND and recs[0].queue_offset == 12 and g.next_begin_offset == 20
    g = store.get_messages("TopicTest", 0, 20, 1)  # one unit scanned, and it is gone
    assert (g.status, g.message_count, g.next_begin_offset) == (GetStatus.MESSAGE_WAS_REMOVING, 0, 21)
    g = store.get_messages("TopicTest", 0, 20, 32, tag_filter=lambda code: False)  # nothing matches
    assert g.status is GetStatus.NO_MATCHED_MESSAGE or g.status is GetStatus.MESSAGE_WAS_REMOVING
    g = store.get_messages("TopicTest", 0, 20, 1000)
    assert [r.queue_offset for r in iter_records(g.body())] == [o for o in range(21, 45) if o != 30]
    assert g.next_begin_offset == 45
    g = store.get_messages("TopicTest", 0, 45, 1000)  # 45 skipped first, then 50 ends the batch
    assert [r.queue_offset for r in iter_records(g.body())] == [46, 47, 48, 49] and g.next_begin_offset == 50
    g = store.get_messages("TopicTest", 0, 50, 1000)
    assert [r.queue_offset for r in iter_records(g.body())] == list(range(51, 60))
    results, recs = pull_all(store, batch=7)
    assert_never_skips(results, present)
    assert [r.queue_offset for r in recs] == sorted(present)
    store.close()


async def test_only_gone_units_is_message_was_removing_and_too_small_still_applies(tmp_path):
    store = open_store(tmp_path)
    await fill(store, 300)
    for mf in store.commit_log.mfq.remove_first(2):
        mf.destroy()
    cq = store.get_consume_queue("TopicTest", 0)
    g = store.get_messages("TopicTest", 0, 0, 4)
    assert (g.status, g.next_begin_offset, g.message_count) == (GetStatus.MESSAGE_WAS_REMOVING, 4, 0)
    cq.correct_min_offset(store.commit_log_min_offset)
    assert cq.min_offset > 0
    g = store.get_messages("TopicTest", 0, 0, 4)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, cq.min_offset)
    store.close()


# ---------------------------------------------------------------- deleted topics stay deleted
async def test_deleted_topic_is_not_rebuilt_by_crash_recovery(tmp_path):
    store = open_store(tmp_path)
    await fill(store, 20, topic="Gone")
    await fill(store, 5, topic="Kept")
    await fill(store, 8, topic="Again")
    store.delete_topic("Gone")
    store.delete_topic("Again")
    await fill(store, 3, topic="Again", start=100)
    assert store.get_max_offset("Again", 0) == 3
    tomb = json.loads((tmp_path / "deletedTopics.json").read_text())["deletedTopics"]
    assert set(tomb) == {"Gone", "Again"}
    store.close()  # crash: abnormal recovery re-dispatches the whole commit log
    assert os.path.exists(tmp_path / "abort")

    store = open_store(tmp_path)
    assert "Gone" not in store.topics_and_queues()
    assert not os.path.exists(tmp_path / "consumequeue" / "Gone")
    _, recs = pull_all(store, "Again")
    assert [(r.queue_offset, r.body) for r in recs] == [(i, b"p" * 400) for i in range(3)]
    assert [r.properties["KEYS"] for r in recs] == ["key-100", "key-101", "key-102"]
    assert store.get_max_offset("Kept", 0) == 5
    assert store.query_message("Gone", "key-3", 32, 0, 2**62).records == []
    assert len(store.query_message("Again", "key-101", 32, 0, 2**62).records) == 1
    assert store.query_message("Again", "key-3", 32, 0, 2**62).records == []
    store.close()


async def test_crash_between_tombstone_and_queue_removal_removes_the_queues_on_load(tmp_path):
    store = open_store(tmp_path)
    await fill(store, 10, topic="Half")
    store.tombstones.add("Half", store.commit_log_max_offset)  # the files are still there
    store.close()
    store = open_store(tmp_path)
    assert store.get_consume_queue("Half", 0) is None
    assert not os.path.exists(tmp_path / "consumequeue" / "Half")
    store.close()


async def test_tombstones_go_once_retention_removed_every_dead_record(tmp_path):
    store = open_store(tmp_path, delete_when="99", file_reserved_time_hours=1000)
    await fill(store, 40, topic="Short")
    store.delete_topic("Short")
    assert "Short" in store.tombstones.offsets
    await fill(store, 200, topic="Other")
    assert store.clean_expired_files(used_ratio=10.0) == []
    assert "Short" in store.tombstones.offsets
    store.clean_expired_files(used_ratio=99.0)  # forced: everything but the current file
    assert store.commit_log_min_offset > 0
    assert store.tombstones.offsets == {}
    assert json.loads((tmp_path / "deletedTopics.json").read_text())["deletedTopics"] == {}
    store.close()


# ---------------------------------------------------------------- sparse consume queues
async def test_consume_queue_files_are_sparse_and_allocated_ahead_of_the_writer(tmp_path, monkeypatch):
    store = open_store(tmp_path, mapped_file_size_consume_queue=6_000_000)  # the reference's default size
    for q in range(20):
        assert (await store.put_message(make_msg(q, topic="Many", queue_id=q))).status is PutStatus.PUT_OK
    for q in range(20):
        mf = store.get_consume_queue("Many", q).mfq.files[0]
        assert os.path.getsize(mf.path) == 6_000_000
        assert os.stat(mf.path).st_blocks * 512 <= 16 * 1024
    cq = store.get_consume_queue("Many", 0)
    cur = cq.mfq.files[0]
    room = cur.allocated_position // UNIT_SIZE - 1  # units that still fit the allocated blocks
    await store.put_messages([make_msg(i, topic="Many") for i in range(room)])
    before = (store.commit_log_max_offset, store.get_max_offset("Many", 0))

    def no_space(fd, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    r = await store.put_message(make_msg(0, topic="Many"))  # needs the next chunk: refused, nothing written
    assert r.status is PutStatus.DISK_FULL
    assert (store.commit_log_max_offset, store.get_max_offset("Many", 0)) == before
    monkeypatch.undo()
    for i in range(3):
        assert (await store.put_message(make_msg(i, topic="Many"))).status is PutStatus.PUT_OK
    assert cur.allocated_position > (room + 1) * UNIT_SIZE
    store.close()
    store = open_store(tmp_path, mapped_file_size_consume_queue=6_000_000)
    _, recs = pull_all(store, "Many", batch=500)
    assert [r.queue_offset for r in recs] == list(range(room + 4))
    assert (await store.put_message(make_msg(9, topic="Many"))).queue_offset == room + 4
    store.close()


# ---------------------------------------------------------------- clean-up report
async def test_forced_clean_up_reports_unconsumed_messages_per_group(tmp_path, caplog):
    store = open_store(tmp_path, delete_when="99", file_reserved_time_hours=1000)
    for i in range(300):
        assert (await store.put_message(make_msg(i, topic="Orders" if i % 3 else "Audit", body=b"r" * 700,
                                                 queue_id=i % 2))).status is PutStatus.PUT_OK
    committed = {"Orders": {"billing": {0: 5, 1: 0}, "archive": {0: 10_000, 1: 10_000}},
                 "Audit": {"billing": {0: 0}, "audit-reader": {1: 7}}}
    store.retention.consumer_offsets = lambda: committed
    with caplog.at_level(logging.WARNING, logger="broker.store.retention"):
        store.clean_expired_files(used_ratio=99.0)
    mins = {(t, q): store.get_min_offset(t, q) for t in ("Orders", "Audit") for q in (0, 1)}
    assert all(m > 10 for m in mins.values())
    lines = [r.getMessage() for r in caplog.records if "not yet consumed" in r.getMessage()]
    assert len(lines) == 1, lines
    line = lines[0]
    billing = (mins["Orders", 0] - 5) + mins["Orders", 1] + mins["Audit", 0]
    audit = mins["Audit", 1] - 7
    assert "forced: disk 99.0% used" in line and "00000000000000000000" in line
    assert f"{billing + audit:,} messages not yet consumed by groups billing (" in line
    assert f"Orders: {(mins['Orders', 0] - 5) + mins['Orders', 1]:,}" in line
    assert f"audit-reader (Audit: {audit:,})" in line and "archive" not in line
    assert store.retention.unconsumed_deleted_total == billing + audit
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="broker.store.retention"):
        store.clean_expired_files(used_ratio=99.0)  # nothing left to delete: no report
    assert not [r for r in caplog.records if "not yet consumed" in r.getMessage()]
    store.close()
