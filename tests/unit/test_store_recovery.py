"""Recovery: clean restart fast path, crash with torn tail, CQ/index re-dispatch."""

from __future__ import annotations

import os

import pytest

from protocol.message import decode_record, iter_records

from broker.store import GetStatus, PutStatus
from broker.store import log_scan, recovery
from broker.store.consume_queue import CQ_UNIT

from tests.support.store import CL_SIZE, FakeClock, make_msg, open_store


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


# ---------------------------------------------------------------- issue 11: rebuild, damage, mis-sized files
import shutil  # noqa: E402

from broker.store import MessageStore, StoreFileError  # noqa: E402
from tests.support.store import small_config  # noqa: E402


async def fill_queues(store, per_queue=150, queues=(("TopicTest", 0), ("TopicTest", 1), ("Other", 0))):
    """Interleaved puts over several queues: {(topic, qid): [bodies]}."""
    sent = {q: [] for q in queues}
    for i in range(per_queue):
        for topic, qid in queues:
            body = b"%s-%d-%d-" % (topic.encode(), qid, i) + b"x" * 200
            r = await store.put_message(make_msg(i, topic=topic, queue_id=qid, body=body))
            assert r.status is PutStatus.PUT_OK
            sent[(topic, qid)].append(body)
    return sent


def pulled(store, topic, qid):
    out, offset = {}, 0
    for _ in range(2000):
        g = store.get_messages(topic, qid, offset, 32)
        if g.status is GetStatus.FOUND:
            for rec in iter_records(g.body()):
                out[rec.queue_offset] = rec.body
        elif g.status is not GetStatus.MESSAGE_WAS_REMOVING:
            return out
        offset = g.next_begin_offset
    raise AssertionError("too many pulls")


def assert_all_pullable(store, sent, missing=()):
    for (topic, qid), bodies in sent.items():
        expect = {i: b for i, b in enumerate(bodies) if (topic, qid, i) not in missing}
        assert pulled(store, topic, qid) == expect, (topic, qid)
        assert store.get_max_offset(topic, qid) == len(bodies)


@pytest.mark.parametrize("crash", [False, True])
async def test_deleted_consume_queues_are_rebuilt_with_the_same_offsets(tmp_path, crash):
    store = open_store(tmp_path)
    await store.start()
    sent = await fill_queues(store)
    if crash:
        store.close()
    else:
        await store.shutdown()
    shutil.rmtree(tmp_path / "consumequeue")
    store = open_store(tmp_path)
    assert_all_pullable(store, sent)
    r = await store.put_message(make_msg(9999, topic="Other"))
    assert r.queue_offset == 150
    store.close()


