"""Filter pushdown into the `rocketmq` source, auto-registration and the export job's guard rails.

Every query must return with pushdown on in the session exactly what it returns with pushdown off. The reader
narrows a read by the filters it takes only on a Spark that keeps a pushed read with its scan (none released:
see test_spark_pushdown_reuse.py); that narrowing is checked here in-process, driving the reader as Spark's
planning worker does: each pushed read returns exactly the unpushed query's rows, and the reads it allows really
skip data (a copy of the store with everything but the wanted records zeroed still answers them)."""

from __future__ import annotations

import datetime as dt
import mmap
import os
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spark_export import pushdown
from spark_export.startup import PTH_NAME, pth_text
from tests.support.spark_scenario import GROUP

PROJECT = Path(__file__).resolve().parent.parent.parent
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
KEY_OF_300 = "order-300"  # message 300: KEYS "order-300 user-11"
UNIQ_OF_301 = f"{0xC0A80001:08X}{301:024X}"


def _rows(spark, store, where: str, session_pushdown: bool, **options) -> list[tuple]:
    spark.conf.set(PUSHDOWN, "true" if session_pushdown else "false")
    try:
        reader = spark.read.format("rocketmq")
        for key, value in options.items():
            reader = reader.option(key, value)
        df = reader.load(str(store)).where(where)
        return sorted((r.commitlog_offset, r.topic, r.queue_id, r.queue_offset, r.tags, r.keys, r.uniq_key,
                       bytes(r.body or b"")) for r in df.collect())
    finally:
        spark.conf.set(PUSHDOWN, "false")


