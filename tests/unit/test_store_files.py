"""File-level store pieces: JSON config files, checkpoint, mapped files, CQ units, index files."""

from __future__ import annotations

import errno
import os
import struct

import pytest

from protocol.hashing import index_key_hash, tags_code

from broker.store.checkpoint import CHECKPOINT_SIZE, StoreCheckpoint
from broker.store.config_file import JsonConfigFile
from broker.store.consume_queue import CQ_UNIT, ConsumeQueue, round_cq_file_size
from broker.store.index import IndexFile, IndexService, KeyHasher, index_file_name
from broker.store.mapped_file import MappedFile, MappedFileQueue, StoreDiskFullError, file_name_for


# ---------------------------------------------------------------- JsonConfigFile
def test_json_config_round_trip_and_bak(tmp_path):
    cfg = JsonConfigFile(str(tmp_path / "config" / "topics.json"))
    assert cfg.load() is None
    cfg.save({"topicConfigTable": {"A": {"readQueueNums": 4}}})
    assert cfg.load() == {"topicConfigTable": {"A": {"readQueueNums": 4}}}
    cfg.save('{"offsetTable":{"t@g":{0:12,1:7}}}')  # fastjson style text is written verbatim
    assert cfg.load() == {"offsetTable": {"t@g": {"0": 12, "1": 7}}}
    # the previous version is kept as .bak
    assert JsonConfigFile(cfg.bak_path).load() == {"topicConfigTable": {"A": {"readQueueNums": 4}}}
    assert not os.path.exists(cfg.tmp_path)


def test_json_config_falls_back_to_bak(tmp_path):
    cfg = JsonConfigFile(str(tmp_path / "consumerOffset.json"))
    cfg.save({"v": 1})
    cfg.save({"v": 2})
    with open(cfg.path, "w") as f:
        f.write("{garbage")
    assert cfg.load() == {"v": 1}
    os.unlink(cfg.path)
    assert cfg.load() == {"v": 1}
    assert cfg.load_text() is not None


# ---------------------------------------------------------------- checkpoint
def test_checkpoint_round_trip(tmp_path):
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"))
    assert cp.load() is False
    cp.physic_msg_timestamp = 1_700_000_000_123
    cp.logics_msg_timestamp = 1_700_000_000_100
    cp.index_msg_timestamp = 1_700_000_000_050
    cp.confirm_phy_offset = 123456
    cp.save()
    data = open(cp.path, "rb").read()
    assert len(data) == CHECKPOINT_SIZE
    assert struct.unpack_from(">qqq", data, 0) == (1_700_000_000_123, 1_700_000_000_100, 1_700_000_000_050)
    assert struct.unpack_from(">q", data, 32)[0] == 123456
    assert data[40:] == bytes(CHECKPOINT_SIZE - 40)
    cp2 = StoreCheckpoint(cp.path)
    assert cp2.load() is True
    assert (cp2.physic_msg_timestamp, cp2.logics_msg_timestamp, cp2.index_msg_timestamp, cp2.confirm_phy_offset) \
        == (1_700_000_000_123, 1_700_000_000_100, 1_700_000_000_050, 123456)
    assert cp2.min_timestamp(True) == 1_700_000_000_050
    assert cp2.min_timestamp(False) == 1_700_000_000_100


# ---------------------------------------------------------------- mapped files
def test_mapped_file_names_and_preallocation(tmp_path):
    assert file_name_for(0) == "00000000000000000000"
    assert file_name_for(1073741824) == "00000000001073741824"
    q = MappedFileQueue(str(tmp_path / "cl"), 4096)
    mf = q.create_file(0)
    q.create_file(4096)
    assert os.path.getsize(mf.path) == 4096
    assert sorted(os.listdir(tmp_path / "cl")) == ["00000000000000000000", "00000000000000004096"]
    assert q.find(5000).file_from_offset == 4096
    assert q.find(8192) is None
    mf.view[0:4] = b"abcd"
    mf.wrote_position = 4
    mf.view[10:12] = b"zz"  # beyond the write position: warm() may zero it
    mf.warm(100)
    assert bytes(mf.view[0:4]) == b"abcd"  # warm never touches written data
    assert bytes(mf.view[10:12]) == b"\0\0" and mf.warm_position == 100
    q.close()


def test_mapped_file_creation_disk_full(tmp_path, monkeypatch):
    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    q = MappedFileQueue(str(tmp_path / "cl"), 4096)
    with pytest.raises(StoreDiskFullError):
        q.create_file(0)
    assert os.listdir(tmp_path / "cl") == []  # no half-created file left behind


def test_mapped_file_rejects_wrong_size(tmp_path):
    path = tmp_path / file_name_for(0)
    path.write_bytes(b"x" * 100)
    with pytest.raises(ValueError):
        MappedFile(str(path), 0, 4096, create=False)


# ---------------------------------------------------------------- consume queue units
def test_cq_unit_vectors():
    # wire-examples.md: unit of the Frame 4 record, and the negative tag hash example
    assert CQ_UNIT.pack(0, 229, tags_code("TagA")) == bytes.fromhex("0000000000000000000000e5000000000027a807")
    assert CQ_UNIT.pack(1234567, 180, tags_code("payment")) == \
        bytes.fromhex("000000000012d687000000b4ffffffffd11c3206")


