"""The decoder's shortcuts against the project's own record codec (no SparkSession: plain numpy/pyarrow).

The fast paths (one header gather per record, the TAGS-first shortcut, planning from an estimated data extent)
must give exactly what the general rules give: Java's property decoding (protocol.properties) and the record
chain walked one record at a time (protocol.message.check_record).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from protocol.ids import pack_host
from protocol.message import check_record, pack_blank_marker_into, pack_record_into, record_size
from protocol.properties import decode_properties_bytes
from spark_export.file_source import ReadOptions, RocketMQReader
from spark_export.decode import DecodeOptions, decode_messages
from spark_export.records import ChainEnd, ChainScan
from spark_export.schema import MESSAGES_ARROW
from spark_export.store import data_extent, open_store, plan_commit_log_partitions

TRICKY_PROPERTIES = [
    b"TAGS\x01tagA\x02KEYS\x01k1\x02UNIQ_KEY\x01U1\x02",
    b"KEYS\x01k\x02TAGS\x01late\x02",                 # TAGS not first
    b"TAGS\x01first\x02X\x01y\x02TAGS\x01second\x02",  # a later duplicate wins
    b"TAGS\x01first\x02TAGS\x01\x02",                 # a later empty duplicate is dropped
    b"TAGS\x01\x02KEYS\x01k\x02",                     # empty value: no TAGS
    b"TAGS\x01\x02TAGS\x01real\x02",
    b"TAGS\x01v\x01w\x02",                            # the value keeps a later \x01
    b"TAGS\x01noterm",                                # last segment without \x02
    b"TAGS\x01",
    b"TAGS",
    b"",
    b"XTAGS\x01no\x02",
    b"\x02TAGS\x01lead\x02",
    b"TAGS\x01a\x02\x02TAGS\x01b",
    b"TAGS\x01\xff\xfebad\x02",                       # invalid UTF-8: replacement characters
    "TAGS\x01t\u00e9\x02".encode(),
    b"TAGS\x01x" + b"y" * 300 + b"\x02KEYS\x01kk\x02",
    b"K\x01TAGS\x01\x02",                             # "TAGS\x01" inside a value
]


def _write_store(root: Path, count: int, seed: int, file_size: int = 256 << 10) -> Path:
    """Several commit-log files (BLANK markers at the ends), IPv4/IPv6 hosts, V1/V2 topics, compressed bodies,
    tricky properties, and a zero pre-allocated tail in the last file."""
    rnd = random.Random(seed)
    log = root / "commitlog"
    log.mkdir(parents=True)
    base, pos, buf = 0, 0, bytearray(file_size)
    for i in range(count):
        topic = b"L" * 130 if i % 17 == 0 else b"T%d" % (i % 5)
        body = bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 3, 40])))
        sysflag = 0
        if i % 11 == 0:
            body, sysflag = zlib.compress(body + b"x"), 1
        born = pack_host("::1", 4000) if i % 7 == 0 else pack_host("10.0.0.%d" % (i % 3), 5000)
        store = pack_host("fe80::2", 10911) if i % 5 == 0 else pack_host("10.0.0.1", 10911)
        props = TRICKY_PROPERTIES[i % len(TRICKY_PROPERTIES)]
        size = record_size(len(body), len(topic), len(props), len(born) == 20, len(store) == 20)
        if pos + size + 8 > file_size:
            pack_blank_marker_into(buf, pos, file_size - pos)
            (log / f"{base:020d}").write_bytes(buf)
            base, pos, buf = base + file_size, 0, bytearray(file_size)
        pack_record_into(buf, pos, queue_id=i % 4, flag=i, queue_offset=i, physical_offset=base + pos,
                         sys_flag=sysflag, born_timestamp=1_700_000_000_000 + i, born_host=born,
                         store_timestamp=1_700_000_000_500 + i, store_host=store, reconsume_times=i % 3,
                         prepared_transaction_offset=i, body=body, topic=topic, properties=props)
        pos += size
    (log / f"{base:020d}").write_bytes(buf)
    return root


def _walk(path: Path) -> list[tuple[int, bytes]]:
    """(position, properties bytes) of every record, one record at a time."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        size = check_record(data, pos, len(data), verify_crc=True)
        if size <= 0:
            break
        out.append((pos, data[pos:pos + size]))
        pos += size
    return out


