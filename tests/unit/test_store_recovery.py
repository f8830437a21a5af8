"""Recovery: clean restart fast path, crash with torn tail, CQ/index re-dispatch."""

from __future__ import annotations

import os

import pytest

from protocol.message import decode_record, iter_records

from broker.store import GetStatus, PutStatus
from broker.store import log_scan, recovery
from broker.store.consume_queue import CQ_UNIT

from test_store_helpers import CL_SIZE, FakeClock, make_msg, open_store


async def fill(store, n, start=0, body=b"p" * 300):
    results = []
    for i in range(start, start + n):
        r = await store.put_message(make_msg(i, body=body, keys="key-%d" % i))
        assert r.status is PutStatus.PUT_OK
        results.append(r)
    return results


def all_records(store, topic="TopicTest"):
    out, offset = [], 0
    for _ in range(1000):
        g = store.get_messages(topic, 0, offset, 32)
        if g.status is not GetStatus.FOUND:
            return out
        out.extend(iter_records(g.body()))
        offset = g.next_begin_offset
    raise AssertionError("too many pulls")


def patch_file(path, pos, data):
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def cl_path(root, phys):
    start = phys - phys % CL_SIZE
    return os.path.join(root, "commitlog", "%020d" % start), phys - start


async def test_clean_shutdown_and_fast_reopen(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    assert os.path.exists(tmp_path / "abort")
    await store.start()
    await fill(store, 400)
    end = store.commit_log_max_offset
    await store.shutdown()
    assert not os.path.exists(tmp_path / "abort")

    scans = []
    original = log_scan.scan

    def spy(cl, start, verify_crc, stop=None, trusted_end=None):
        scans.append((start, stop))
        return original(cl, start, verify_crc, stop, trusted_end)

    monkeypatch.setattr(log_scan, "scan", spy)
    monkeypatch.setattr(recovery, "NORMAL_VERIFY_BYTES", 8192)
    store = open_store(tmp_path)
    monkeypatch.undo()
    # a clean restart only verifies a bounded window before the recorded end
    assert len(scans) == 1 and scans[0][1] == end and end - 8192 <= scans[0][0] < end
    assert store.commit_log_max_offset == end
    assert store.get_max_offset("TopicTest", 0) == 400
    assert [r.queue_offset for r in all_records(store)] == list(range(400))
    r = await store.put_message(make_msg(400))
    assert (r.physical_offset, r.queue_offset) == (end, 400)
    assert len(store.query_message("TopicTest", "key-17", 32, 0, 2**62).records) == 1
    await store.shutdown()


async def test_reopen_without_checkpoint_scans_last_files(tmp_path):
    store = open_store(tmp_path)
    await fill(store, 300)
    end = store.commit_log_max_offset
    await store.shutdown()
    os.unlink(tmp_path / "checkpoint")
    store = open_store(tmp_path)
    assert store.commit_log_max_offset == end
    assert store.get_max_offset("TopicTest", 0) == 300
    store.close()


@pytest.mark.parametrize("damage", ["crc", "truncated"])
async def test_crash_with_torn_tail_record(tmp_path, damage):
    store = open_store(tmp_path)
    results = await fill(store, 250)
    last = results[-1]
    rec_size = last.wrote_bytes
    store.close()  # crash: no checkpoint, abort stays
    assert os.path.exists(tmp_path / "abort")
    path, pos = cl_path(tmp_path, last.physical_offset)
    if damage == "crc":
        patch_file(path, pos + rec_size - 40, b"\xff\xfe")  # corrupt bytes inside the record
        patch_file(path, pos + 100, b"\x00\x01")  # body bytes -> CRC mismatch
    else:
        patch_file(path, pos + rec_size // 2, bytes(rec_size - rec_size // 2))  # only the first half hit the disk

    store = open_store(tmp_path)
    assert store.commit_log_max_offset == last.physical_offset
    assert store.get_max_offset("TopicTest", 0) == 249
    recs = all_records(store)
    assert [r.queue_offset for r in recs] == list(range(249))
    assert all(r.body == b"p" * 300 for r in recs)
    with open(path, "rb") as f:  # the torn tail is zeroed
        f.seek(pos)
        assert f.read(CL_SIZE - pos) == bytes(CL_SIZE - pos)
    r = await store.put_message(make_msg(1000, body=b"new"))
    assert (r.physical_offset, r.queue_offset) == (last.physical_offset, 249)
    assert all_records(store)[-1].body == b"new"
    store.close()


async def test_crash_with_damage_in_middle_file_keeps_later_files(tmp_path):
    store = open_store(tmp_path)
    results = await fill(store, 600)
    end = store.commit_log_max_offset
    store.close()
    victim = results[300]
    path, pos = cl_path(tmp_path, victim.physical_offset)
    patch_file(path, pos + 4, b"\x00\x00\x00\x00")  # bad magic
    n_files_before = len(os.listdir(tmp_path / "commitlog"))
    store = open_store(tmp_path)
    assert store.commit_log_max_offset == end
    assert len(os.listdir(tmp_path / "commitlog")) == n_files_before
    assert store.stats["recovery_corrupt_regions"] == 1 and store.stats["recovery_missing_units"] == 1
    assert store.get_max_offset("TopicTest", 0) == 600
    assert [r.queue_offset for r in all_records(store)] == list(range(300)) + list(range(301, 600))
    assert store.look_message_by_offset(victim.physical_offset) is None
    r = await store.put_messages([make_msg(i) for i in range(5)])
    assert (r.physical_offset, r.queue_offset) == (end, 600)
    store.close()


async def test_crash_redispatches_missing_cq_units_and_index(tmp_path):
    clock = FakeClock()
    store = open_store(tmp_path, clock=clock)
    await fill(store, 120)
    store.close()
    # lose the last 30 CQ units and the whole index (as if those pages never reached the disk)
    cq_file = tmp_path / "consumequeue" / "TopicTest" / "0" / ("%020d" % 0)
    patch_file(cq_file, 90 * 20, bytes(30 * 20))
    for name in os.listdir(tmp_path / "index"):
        os.unlink(tmp_path / "index" / name)
    store = open_store(tmp_path, clock=clock)
    assert store.get_max_offset("TopicTest", 0) == 120
    recs = all_records(store)
    assert [r.queue_offset for r in recs] == list(range(120))
    cq = store.get_consume_queue("TopicTest", 0)
    for off in (89, 90, 119):
        phys, size, tags = cq.get_unit(off)
        rec = decode_record(store.look_message_by_offset(phys))
        assert rec.queue_offset == off and size == rec.total_size and tags == 2598919
    found = store.query_message("TopicTest", "key-100", 32, 0, 2**62).records
    assert [decode_record(r).queue_offset for r in found] == [100]
    r = await store.put_message(make_msg(500))
    assert r.queue_offset == 120
    store.close()


async def test_crash_after_checkpoint_uses_recent_start(tmp_path):
    clock = FakeClock()
    store = open_store(tmp_path, clock=clock)
    await store.start()
    await fill(store, 300)  # spans several files, all stored at T
    clock.now += 10_000
    await fill(store, 100, start=300)
    await store.flush()  # checkpoint: everything up to T+10s is flushed
    clock.now += 50_000
    await fill(store, 50, start=400)
    for task in store.flush_service._tasks:
        task.cancel()
    store.close()
    scanned_from = []
    original = log_scan.scan

    def spy(cl, start, verify_crc, stop=None, trusted_end=None):
        scanned_from.append(start)
        return original(cl, start, verify_crc, stop, trusted_end)

    log_scan.scan = spy
    try:
        store = open_store(tmp_path, clock=clock)
    finally:
        log_scan.scan = original
    assert scanned_from and scanned_from[0] > 0  # did not re-verify from the first file
    assert store.get_max_offset("TopicTest", 0) == 450
    assert [r.queue_offset for r in all_records(store)] == list(range(450))
    store.close()


async def test_cq_units_beyond_commit_log_end_are_truncated(tmp_path):
    store = open_store(tmp_path)
    results = await fill(store, 50)
    cq = store.get_consume_queue("TopicTest", 0)
    # a unit pointing past the end of the commit log (e.g. CQ flushed, commit log pages lost)
    CQ_UNIT.pack_into(cq._cur.mm, 50 * 20, results[-1].physical_offset + 10_000, 300, 0)
    store.close()
    store = open_store(tmp_path)
    assert store.get_max_offset("TopicTest", 0) == 50
    store.close()


async def test_redispatch_handles_ipv6_and_long_topics(tmp_path):
    from protocol.ids import pack_host

    store = open_store(tmp_path)
    long_topic = "%DLQ%" + "x" * 140
    await store.put_message(make_msg(0, topic=long_topic, keys="lk"))
    await store.put_message(make_msg(1, born_host=pack_host("2001:db8::1", 9), keys="v6"))
    await store.put_message(make_msg(2, sys_flag=0x4, keys="half"))  # prepared: indexed, no CQ unit
    store.close()
    for topic in (long_topic, "TopicTest"):
        os.unlink(tmp_path / "consumequeue" / topic / "0" / ("%020d" % 0))
    for name in os.listdir(tmp_path / "index"):
        os.unlink(tmp_path / "index" / name)
    store = open_store(tmp_path)
    assert store.get_max_offset(long_topic, 0) == 1 and store.get_max_offset("TopicTest", 0) == 1
    assert decode_record(store.get_messages(long_topic, 0, 0, 1).body()).topic == long_topic
    assert decode_record(store.get_messages("TopicTest", 0, 0, 1).body()).born_host == ("2001:db8::1", 9)
    for topic, key in ((long_topic, "lk"), ("TopicTest", "v6"), ("TopicTest", "half")):
        assert len(store.query_message(topic, key, 32, 0, 2**62).records) == 1
    store.close()
