"""The `rocketmq` data source against a store written by the real broker: every table, field by field."""

from __future__ import annotations

import mmap
import zlib
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from protocol.hashing import tags_code
from protocol.message import check_record, decode_record

from tests.support.spark_scenario import DEAD, GROUP, MESSAGES, RETRIED, TOPICS

RETRY_TOPIC, DLQ_TOPIC = f"%RETRY%{GROUP}", f"%DLQ%{GROUP}"


def _messages(spark, store, **options):
    reader = spark.read.format("rocketmq")
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load(str(store))
    return df.withColumn("born_ms", F.unix_millis("born_timestamp")).withColumn(
        "store_ms", F.unix_millis("store_timestamp"))


def _file_records(commitlog: Path):
    """Every record of the commit-log files, decoded by the project's own record codec (protocol.message)."""
    out = {}
    for path in sorted(commitlog.iterdir()):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            size = check_record(data, pos, len(data), verify_crc=True)
            if size <= 0:
                break
            record = decode_record(data, pos)
            out[record.physical_offset] = record
            pos += size
    return out


def _host(host: tuple[str, int]) -> str:
    return f"[{host[0]}]:{host[1]}" if ":" in host[0] else f"{host[0]}:{host[1]}"


def _assert_row_is_record(row, record) -> None:
    assert row.topic == record.topic
    assert (row.queue_id, row.queue_offset, row.commitlog_offset) == (
        record.queue_id, record.queue_offset, record.physical_offset)
    assert (row.size, row.magic, row.body_crc, row.flag, row.sysflag) == (
        record.total_size, record.magic, record.body_crc, record.flag, record.sys_flag)
    assert (row.born_ms, row.store_ms) == (record.born_timestamp, record.store_timestamp)
    assert (row.born_host, row.store_host) == (_host(record.born_host), _host(record.store_host))
    assert row.reconsume_times == record.reconsume_times
    assert row.prepared_transaction_offset == record.prepared_transaction_offset
    assert row.properties == record.properties
    p = record.properties
    assert (row.tags, row.keys, row.uniq_key) == (p.get("TAGS"), p.get("KEYS"), p.get("UNIQ_KEY"))
    assert (row.retry_topic, row.real_topic) == (p.get("RETRY_TOPIC"), p.get("REAL_TOPIC"))
    assert row.body_length == len(record.body)
    assert row.compressed == bool(record.sys_flag & 1)
    assert bytes(row.body) == (zlib.decompress(record.body) if record.sys_flag & 1 else record.body)


@pytest.fixture(scope="module")
def message_rows(spark, broker_store):
    rows = _messages(spark, broker_store.store_dir).collect()
    return {row.commitlog_offset: row for row in rows}, len(rows)


def test_every_record_reads_back_field_by_field(broker_store, message_rows):
    by_offset, count = message_rows
    assert count == len(by_offset)
    expected = _file_records(broker_store.store_dir / "commitlog")
    assert len(list((broker_store.store_dir / "commitlog").iterdir())) > 2  # BLANK markers were crossed
    assert sorted(by_offset) == sorted(expected)
    for offset, record in expected.items():
        _assert_row_is_record(by_offset[offset], record)
    # The broker's own answers: every record pulled back over the wire.
    assert len(broker_store.pulled) >= MESSAGES + 10 + RETRIED + DEAD
    for offset, record in broker_store.pulled.items():
        _assert_row_is_record(by_offset[offset], record)


def test_every_sent_message_matches_what_was_sent(broker_store, message_rows):
    by_offset, _ = message_rows
    assert len(broker_store.sent) == MESSAGES + 10
    for sent in broker_store.sent:
        row = by_offset[sent.commitlog_offset]
        assert (row.topic, row.queue_id, row.queue_offset) == (sent.topic, sent.queue_id, sent.queue_offset)
        assert bytes(row.body) == sent.body and row.flag == sent.flag
        assert row.body_length == len(sent.stored_body) and row.compressed == bool(sent.sys_flag & 1)
        assert row.properties.items() >= sent.properties.items()
        assert (row.tags, row.keys) == (sent.properties.get("TAGS"), sent.properties.get("KEYS"))
        assert row.uniq_key == sent.properties["UNIQ_KEY"]
        if sent.born_timestamp:
            assert row.born_ms == sent.born_timestamp
        assert row.store_host == broker_store.store_host and row.reconsume_times == 0


