"""The epoch file (controller.md §9), the truncation rule (§10) and cutting a running store back (truncate.py)."""

from __future__ import annotations

import os

import pytest

from broker.store import GetStatus, PutStatus
from broker.store.epoch_file import (
    EpochFile,
    EpochFileError,
    EpochRecord,
    decode_epoch_file,
    encode_epoch_file,
    truncation_point,
)
from broker.store.truncate import truncate_store

from tests.support.store import make_msg, open_store

E = EpochRecord


# ---- the file -----------------------------------------------------------------------------------------------------
def test_reference_example_bytes():
    # controller.md §9: entries 7-7000, 8-8000 -> lines 2, 773307083, 7-7000, 8-8000 (verified on the reference)
    assert encode_epoch_file([E(7, 7000), E(8, 8000)]) == b"2\n773307083\n7-7000\n8-8000\n"
    assert decode_epoch_file(b"2\n773307083\n7-7000\n8-8000\n") == [E(7, 7000), E(8, 8000)]
    assert decode_epoch_file(b"2\n0\n7-7000\n8-8000\n") == [E(7, 7000), E(8, 8000)]  # 0: not checked


@pytest.mark.parametrize("data, why", [
    (b"", "empty"), (b"2\n773307083\n7-7000\n", "fewer"), (b"2\n773307084\n7-7000\n8-8000\n", "checksum"),
    (b"x\n1\n", "header"), (b"1\n0\n7:7000\n", "bad entry")])
def test_bad_files_are_refused(data, why):
    with pytest.raises(EpochFileError, match=why):
        decode_epoch_file(data)


def test_append_rules_and_backup_fallback(tmp_path):
    path = str(tmp_path / "epochFileCheckpoint")
    f = EpochFile(path)
    f.load()
    assert f.entries == [] and f.last_epoch == -1
    assert f.append(1, 0)
    assert f.append(2, 1000)
    assert not f.append(2, 2000)  # same epoch
    assert not f.append(3, 1000)  # an epoch in which nothing was written: the older entry stays
    assert not f.append(1, 5000)  # older epoch
    assert f.entries == [E(1, 0), E(2, 1000)]
    assert open(path + ".bak", "rb").read() == encode_epoch_file([E(1, 0)])  # the previous content
    with open(path, "wb") as out:
        out.write(b"2\n12345\n1-0\n2-1000\n")  # damaged (checksum)
    again = EpochFile(path)
    again.load()
    assert again.entries == [E(1, 0)]  # from the .bak
    os.unlink(path)
    again.load()
    assert again.entries == [E(1, 0)]
    with open(path + ".bak", "wb") as out:
        out.write(b"garbage")
    with open(path, "wb") as out:
        out.write(b"")
    with pytest.raises(EpochFileError):
        again.load()


def test_new_master_entry_and_truncations(tmp_path):
    f = EpochFile(str(tmp_path / "e"))
    for epoch, start in ((1, 0), (2, 1000), (4, 1500)):
        f.append(epoch, start)
    f.set_last_epoch(3, 1200)  # epoch 4 at 1500 is dropped (at/after the cut and >= the new epoch)
    assert f.entries == [E(1, 0), E(2, 1000), E(3, 1200)]
    assert f.with_ends(1300) == [(1, 0, 1000), (2, 1000, 1200), (3, 1200, 1300)]
    assert f.entry_at(1100) == (E(2, 1000), 1200)
    f.truncate_from(1200)
    assert f.entries == [E(1, 0), E(2, 1000)]
    f.truncate_below(1000)  # epoch 1 ends at 1000: gone
    assert f.entries == [E(2, 1000)]
    reread = EpochFile(str(tmp_path / "e"))
    reread.load()
    assert reread.entries == [E(2, 1000)]


# ---- the truncation rule --------------------------------------------------------------------------------------------
def test_worked_example_of_the_reference():
    # §10: A has 1-0, 2-1000 (max 1500), B holds up to 1200, is elected with epoch 3 and writes to 1300
    a, b = [E(1, 0), E(2, 1000)], [E(1, 0), E(2, 1000), E(3, 1200)]
    assert truncation_point(a, 1500, b, 1300) == 1200
    # the other way round (B rejoining A) epoch 3 is unknown to A: B keeps only the common epoch 2 part
    assert truncation_point(b, 1300, a, 1500) == 1200
    assert truncation_point(b, 1300, b, 1300) == 1300  # identical histories: nothing cut