def test_cq_file_size_rounding():
    assert round_cq_file_size(6_000_000) == 6_000_000
    assert round_cq_file_size(1001) == 1020


def test_consume_queue_append_reload_truncate(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "T", 3, 10 * 20)
    cq.append_many(list(range(0, 2500, 100)), [100] * 25, [7] * 25)  # crosses two file boundaries
    cq.append(2500, 100, -5)
    assert cq.max_offset == 26
    assert sorted(os.listdir(tmp_path / "T" / "3")) == [file_name_for(0), file_name_for(200), file_name_for(400)]
    assert cq.get_unit(25) == (2500, 100, -5)
    assert cq.get_unit(12) == (1200, 100, 7)
    cq.close()
    cq2 = ConsumeQueue(str(tmp_path), "T", 3, 10 * 20)
    cq2.load()
    assert (cq2.min_offset, cq2.max_offset) == (0, 26)
    assert cq2.truncate_beyond(2050) == 6  # units whose record ends after 2050 go
    assert cq2.max_offset == 20
    assert cq2.get_unit(19) == (1900, 100, 7)
    cq2.append(2000, 50, 1)
    assert cq2.get_unit(20) == (2000, 50, 1)
    cq2.correct_min_offset(1000)
    assert cq2.min_offset == 10
    assert cq2.delete_expired(1000) == 1  # first file's units all point below 1000
    assert cq2.min_offset == 10 and cq2.file_for(5) is None
    cq2.close()


def test_consume_queue_put_at_fills_leading_gap(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "T", 0, 10 * 20)
    cq.put_at(13, 500, 60, 0)
    assert (cq.min_offset, cq.max_offset) == (13, 14)
    assert cq.get_unit(13) == (500, 60, 0)
    assert cq.get_unit(10) == (0, 0x7FFFFFFF, 0)  # filler units before the first real one
    cq.close()


# ---------------------------------------------------------------- index
def test_key_hasher_matches_reference():
    h = KeyHasher()
    for key in ["C0A8000A303918B4AAC20BEBC2000000", "k", "", "order-1", "ünïcode-key", "a" * 70,
                "C0A8000A303918B4AAC20BEBC2000001"]:
        assert h("TopicTest", key) == index_key_hash("TopicTest#" + key)
    assert h.hash_many("Tü", ["abcdefgh"]) == [index_key_hash("Tü#abcdefgh")]


def test_index_file_name_format():
    name = index_file_name(1_700_000_000_123)
    assert len(name) == 17 and name.isdigit() and name.endswith("123")


def test_index_file_layout(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 4, 10, create=True)
    assert os.path.getsize(f.path) == 40 + 4 * 4 + 10 * 20
    assert f.put_many([5, 9], [100, 200], 1_700_000_000_000) == 2
    assert f.put_many([13], [300], 1_700_000_005_999) == 1
    data = open(f.path, "rb").read()
    begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count = struct.unpack_from(">qqqqii", data, 0)
    assert (begin_ts, end_ts, begin_phy, end_phy) == (1_700_000_000_000, 1_700_000_005_999, 100, 300)
    assert index_count == 4  # starts at 1; entry 0 unused
    assert slot_count == 1  # 5, 9, 13 all land in slot 1 (mod 4)
    assert struct.unpack_from(">i", data, 40 + 1 * 4)[0] == 3  # slot -> newest entry
    base = 40 + 4 * 4
    assert struct.unpack_from(">iqii", data, base + 1 * 20) == (5, 100, 0, 0)
    assert struct.unpack_from(">iqii", data, base + 2 * 20) == (9, 200, 0, 1)
    assert struct.unpack_from(">iqii", data, base + 3 * 20) == (13, 300, 5, 2)  # timeDiff in seconds
    out: list[int] = []
    f.select(9, 10, 0, 2**62, out)
    assert out == [200]
    f.close()


def test_index_service_collisions_and_rollover(tmp_path):
    svc = IndexService(str(tmp_path / "index"), 4, 6)  # 5 entries per file
    # "Aa" and "BB" have the same Java hashCode: a real hash collision
    assert index_key_hash("T#Aa") == index_key_hash("T#BB")
    keys = ["Aa", "BB", "k1", "k2", "k3", "k4", "k5", "Aa"]
    hashes = svc.hasher.hash_many("T", keys)
    svc.put(hashes, [i * 100 for i in range(len(keys))], 1_700_000_000_000)
    assert len(svc.files) == 2
    names = [os.path.basename(f.path) for f in svc.files]
    assert names == sorted(names) and all(len(n) == 17 for n in names)
    # a colliding key returns both candidates (callers verify the record), newest file first
    assert svc.query("T", "Aa", 10, 0, 2**62) == [700, 100, 0]
    assert svc.query("T", "k3", 10, 0, 2**62) == [400]
    assert svc.query("T", "Aa", 2, 0, 2**62) == [700, 100]
    assert svc.query("T", "k3", 10, 0, 1_600_000_000_000) == []
    svc.close()
    svc2 = IndexService(str(tmp_path / "index"), 4, 6)
    svc2.load()
    assert svc2.query("T", "k5", 10, 0, 2**62) == [600]
    assert svc2.last_phy_offset == 700
    svc2.close()