def test_retries_and_dead_letters(spark, broker_store, message_rows):
    by_offset, _ = message_rows
    rows = list(by_offset.values())
    retries = [r for r in rows if r.topic == RETRY_TOPIC]
    dead = [r for r in rows if r.topic == DLQ_TOPIC]
    scheduled = [r for r in rows if r.topic == "SCHEDULE_TOPIC_XXXX"]
    originals = {r.uniq_key: r for r in rows if r.topic == "SparkOrders" and r.queue_id == 0}
    assert len(retries) == RETRIED and len(dead) == DEAD and len(scheduled) == RETRIED
    for r in retries + dead:
        assert r.retry_topic == "SparkOrders" and r.uniq_key in originals
        assert bytes(r.body) == bytes(originals[r.uniq_key].body)
    assert {r.reconsume_times for r in retries} == {1}
    assert {r.real_topic for r in scheduled} == {RETRY_TOPIC}
    df = _messages(spark, broker_store.store_dir)
    counts = {r["topic"]: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts[RETRY_TOPIC] == RETRIED and counts[DLQ_TOPIC] == DEAD
    assert sum(counts[t] for t in TOPICS) == MESSAGES + 10


def test_consume_queue_matches_broker_max_offsets(spark, broker_store, message_rows):
    by_offset, _ = message_rows
    cq = spark.read.format("rocketmq").option("table", "consume_queue").load(str(broker_store.store_dir))
    units = cq.collect()
    per_queue = {}
    for u in units:
        per_queue.setdefault((u.topic, u.queue_id), []).append(u.queue_offset)
        row = by_offset[u.commitlog_offset]
        assert (row.topic, row.queue_id, row.size) == (u.topic, u.queue_id, u.size)
        if u.topic != "SCHEDULE_TOPIC_XXXX":  # there tagsCode is the delivery time
            assert row.queue_offset == u.queue_offset and u.tags_code == tags_code(row.tags)
    for (topic, queue_id), max_offset in broker_store.max_offsets.items():
        offsets = sorted(per_queue.get((topic, queue_id), []))
        assert offsets == list(range(max_offset)), (topic, queue_id)
    assert sum(len(v) for v in per_queue.values()) == len(by_offset)  # every record was dispatched


def test_offsets_table_matches_query_consumer_offset(spark, broker_store):
    rows = spark.read.format("rocketmq").option("table", "offsets").load(str(broker_store.store_dir)).collect()
    got = {(r.topic, r.group, r.queue_id): r.offset for r in rows}
    assert got == broker_store.consumer_offsets


def test_topics_table(spark, broker_store):
    rows = spark.read.format("rocketmq").option("table", "topics").load(str(broker_store.store_dir)).collect()
    by_name = {r.topic: r for r in rows}
    for topic in TOPICS:
        assert (by_name[topic].read_queue_nums, by_name[topic].write_queue_nums, by_name[topic].perm) == (4, 4, 6)
    assert RETRY_TOPIC in by_name and DLQ_TOPIC in by_name


def test_byte_range_splits_topics_option_and_pruned_schema(spark, broker_store, message_rows):
    by_offset, _ = message_rows
    store = str(broker_store.store_dir)
    tiny = spark.read.format("rocketmq").option("split_bytes", "20000").load(store)
    assert tiny.rdd.getNumPartitions() > 30
    offsets = [r.commitlog_offset for r in tiny.select("commitlog_offset").collect()]
    assert sorted(offsets) == sorted(by_offset) and len(offsets) == len(set(offsets))
    audit = (spark.read.format("rocketmq").option("topics", "SparkAudit, %DLQ%sparkGroup")
             .schema("tags string, topic string, queue_offset long").load(store))
    assert audit.columns == ["tags", "topic", "queue_offset"]
    got = sorted((r.topic, r.queue_offset, r.tags or "") for r in audit.collect())
    want = sorted((r.topic, r.queue_offset, r.tags or "") for r in by_offset.values()
                  if r.topic in ("SparkAudit", DLQ_TOPIC))
    assert got == want
    picked = spark.read.format("rocketmq").option("columns", "keys, uniq_key,commitlog_offset,retry_topic").load(store)
    assert picked.columns == ["keys", "uniq_key", "commitlog_offset", "retry_topic"]
    assert sorted(picked.collect(), key=lambda r: r.commitlog_offset) == sorted(
        ((r.keys, r.uniq_key, r.commitlog_offset, r.retry_topic) for r in by_offset.values()), key=lambda t: t[2])
    header = spark.read.format("rocketmq").option("columns", "commitlog_offset,queue_id,sysflag,born_timestamp").load(store)
    assert sorted(tuple(r) for r in header.collect()) == sorted(
        (r.commitlog_offset, r.queue_id, r.sysflag, r.born_timestamp) for r in by_offset.values())
    with pytest.raises(Exception, match="no column"):
        spark.read.format("rocketmq").option("columns", "topic,nope").load(store).collect()
    nobody = spark.read.format("rocketmq").option("include_body", "false").load(store)
    assert nobody.where(F.col("body").isNotNull()).count() == 0
    raw = spark.read.format("rocketmq").option("decompress", "false").load(store).where("compressed").collect()
    assert raw and all(zlib.decompress(bytes(r.body)) == bytes(by_offset[r.commitlog_offset].body) for r in raw)


def test_columns_every_record_has_are_not_null(spark, broker_store):
    """NOT NULL columns (Spark skips their null checks) never hold a null; a user schema may still call them
    nullable, but not declare NOT NULL a column that can be null."""
    store = str(broker_store.store_dir)
    df = spark.read.format("rocketmq").load(store)
    required = [f.name for f in df.schema.fields if not f.nullable]
    assert {"topic", "commitlog_offset", "properties", "store_host", "born_timestamp"} <= set(required)
    assert {"body", "tags", "keys", "uniq_key", "retry_topic", "real_topic"}.isdisjoint(required)
    nulls = df.select([F.count(F.when(F.col(c).isNull(), 1)).alias(c) for c in required]).collect()[0]
    assert all(v == 0 for v in nulls) and df.count() > 1000
    loose = spark.read.format("rocketmq").schema("topic string, tags string").load(store)
    assert loose.schema["topic"].nullable and loose.count() == df.count()
    assert spark.read.format("rocketmq").schema("topic string NOT NULL").load(store).count() == df.count()
    with pytest.raises(Exception, match="can be null"):
        spark.read.format("rocketmq").schema("topic string, tags string NOT NULL").load(store).collect()


def test_not_a_store_fails_clearly(spark, tmp_path):
    with pytest.raises(Exception, match="not a RocketMQ store"):
        spark.read.format("rocketmq").load(str(tmp_path)).count()


def _copy_store(src: Path, dst: Path) -> Path:
    (dst / "commitlog").mkdir(parents=True)
    for f in (src / "commitlog").iterdir():
        (dst / "commitlog" / f.name).write_bytes(f.read_bytes())
    return dst


def test_zero_filled_preallocated_file_and_truncated_tail(spark, broker_store, message_rows, tmp_path):
    by_offset, _ = message_rows
    store = _copy_store(broker_store.store_dir, tmp_path / "copy")
    files = sorted((store / "commitlog").iterdir())
    last = files[-1]
    size = 256 * 1024
    # The broker pre-allocates the next file: full size, all zeros.
    next_name = f"{int(last.name) + size:020d}"
    (store / "commitlog" / next_name).write_bytes(bytes(size))
    df = spark.read.format("rocketmq").option("split_bytes", "65536").load(str(store))
    assert sorted(r.commitlog_offset for r in df.select("commitlog_offset").collect()) == sorted(by_offset)
    # Cut the last written file inside a record: only the complete records before it remain.
    base = int(last.name)
    in_last = sorted(o for o in by_offset if o >= base)
    victim = in_last[len(in_last) // 2]
    cut = victim - base + 40
    with open(last, "r+b") as f:
        f.truncate(cut)
    (store / "commitlog" / next_name).unlink()
    rows = spark.read.format("rocketmq").load(str(store)).select("commitlog_offset", "size").collect()
    assert sorted(r.commitlog_offset for r in rows) == [o for o in sorted(by_offset) if o < victim]
    # The export job refuses a truncated store with a clear message (before starting Spark).
    from spark_export.job import main

    assert main(["--store", str(store), "--out", str(tmp_path / "out")]) == 2


def test_partial_record_at_live_tail_is_not_read(spark, broker_store, message_rows, tmp_path):
    """A record whose header is written but whose tail is still zero (a writer mid-append) is skipped."""
    by_offset, _ = message_rows
    store = _copy_store(broker_store.store_dir, tmp_path / "live")
    last = sorted((store / "commitlog").iterdir())[-1]
    base = int(last.name)
    final = max(o for o in by_offset if o >= base)
    start = final - base
    with open(last, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        size = int.from_bytes(mm[start:start + 4], "big")
        mm[start + size - 8:start + size] = bytes(8)  # properties tail not yet written
    rows = spark.read.format("rocketmq").load(str(store)).select("commitlog_offset").collect()
    assert sorted(r.commitlog_offset for r in rows) == [o for o in sorted(by_offset) if o < final]