def test_same_epoch_other_start_does_not_match():
    own = [E(1, 0), E(2, 1000)]
    assert truncation_point(own, 1500, [E(1, 0), E(2, 900), E(3, 1100)], 2000) == 900  # epoch 1, ends min(1000, 900)
    assert truncation_point(own, 1500, [E(5, 700)], 900) is None  # nothing in common: cannot be reconciled
    # no common epoch but the same beginning: a master elected before it had copied anything; all of own diverges
    assert truncation_point([E(1, 0)], 200, [E(2, 0)], 0) == 0
    assert truncation_point([E(1, 4096), E(3, 5000)], 6000, [E(2, 4096)], 4500) == 4096
    assert truncation_point([], 777, [E(1, 0)], 10) == 777  # a fresh replica


def test_slave_behind_master_is_not_cut():
    assert truncation_point([E(1, 0)], 400, [E(1, 0), E(2, 900)], 1200) == 400


# ---- cutting a store back -------------------------------------------------------------------------------------------
async def test_truncate_store_log_queues_and_index(tmp_path):
    store = open_store(tmp_path)
    await store.start()
    try:
        ends = []
        for i in range(30):
            r = await store.put_message(make_msg(i, queue_id=i % 2, keys=f"key-{i}"))
            assert r.status is PutStatus.PUT_OK
            ends.append(r.physical_offset + r.wrote_bytes)
        cut = ends[19]  # keep messages 0..19
        result = truncate_store(store, cut)
        assert (result.from_offset, result.to_offset) == (ends[-1], cut)
        assert result.bytes_cut == ends[-1] - cut and result.units_dropped == 10
        assert store.commit_log.max_offset == cut
        assert store.get_max_offset("TopicTest", 0) == 10 and store.get_max_offset("TopicTest", 1) == 10
        assert len(store.query_message("TopicTest", "key-19", 4, 0, 2**62).records) == 1
        assert store.query_message("TopicTest", "key-25", 4, 0, 2**62).records == []
        # writing goes on from the cut: the new records get the queue offsets and index entries
        r = await store.put_message(make_msg(99, queue_id=0, keys="key-new"))
        assert (r.physical_offset, r.queue_offset) == (cut, 10)
        assert len(store.query_message("TopicTest", "key-new", 4, 0, 2**62).records) == 1
        g = store.get_messages("TopicTest", 0, 10, 4)
        assert g.status is GetStatus.FOUND and g.next_begin_offset == 11
        assert truncate_store(store, cut + 10**6).bytes_cut == 0  # beyond the end: nothing
    finally:
        await store.shutdown()
    reopened = open_store(tmp_path)  # the cut survives a restart
    try:
        assert reopened.get_max_offset("TopicTest", 0) == 11 and reopened.get_max_offset("TopicTest", 1) == 10
    finally:
        reopened.close()


async def test_consumers_see_nothing_past_the_visible_limit(tmp_path):
    """controller.md §7: with allAckInSyncStateSet, reads stop at confirmOffset (store.visible_limit)."""
    store = open_store(tmp_path)
    await store.start()
    try:
        ends = []
        for i in range(5):
            r = await store.put_message(make_msg(i))
            ends.append(r.physical_offset + r.wrote_bytes)
        store.visible_limit = ends[2]
        g = store.get_messages("TopicTest", 0, 0, 32)
        assert g.status is GetStatus.FOUND and g.message_count == 3 and g.next_begin_offset == 3
        assert store.get_messages("TopicTest", 0, 3, 32).status is GetStatus.OFFSET_OVERFLOW_ONE
        store.visible_limit = ends[2] - 1  # a record ending one byte past the limit is not visible
        assert store.get_messages("TopicTest", 0, 0, 32).message_count == 2
        store.visible_limit = None
        assert store.get_messages("TopicTest", 0, 0, 32).message_count == 5
    finally:
        await store.shutdown()
