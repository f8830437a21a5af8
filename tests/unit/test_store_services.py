"""Flush (ASYNC / SYNC group commit), retention, disk-full handling, time-based offset queries."""

from __future__ import annotations

import asyncio
import errno
import os
import time

from protocol.message import iter_records

from broker.store import GetStatus, PutStatus
from broker.store import message_store as message_store_module
from broker.store.mapped_file import MappedFile

from tests.support.store import FakeClock, make_msg, open_store


# ---------------------------------------------------------------- flushing
async def test_sync_flush_group_commit(tmp_path, monkeypatch):
    store = open_store(tmp_path, flush_disk_type="SYNC_FLUSH")
    await store.start()
    syncs = []
    original = MappedFile.sync_to_disk

    def slow_sync(self):
        syncs.append(self.wrote_position)
        time.sleep(0.02)  # runs in the flush executor: concurrent puts pile up meanwhile
        original(self)

    monkeypatch.setattr(MappedFile, "sync_to_disk", slow_sync)
    results = await asyncio.wait_for(
        asyncio.gather(*(store.put_message(make_msg(i)) for i in range(50))), 10)
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert 1 <= len(syncs) < 10  # 50 puts shared a handful of flushes
    assert store.flush_service.commit_log_flushed_offset >= store.commit_log_max_offset
    assert sorted(r.queue_offset for r in results) == list(range(50))
    await store.shutdown()


async def test_sync_flush_timeout_keeps_data(tmp_path, monkeypatch):
    store = open_store(tmp_path, flush_disk_type="SYNC_FLUSH", sync_flush_timeout_ms=50)
    await store.start()
    monkeypatch.setattr(MappedFile, "sync_to_disk", lambda self: time.sleep(0.3))
    r = await asyncio.wait_for(store.put_message(make_msg(0)), 5)
    assert r.status is PutStatus.FLUSH_DISK_TIMEOUT and "50 ms" in r.remark
    g = store.get_messages("TopicTest", 0, 0, 32)
    assert g.status is GetStatus.FOUND and g.message_count == 1  # stored anyway
    monkeypatch.undo()
    await store.shutdown()


async def test_async_flush_and_checkpoint(tmp_path):
    clock = FakeClock()
    store = open_store(tmp_path, clock=clock, flush_interval_commit_log_ms=10, flush_interval_consume_queue_ms=10)
    await store.start()
    await store.put_messages([make_msg(i) for i in range(10)])
    deadline = time.monotonic() + 5
    while store.flush_service.commit_log_flushed_offset < store.commit_log_max_offset:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    while store.checkpoint.logics_msg_timestamp != clock.now:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    assert store.checkpoint.physic_msg_timestamp == clock.now
    await store.shutdown()