async def test_clean_restart_with_intact_queues_redispatches_nothing(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    await store.start()
    sent = await fill_queues(store, per_queue=50)
    await store.shutdown()

    def no_redispatch(*args):
        raise AssertionError("nothing is missing: no re-dispatch")

    monkeypatch.setattr(recovery, "redispatch", no_redispatch)
    store = open_store(tmp_path)
    monkeypatch.undo()
    assert_all_pullable(store, sent)
    await store.shutdown()


async def test_newest_queue_units_lost_are_rebuilt_at_a_normal_start(tmp_path):
    store = open_store(tmp_path)
    await store.start()
    sent = await fill_queues(store, per_queue=60)
    await store.shutdown()
    cq_file = tmp_path / "consumequeue" / "Other" / "0" / ("%020d" % 0)
    patch_file(cq_file, 40 * 20, bytes(20 * 20))  # the newest 20 units of the newest queue: zeros
    store = open_store(tmp_path)
    assert_all_pullable(store, sent)
    store.close()


@pytest.mark.parametrize("cut", [0, 57 * 20 + 7])
async def test_consume_queue_file_cut_short_is_extended_and_rebuilt(tmp_path, cut):
    store = open_store(tmp_path)
    await store.start()
    sent = await fill_queues(store, per_queue=120)  # 200 units per CQ file: TopicTest/0 holds one file
    await store.shutdown()
    cq_file = tmp_path / "consumequeue" / "TopicTest" / "0" / ("%020d" % 0)
    os.truncate(cq_file, cut)
    store = open_store(tmp_path)
    assert_all_pullable(store, sent)
    assert os.path.getsize(cq_file) == 200 * 20
    store.close()


async def test_consume_queue_file_of_another_size_is_a_clear_error(tmp_path):
    store = open_store(tmp_path)
    await store.start()
    await fill_queues(store, per_queue=250)  # two CQ files for each queue
    await store.shutdown()
    first = tmp_path / "consumequeue" / "TopicTest" / "0" / ("%020d" % 0)
    os.truncate(first, 1000)
    with pytest.raises(StoreFileError) as err:
        open_store(tmp_path)
    text = str(err.value)
    assert str(first) in text and "1000 bytes, expected 4000 (mappedFileSizeConsumeQueue)" in text
    assert "consumequeue" in text and "rebuild" in text and "\n" not in text


async def test_bad_crc_near_the_end_after_a_clean_stop_is_not_served(tmp_path):
    store = open_store(tmp_path)
    await store.start()
    results = await fill(store, 200)
    await store.shutdown()
    victim = results[195]
    path, pos = cl_path(tmp_path, victim.physical_offset)
    patch_file(path, pos + 120, b"\xee")  # one byte of the body
    store = open_store(tmp_path)
    assert store.stats["recovery_corrupt_regions"] == 1 and store.stats["recovery_missing_units"] == 1
    assert [r.queue_offset for r in all_records(store)] == [i for i in range(200) if i != 195]
    r = await store.put_message(make_msg(1000))
    assert r.queue_offset == 200  # nothing re-used: a consumer past 195 skips nothing
    await store.shutdown()
    store = open_store(tmp_path)  # the unit stays marked missing across restarts
    assert [r.queue_offset for r in all_records(store)] == [i for i in range(201) if i != 195]
    store.close()


async def test_damage_in_the_oldest_file_at_a_crash_keeps_every_newer_file(tmp_path):
    store = open_store(tmp_path)
    await store.start()
    results = await fill(store, 600)  # ~ 4 commit log files of 64 KiB
    store.close()  # crash
    files_before = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(files_before) >= 3
    victim = results[10]
    path, pos = cl_path(tmp_path, victim.physical_offset)
    assert path.endswith("%020d" % 0)
    patch_file(path, pos + 150, b"\x01")
    store = open_store(tmp_path)
    assert sorted(os.listdir(tmp_path / "commitlog")) == files_before
    assert [r.queue_offset for r in all_records(store)] == [i for i in range(600) if i != 10]
    assert store.stats["recovery_corrupt_regions"] == 1
    assert store.stats["recovery_corrupt_bytes"] == victim.wrote_bytes
    store.close()


async def test_missing_middle_commit_log_file_keeps_the_files_after_it(tmp_path):
    store = open_store(tmp_path)
    results = await fill(store, 600)
    end = store.commit_log_max_offset
    store.close()
    names = sorted(os.listdir(tmp_path / "commitlog"))
    os.unlink(tmp_path / "commitlog" / names[1])
    store = open_store(tmp_path)
    assert store.commit_log_max_offset == end
    gone = {i for i, r in enumerate(results) if int(names[1]) <= r.physical_offset < int(names[2])}
    assert gone and sorted(pulled(store, "TopicTest", 0)) == [i for i in range(600) if i not in gone]
    store.close()


async def test_last_commit_log_file_cut_short_is_recovered(tmp_path):
    store = open_store(tmp_path)
    await store.start()
    results = await fill(store, 400)
    await store.shutdown()
    names = sorted(os.listdir(tmp_path / "commitlog"))
    last = tmp_path / "commitlog" / names[-1]
    in_last = [i for i, r in enumerate(results) if r.physical_offset >= int(names[-1])]
    cut_record = results[in_last[len(in_last) // 2]]
    os.truncate(last, cut_record.physical_offset - int(names[-1]) + 50)
    store = open_store(tmp_path)
    assert os.path.getsize(last) == CL_SIZE
    assert sorted(pulled(store, "TopicTest", 0)) == list(range(cut_record.queue_offset))
    r = await store.put_message(make_msg(1000, body=b"after"))
    assert r.queue_offset == 400  # offsets of the lost records are not handed out again
    assert pulled(store, "TopicTest", 0)[400] == b"after"
    store.close()


async def test_middle_commit_log_file_of_another_size_is_a_clear_error(tmp_path):
    store = open_store(tmp_path)
    await fill(store, 400)
    await store.shutdown()
    names = sorted(os.listdir(tmp_path / "commitlog"))
    os.truncate(tmp_path / "commitlog" / names[1], 1234)
    with pytest.raises(StoreFileError) as err:
        open_store(tmp_path)
    text = str(err.value)
    assert text.startswith("commit log file %s is 1234 bytes, expected %d (mappedFileSizeCommitLog): "
                           % (tmp_path / "commitlog" / names[1], CL_SIZE))
    assert "backup" in text and "\n" not in text


async def test_changed_commit_log_file_size_names_the_size_the_files_have(tmp_path):
    store = open_store(tmp_path)
    await fill(store, 400)
    await store.shutdown()
    refused = MessageStore(small_config(tmp_path, mapped_file_size_commit_log=CL_SIZE // 2))
    with pytest.raises(StoreFileError, match="set mappedFileSizeCommitLog=%d " % CL_SIZE):
        refused.load()
    refused.close()
    store = open_store(tmp_path)  # nothing was changed by the refused start
    assert [r.queue_offset for r in all_records(store)] == list(range(400))
    store.close()


@pytest.mark.parametrize("content", [os.urandom(4096), b"garbage", b"\xff" * 4096])
async def test_garbage_checkpoint_is_ignored_and_the_log_verified(tmp_path, content):
    store = open_store(tmp_path)
    await store.start()
    await fill(store, 300)
    await store.shutdown()
    (tmp_path / "checkpoint").write_bytes(content)
    store = open_store(tmp_path)
    assert [r.queue_offset for r in all_records(store)] == list(range(300))
    store.close()


async def test_unreadable_checkpoint_is_a_clear_error(tmp_path):
    store = open_store(tmp_path)
    await store.shutdown()
    os.unlink(tmp_path / "checkpoint")
    os.mkdir(tmp_path / "checkpoint")
    with pytest.raises(StoreFileError, match="cannot read the checkpoint file"):
        open_store(tmp_path)