def _store_ms(broker_store) -> int:
    """A store time in the middle of the scenario (from a record pulled back while the broker ran)."""
    times = sorted(r.store_timestamp for r in broker_store.pulled.values())
    return times[len(times) // 2]


def _filters(broker_store) -> list[str]:
    offsets = sorted(broker_store.pulled)
    lo, hi = offsets[len(offsets) // 3], offsets[2 * len(offsets) // 3]
    ms = _store_ms(broker_store)
    return [
        "topic = 'SparkOrders'",
        "topic IN ('SparkOrders', 'SparkAudit')",
        "topic = 'SparkOrders' AND queue_id = 2",
        "topic = 'SparkEvents' AND queue_id IN (1, 3) AND queue_offset BETWEEN 10 AND 40",
        "queue_id = 0 AND queue_offset >= 200",
        "queue_offset > 100 AND queue_offset < 120",
        f"commitlog_offset > {lo} AND commitlog_offset <= {hi}",
        f"commitlog_offset >= {lo + 1}",  # not a record start: the scan must find the next one
        f"topic = 'SparkAudit' AND commitlog_offset < {hi}",
        f"store_timestamp >= timestamp_millis({ms})",
        f"store_timestamp < timestamp_millis({ms}) AND topic = 'SparkOrders'",
        "topic = 'SparkEvents' AND tags = 'TagB'",
        "tags = '标签'",
        "topic = 'SparkEvents' AND tags IN ('TagA', 'Batch')",
        f"keys = '{KEY_OF_300} user-11'",
        f"topic = 'SparkOrders' AND keys = '{KEY_OF_300} user-11'",
        f"uniq_key = '{UNIQ_OF_301}'",
        f"uniq_key IN ('{UNIQ_OF_301}', 'NOPE')",
        f"topic = '%RETRY%{GROUP}'",
        f"topic = '%DLQ%{GROUP}'",
        "topic = 'SCHEDULE_TOPIC_XXXX' AND tags = 'x'",  # the schedule topic's tag slot holds a time: not used
        "topic = 'NoSuchTopic'",
        "topic = 'SparkOrders' AND topic = 'SparkEvents'",
        "tags = 'TagA' OR queue_id = 1",  # not pushed (an OR)
        "queue_id IS NULL",
    ]


def _pushed_filters(broker_store) -> dict[str, list]:
    """Some of _filters() as the Filter objects Spark hands a Python reader for them."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

    offsets = sorted(broker_store.pulled)
    lo, hi = offsets[len(offsets) // 3], offsets[2 * len(offsets) // 3]
    ms = _store_ms(broker_store)
    at = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    topic, qid, qoff = ("topic",), ("queue_id",), ("queue_offset",)
    return {
        "topic = 'SparkOrders'": [EqualTo(topic, "SparkOrders")],
        "topic IN ('SparkOrders', 'SparkAudit')": [In(topic, ("SparkOrders", "SparkAudit"))],
        "topic = 'SparkEvents' AND queue_id IN (1, 3) AND queue_offset BETWEEN 10 AND 40":
            [EqualTo(topic, "SparkEvents"), In(qid, (1, 3)), GreaterThanOrEqual(qoff, 10), LessThanOrEqual(qoff, 40)],
        "queue_id = 0 AND queue_offset >= 200": [EqualTo(qid, 0), GreaterThanOrEqual(qoff, 200)],
        f"commitlog_offset > {lo} AND commitlog_offset <= {hi}":
            [GreaterThan(("commitlog_offset",), lo), LessThanOrEqual(("commitlog_offset",), hi)],
        f"commitlog_offset >= {lo + 1}": [GreaterThanOrEqual(("commitlog_offset",), lo + 1)],
        f"store_timestamp < timestamp_millis({ms}) AND topic = 'SparkOrders'":
            [LessThan(("store_timestamp",), at), EqualTo(topic, "SparkOrders")],
        "topic = 'SparkEvents' AND tags = 'TagB'": [EqualTo(topic, "SparkEvents"), EqualTo(("tags",), "TagB")],
        "tags = '标签'": [EqualTo(("tags",), "标签")],
        f"keys = '{KEY_OF_300} user-11'": [EqualTo(("keys",), f"{KEY_OF_300} user-11")],
        f"uniq_key IN ('{UNIQ_OF_301}', 'NOPE')": [In(("uniq_key",), (UNIQ_OF_301, "NOPE"))],
        f"topic = '%DLQ%{GROUP}'": [EqualTo(topic, f"%DLQ%{GROUP}")],
        "topic = 'SCHEDULE_TOPIC_XXXX' AND tags = 'x'": [EqualTo(topic, "SCHEDULE_TOPIC_XXXX"), EqualTo(("tags",), "x")],
        "topic = 'NoSuchTopic'": [EqualTo(topic, "NoSuchTopic")],
    }


def _reader_rows(monkeypatch, store, filters: list, **options) -> list[tuple]:
    """The rows a pushed read returns, the reader driven as Spark's planning worker drives it (pushFilters, then the
    pickled reader's partitions and read), on a Spark that would keep the read with its scan; the filters the
    reader leaves are applied as Spark applies them."""
    from spark_export.file_source import ReadOptions, RocketMQFilteringReader
    from spark_export.pushdown import read_filter_mask
    from spark_export.schema import arrow_for

    monkeypatch.setattr(pushdown, "pushed_reads_stay_with_their_scan", lambda version=None: True)
    reader = RocketMQFilteringReader(ReadOptions.parse({"path": str(store), **options}), arrow_for("messages"))
    rest = list(reader.pushFilters(list(filters)))
    assert len(rest) < len(filters) or not filters, "the reader took none of the filters"
    reader = pickle.loads(pickle.dumps(reader))
    rows = []
    for part in pickle.loads(pickle.dumps(reader.partitions())):
        for batch in reader.read(part):
            mask = read_filter_mask(batch, rest)
            rows.extend((batch if mask is None else batch.filter(mask)).to_pylist())
    return sorted((r["commitlog_offset"], r["topic"], r["queue_id"], r["queue_offset"], r["tags"], r["keys"],
                   r["uniq_key"], bytes(r["body"] or b"")) for r in rows)


def test_a_pushed_read_returns_exactly_the_unpushed_rows(spark, broker_store, monkeypatch):
    for where, filters in _pushed_filters(broker_store).items():
        expected = _rows(spark, broker_store.store_dir, where, False)
        assert _reader_rows(monkeypatch, broker_store.store_dir, filters) == expected, where
    orders = _reader_rows(monkeypatch, broker_store.store_dir, _pushed_filters(broker_store)["topic = 'SparkOrders'"])
    assert len(orders) >= 1000


def test_every_pushed_filter_returns_the_unpushed_rows(spark, broker_store):
    for where in _filters(broker_store):
        pushed = _rows(spark, broker_store.store_dir, where, True)
        plain = _rows(spark, broker_store.store_dir, where, False)
        assert pushed == plain, where
    # sanity: the filters select something where they should
    assert len(_rows(spark, broker_store.store_dir, "topic = 'SparkOrders'", True)) >= 1000
    assert [r[5] for r in _rows(spark, broker_store.store_dir, f"uniq_key = '{UNIQ_OF_301}'", True)] == [None]


def test_the_topics_option_and_pushed_filters_together(spark, broker_store):
    where = "topic IN ('SparkOrders', 'SparkEvents') AND queue_id = 1"
    pushed = _rows(spark, broker_store.store_dir, where, True, topics="SparkEvents,SparkAudit")
    plain = _rows(spark, broker_store.store_dir, where, False, topics="SparkEvents,SparkAudit")
    assert pushed == plain and pushed and {r[1] for r in pushed} == {"SparkEvents"}


def _zeroed_copy(broker_store, tmp_path: Path, keep: set[int]) -> Path:
    """A copy of the store whose commit log is zero except the records starting at `keep` (global offsets)."""
    copy = tmp_path / "store"
    shutil.copytree(broker_store.store_dir, copy, ignore=shutil.ignore_patterns("lock"))
    sizes = {offset: r.total_size for offset, r in broker_store.pulled.items()}
    for path in sorted((copy / "commitlog").iterdir()):
        base = int(path.name)
        with open(path, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            mm = mmap.mmap(f.fileno(), size)
            kept = {o - base: mm[o - base:o - base + sizes[o]] for o in keep if base <= o < base + size}
            mm[:] = bytes(size)
            for pos, data in kept.items():
                mm[pos:pos + len(data)] = data
            mm.flush()
            mm.close()
    return copy


def test_a_topic_query_reads_only_that_topics_records(spark, broker_store, tmp_path, monkeypatch):
    from pyspark.sql.datasource import EqualTo, In

    orders = {o for o, r in broker_store.pulled.items() if r.topic == "SparkOrders"}
    copy = _zeroed_copy(broker_store, tmp_path, orders)
    where = "topic = 'SparkOrders' AND queue_id IN (0, 2)"
    expected = _rows(spark, broker_store.store_dir, where, False)
    # the topics option (narrows the table itself, so every query of the DataFrame agrees), through Spark
    assert expected and _rows(spark, copy, "queue_id IN (0, 2)", True, topics="SparkOrders") == expected
    # the same filters pushed (where Spark keeps a pushed read with its scan)
    pushed = [EqualTo(("topic",), "SparkOrders"), In(("queue_id",), (0, 2))]
    assert _reader_rows(monkeypatch, copy, pushed) == expected
    # without either, the copy's scan ends at the first zeroed record: it could not have answered
    assert len(_rows(spark, copy, where, False)) < len(expected)


def test_a_key_lookup_reads_through_the_index(spark, broker_store, tmp_path, monkeypatch):
    from pyspark.sql.datasource import EqualTo

    target = [o for o, r in broker_store.pulled.items() if r.properties.get("UNIQ_KEY") == UNIQ_OF_301]
    copy = _zeroed_copy(broker_store, tmp_path, set(target))
    where = f"uniq_key = '{UNIQ_OF_301}'"
    expected = _rows(spark, broker_store.store_dir, where, False)
    assert len(expected) == 1 and _reader_rows(monkeypatch, copy, [EqualTo(("uniq_key",), UNIQ_OF_301)]) == expected
    assert _rows(spark, copy, where, False) == [] or target[0] == min(broker_store.pulled)


def test_pushdown_option_false_and_a_session_without_pushdown(spark, broker_store):
    where = "topic = 'SparkAudit' AND queue_id = 3"
    expected = _rows(spark, broker_store.store_dir, where, False)
    assert _rows(spark, broker_store.store_dir, where, True, pushdown="false") == expected
    # pushdown=true where Spark shares a pushed read between scans (every release so far): refused, clearly
    if not pushdown.pushed_reads_stay_with_their_scan():
        with pytest.raises(Exception, match="pushdown=true is refused"):
            _rows(spark, broker_store.store_dir, where, True, pushdown="true")


def _installed_copy(tmp_path: Path) -> Path:
    """The package as pip installs it (a wheel built offline, unpacked): pyspark_rocketmq and the start-up .pth at
    the top level."""
    dist = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "-q", "-w", str(dist), str(PROJECT)], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    target = tmp_path / "site"
    with zipfile.ZipFile(next(dist.glob("*.whl"))) as wheel:
        wheel.extractall(target)
    assert (target / "pyspark_rocketmq" / "__init__.py").exists()
    # the start-up hook (Spark's workers run this interpreter), at the top of purelib, listed in RECORD; no folder
    # line: pyspark_rocketmq is installed beside it
    assert (target / PTH_NAME).read_text() == pth_text()
    record = next(target.glob("*.dist-info/RECORD")).read_text().splitlines()
    assert any(row.startswith(f"{PTH_NAME},sha256=") for row in record)
    return target


FRESH_SESSION = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.sql.python.filterPushdown.enabled", "true").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
df = spark.read.format("rocketmq").load(sys.argv[1])
print("COUNT", df.where("topic = 'SparkAudit'").count(), flush=True)
spark.stop()
"""


def test_a_fresh_session_finds_the_source_without_register(broker_store, tmp_path):
    site = _installed_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(PYTHONPATH=str(site), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, "-c", FRESH_SESSION, str(broker_store.store_dir)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    audit = sum(1 for r in broker_store.pulled.values() if r.topic == "SparkAudit")
    assert f"COUNT {audit}" in proc.stdout


def test_the_job_refuses_to_overwrite_unless_told(spark, broker_store, tmp_path):
    from spark_export.job import JobError, export, main

    out = tmp_path / "out"
    export(spark, str(broker_store.store_dir), str(out), "parquet", ["SparkAudit"])
    with pytest.raises(JobError, match="--mode overwrite"):
        export(spark, str(broker_store.store_dir), str(out), "parquet", ["SparkAudit"])
    summary = export(spark, str(broker_store.store_dir), str(out), "parquet", ["SparkAudit"], mode="overwrite")
    assert summary["rows"]["messages"] == sum(1 for r in broker_store.pulled.values() if r.topic == "SparkAudit")
    appended = export(spark, str(broker_store.store_dir), str(out), "parquet", ["SparkAudit"], mode="append")
    assert appended["rows"]["messages"] == 2 * summary["rows"]["messages"]
    assert main(["--store", str(broker_store.store_dir), "--out", str(out)]) == 2  # before any Spark start