# ---------------------------------------------------------------- disk full
async def test_disk_full_when_file_cannot_be_created(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    await store.put_messages([make_msg(i, body=b"d" * 1000) for i in range(40)])
    before = (store.commit_log_max_offset, store.get_max_offset("TopicTest", 0))

    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    r = await store.put_messages([make_msg(i, body=b"d" * 1000) for i in range(40)])  # needs a new file
    assert r.status is PutStatus.DISK_FULL and "disk is full" in r.remark
    assert (store.commit_log_max_offset, store.get_max_offset("TopicTest", 0)) == before  # all-or-nothing
    monkeypatch.undo()
    r = await store.put_messages([make_msg(i, body=b"d" * 1000) for i in range(40)])
    assert r.status is PutStatus.PUT_OK and r.queue_offset == 40
    g = store.get_messages("TopicTest", 0, 0, 100, max_bytes=1 << 20)
    assert [m.queue_offset for m in iter_records(g.body())] == list(range(80))
    store.close()


async def test_disk_usage_ratio_refuses_puts(tmp_path, monkeypatch):
    clock = FakeClock()
    store = open_store(tmp_path, clock=clock)
    monkeypatch.setattr(message_store_module, "disk_used_ratio", lambda path: 95.0)
    r = await store.put_message(make_msg(0))
    assert r.status is PutStatus.DISK_FULL and "95.0%" in r.remark
    monkeypatch.setattr(message_store_module, "disk_used_ratio", lambda path: 20.0)
    assert (await store.put_message(make_msg(0))).status is PutStatus.DISK_FULL  # cached for ~1 s
    clock.now += 1000
    assert (await store.put_message(make_msg(0))).status is PutStatus.PUT_OK
    store.close()


# ---------------------------------------------------------------- retention
async def test_retention_deletes_only_expired_non_current_files(tmp_path):
    clock = FakeClock(int(time.time() * 1000))
    store = open_store(tmp_path, clock=clock, file_reserved_time_hours=1, delete_when="99")
    for start in range(0, 400, 50):
        await store.put_messages([make_msg(i, body=b"r" * 700) for i in range(start, start + 50)])
    files = list(store.commit_log.mfq.files)
    assert len(files) >= 5
    old = time.time() - 2 * 3600
    for mf in files[:3]:
        os.utime(mf.path, (old, old))
    # not a delete hour and disk not full: nothing happens
    assert store.clean_expired_files(used_ratio=10.0) == []
    deleted = store.clean_expired_files(force_time=True, used_ratio=10.0)
    assert [p for p in deleted if "commitlog" in p] == [mf.path for mf in files[:3]]
    assert all(not os.path.exists(mf.path) for mf in files[:3])
    new_min = files[3].file_from_offset
    assert store.commit_log_min_offset == new_min
    cq = store.get_consume_queue("TopicTest", 0)
    first = cq.get_unit(cq.min_offset)
    assert first[0] >= new_min and cq.get_unit(cq.min_offset - 1)[0] < new_min
    g = store.get_messages("TopicTest", 0, 0, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, cq.min_offset)
    g = store.get_messages("TopicTest", 0, cq.min_offset, 32)
    assert next(iter_records(g.body())).queue_offset == cq.min_offset
    assert store.get_min_offset("TopicTest", 0) == cq.min_offset
    assert store.look_message_by_offset(0) is None
    # the file being written is never deleted, even when everything is expired
    for mf in store.commit_log.mfq.files:
        os.utime(mf.path, (old, old))
    store.clean_expired_files(force_time=True, used_ratio=10.0)
    assert len(store.commit_log.mfq.files) == 1
    r = await store.put_message(make_msg(999))
    assert r.status is PutStatus.PUT_OK and r.queue_offset == 400
    store.close()


async def test_retention_on_disk_pressure(tmp_path):
    store = open_store(tmp_path, delete_when="99", file_reserved_time_hours=1000)
    for start in range(0, 300, 50):
        await store.put_messages([make_msg(i, body=b"r" * 700) for i in range(start, start + 50)])
    n = len(store.commit_log.mfq.files)
    assert store.clean_expired_files(used_ratio=80.0) == []  # above 75 %: only expired files go
    deleted = store.clean_expired_files(used_ratio=88.0)  # above 85 %: oldest go even if fresh
    assert len([p for p in deleted if "commitlog" in p]) == n - 1
    store.close()


# ---------------------------------------------------------------- time queries
async def test_offset_by_time_lower_upper(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock)
    for i in range(10):  # two messages per timestamp: t0, t0, t0+100, t0+100, ...
        await store.put_messages([make_msg(2 * i), make_msg(2 * i + 1)])
        clock.now += 100
    t0 = 1_700_000_000_000
    lookup = store.get_offset_by_time
    assert lookup("TopicTest", 0, t0 - 1) == 0
    assert lookup("TopicTest", 0, t0) == 0
    assert lookup("TopicTest", 0, t0 + 100) == 2
    assert lookup("TopicTest", 0, t0 + 150) == 4
    assert lookup("TopicTest", 0, t0 + 5000) == 20  # all older -> max offset
    assert lookup("TopicTest", 0, t0 + 100, upper=True) == 3
    assert lookup("TopicTest", 0, t0 + 150, upper=True) == 3
    assert lookup("TopicTest", 0, t0 + 5000, upper=True) == 19
    assert lookup("TopicTest", 0, t0 - 1, upper=True) == 0  # all newer
    assert lookup("Nope", 0, t0) == 0
    assert store.get_earliest_message_time("TopicTest", 0) == t0
    assert store.get_message_store_time("TopicTest", 0, 5) == t0 + 200
    assert store.get_message_store_time("TopicTest", 0, 50) == -1
    assert store.get_earliest_message_time("Nope", 0) == -1
    store.close()


async def test_runtime_stats(tmp_path):
    store = open_store(tmp_path)
    await store.put_messages([make_msg(i) for i in range(3)])
    store.get_messages("TopicTest", 0, 0, 32)
    stats = store.runtime_stats()
    assert stats["put_messages"] == 3 and stats["get_messages"] == 3
    assert stats["commit_log_max_offset"] == store.commit_log_max_offset
    store.close()


async def test_disk_full_on_consume_queue_file_is_all_or_nothing(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    await store.put_messages([make_msg(i) for i in range(190)])  # CQ file holds 200 units
    before = (store.commit_log_max_offset, store.get_max_offset("TopicTest", 0))

    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    r = await store.put_messages([make_msg(i) for i in range(20)])
    assert r.status is PutStatus.DISK_FULL
    assert (store.commit_log_max_offset, store.get_max_offset("TopicTest", 0)) == before
    monkeypatch.undo()
    r = await store.put_messages([make_msg(i) for i in range(20)])
    assert r.status is PutStatus.PUT_OK and r.queue_offset == 190
    assert store.get_max_offset("TopicTest", 0) == 210
    store.close()