def _props_of(record: bytes) -> bytes:
    sysflag = int.from_bytes(record[36:40], "big")
    body_pos = 72 + (20 if sysflag & 0x10 else 8) + (20 if sysflag & 0x20 else 8)
    body_len = int.from_bytes(record[body_pos - 4:body_pos], "big")
    v2 = int.from_bytes(record[4:8], "big", signed=True) == -626843477
    t = body_pos + body_len
    topic_len = int.from_bytes(record[t:t + (2 if v2 else 1)], "big")
    p = t + (2 if v2 else 1) + topic_len
    return record[p + 2:p + 2 + int.from_bytes(record[p:p + 2], "big")]


@pytest.mark.parametrize("seed", [1, 2])
def test_chain_and_tags_match_the_record_codec(tmp_path, seed):
    store = _write_store(tmp_path, 2500, seed)
    schema = pa.schema([MESSAGES_ARROW.field(n) for n in ("commitlog_offset", "tags", "keys", "topic")])
    for path in sorted((store / "commitlog").iterdir()):
        expected = _walk(path)
        buf = np.frombuffer(path.read_bytes(), np.uint8)
        base = int(path.name)
        scan = ChainScan(buf, base, 0, batch=7)  # small batches: the chain resumes across walks
        batches = [decode_messages(buf, base, records, DecodeOptions(schema=schema)) for records in scan]
        got = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
        assert got["commitlog_offset"].to_pylist() == [base + p for p, _ in expected]
        props = [decode_properties_bytes(_props_of(r)) for _, r in expected]
        assert got["tags"].to_pylist() == [p.get("TAGS") for p in props]
        assert got["keys"].to_pylist() == [p.get("KEYS") for p in props]
        assert scan.reason in (ChainEnd.BLANK, ChainEnd.DATA)


def test_properties_map_matches_the_codec(tmp_path):
    """The properties map and the columns picked from it follow Java's rules on every tricky layout."""
    store = _write_store(tmp_path, 600, 4)
    schema = pa.schema([MESSAGES_ARROW.field(n) for n in ("properties", "tags", "keys", "uniq_key")])
    for path in sorted((store / "commitlog").iterdir()):
        expected = [decode_properties_bytes(_props_of(r)) for _, r in _walk(path)]
        buf = np.frombuffer(path.read_bytes(), np.uint8)
        scan = ChainScan(buf, int(path.name), 0, batch=5)
        got = pa.Table.from_batches([decode_messages(buf, int(path.name), r, DecodeOptions(schema=schema))
                                     for r in scan], schema=schema)
        assert [sorted(m) for m in got["properties"].to_pylist()] == [sorted(p.items()) for p in expected]
        for column, name in (("tags", "TAGS"), ("keys", "KEYS"), ("uniq_key", "UNIQ_KEY")):
            assert got[column].to_pylist() == [p.get(name) for p in expected]


def test_consume_queue_offsets_are_distinct_and_ascending():
    """The planning dedup (a sort, not np.unique) keeps every offset once, in order, duplicates and all."""
    from spark_export.targeted import sorted_unique

    rng = np.random.default_rng(7)
    for values in (np.empty(0, np.int64), np.array([5], np.int64), rng.integers(0, 50, 400),
                   rng.integers(-(1 << 40), 1 << 40, 10_000)):
        got = sorted_unique(values.astype(np.int64))
        assert got.dtype == np.int64 and got.tolist() == sorted(set(values.tolist()))


def test_planning_shares_the_data_and_covers_every_record(tmp_path):
    store = _write_store(tmp_path, 2500, 3)
    layout = open_store(str(store))
    last_base, last_path, last_size = layout.commit_log_files[-1]
    extent = data_extent(last_path, last_size)
    written = max(p + len(r) for p, r in _walk(Path(last_path)))
    assert written - 200 <= extent <= written  # the last record may end in zero bytes
    for split, parts in ((1 << 30, 2), (50_000, 2), (1 << 30, 5)):
        plan = plan_commit_log_partitions(layout, split, parts)
        ranges = [r for group in plan for r in group]
        assert len(plan) >= 2
        for base, path, size in layout.commit_log_files:  # every file is covered exactly, start to end
            mine = sorted((r.begin, r.end) for r in ranges if r.path == path)
            assert mine[0][0] == 0 and mine[-1][1] == size
            assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))
        reader = RocketMQReader(ReadOptions.parse({"path": str(store), "split_bytes": str(split),
                                                   "min_partitions": str(parts), "columns": "commitlog_offset"}),
                                pa.schema([MESSAGES_ARROW.field("commitlog_offset")]))
        offsets = [o for p in reader.partitions() for b in reader.read(p) for o in b.column(0).to_pylist()]
        want = [int(f.name) + p for f in sorted((store / "commitlog").iterdir()) for p, _ in _walk(f)]
        assert offsets == want


def test_reads_compile_nothing_after_the_frozen_warm_up(tmp_path):
    """Every kernel a read calls was loaded by ensure_loaded for the same argument types, so nothing the GC
    would scan after each PySpark task appears after the freeze (checked in a fresh interpreter)."""
    store = _write_store(tmp_path, 300, 5)
    script = f"""
import gc, pyarrow as pa
from spark_export import kernels
from spark_export.file_source import ReadOptions, RocketMQReader
from spark_export.schema import MESSAGES_ARROW
for extra in ({{}}, {{"columns": "tags,keys,topic"}}, {{"split_bytes": "4096", "min_partitions": "5"}}):
    options = ReadOptions.parse({{"path": {str(store)!r}, **extra}})
    schema = pa.schema([MESSAGES_ARROW.field(c) for c in options.columns]) if options.columns else MESSAGES_ARROW
    reader = RocketMQReader(options, schema)
    assert sum(b.num_rows for p in reader.partitions() for b in reader.read(p)) == 300
names = ("check_record", "walk_chain", "find_first_record", "find_property", "split_properties")
print([len(getattr(kernels, n).signatures) for n in names], gc.get_freeze_count() > 0)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                        os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-2] == "[1, 1, 1, 1, 1] True"


_FUZZ = """
import random, sys
import numpy as np
from protocol.message import check_record
from spark_export.decode import DecodeOptions, decode_messages
from spark_export.records import ChainScan

original = open(sys.argv[1], "rb").read()
base = int(sys.argv[1].rsplit("/", 1)[1])
def length_fields(at):  # positions of a record's TOTALSIZE, body, topic and properties length fields
    sysflag = int.from_bytes(original[at + 36:at + 40], "big")
    body_pos = at + 72 + (20 if sysflag & 0x10 else 8) + (20 if sysflag & 0x20 else 8)
    tpos = body_pos + int.from_bytes(original[body_pos - 4:body_pos], "big")
    v2 = original[at + 7] == 0xAB
    props_pos = tpos + (2 if v2 else 1) + int.from_bytes(original[tpos:tpos + (2 if v2 else 1)], "big") + 2
    return [at, body_pos - 4, tpos, props_pos - 2]


starts, pos = [], 0
while (size := check_record(original, pos, len(original), verify_crc=False, check_names=False)) > 0:
    starts.append((pos, size, length_fields(pos)))
    pos += size
rnd = random.Random(7)
records = 0
for case in range(int(sys.argv[2])):
    data = bytearray(original)
    for _ in range(rnd.randrange(1, 40)):  # flipped bytes anywhere
        data[rnd.randrange(len(data))] = rnd.randrange(256)
    if case % 3 == 0:  # a zeroed or garbage run
        at, length = rnd.randrange(len(data)), rnd.randrange(1, 600)
        data[at:at + length] = bytes(rnd.randrange(256) for _ in range(len(data[at:at + length])))
    if case % 2 == 0:  # a length field of one record made wrong, the file cut around that record's end
        at, size, fields = rnd.choice(starts)
        field = rnd.choice(fields) + rnd.choice([0, 0, 1, 2, 3])
        data[field] = rnd.randrange(256)
        data = data[:at + size + rnd.randrange(-40, 200)]
    elif case % 4 == 1:
        data = data[:rnd.randrange(len(data))]
    buf = np.frombuffer(bytes(data), np.uint8)
    begin = 0 if case % 2 else rnd.randrange(len(data) + 1)
    scan = ChainScan(buf, base, begin, synced=begin == 0, batch=rnd.choice([1, 7, 64, 8192]))
    previous = None
    for batch in scan:
        decode_messages(buf, base, batch, DecodeOptions())  # every column, the properties map included
        for pos, size in zip(batch.pos.tolist(), batch.size.tolist()):
            # the same structure as the record codec (names are the store's concern: Spark makes no path of them)
            assert check_record(data, pos, len(data), verify_crc=False, check_names=False) == size, (case, pos)
            assert previous is None or previous == pos, (case, previous, pos)
            previous = pos + size
            records += 1
    assert scan.end is not None and scan.reason is not None
print("ok", records)
"""


def test_corrupted_files_never_read_outside_the_buffer(tmp_path):
    """Flipped bytes, garbage runs and truncations, read with numba's bounds checking on: the kernels never
    index outside the buffer, and every record they return is one the record codec accepts, chained."""
    store = _write_store(tmp_path / "store", 250, 6, file_size=1 << 20)
    first = sorted((store / "commitlog").iterdir())[0]
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", _FUZZ, str(first), "600"], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ok ") and int(result.stdout.split()[1]) > 400, result.stdout
