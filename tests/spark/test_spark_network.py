"""The `rocketmq` format in network mode (issue 29) against real broker processes and a real SparkSession.

The cluster (tests/support/spark_cluster.py NetCluster): a standalone name server, broker-a (master + slave, slaveReadEnable) and
broker-b (master), every topic with 4 queues on both. What was sent is recorded as the broker stored it, so each
read is compared with exact rows: (topic, broker, queue_id, queue_offset, body) as a multiset.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import Counter
from typing import Any

import pytest
from tests.support.spark_cluster import (
    ACL_READER, ACL_TOPIC, BATCH_TOPICS, GROUPS, KILL_TOPIC, LOSS_TOPIC, QUEUES, STREAM_TOPIC, Sent, free_port,
    multiset, route,
)
from tests.support.wire import WireClient

from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R

KEY_COLUMNS = ("topic", "broker", "queue_id", "queue_offset", "body")


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return json.dumps(v)
    return str(v)


def read(spark, name_server: str, **options: Any):
    """spark.read in network mode; dict options become JSON, booleans 'true'/'false'."""
    reader = spark.read.format("rocketmq").option("nameServer", name_server)
    for key, value in options.items():
        reader = reader.option(key, _value(value))
    return reader.load()


def rows_of(df, *extra: str) -> list:
    return df.select(*KEY_COLUMNS, *extra).collect()


def reason(exc: BaseException) -> str:
    """The one-line reason the spec asks for: the first line of the error text containing 'rocketmq:'."""
    text = str(exc)
    # the exception's own line ("pkg.SomeError: rocketmq: ..."), not a source line quoted by the traceback
    found = re.search(r"^[\w.]+: (rocketmq: .*)$", text, re.MULTILINE)
    if found is None:
        raise AssertionError(f"no 'SomeError: rocketmq: ...' line in the error:\n{text[-3000:]}")
    return found.group(1)


def in_range(sent: list[Sent], start: dict[tuple[str, int], int], end: dict[tuple[str, int], int]) -> list[Sent]:
    """The records of [start, end) per (broker, queue)."""
    return [s for s in sent if start[(s.broker, s.queue_id)] <= s.queue_offset < end[(s.broker, s.queue_id)]]


# ---- the cluster itself -------------------------------------------------------------------------------------------
def test_the_cluster_has_two_groups_a_slave_and_the_recorded_messages(net_cluster):
    for topic in (*BATCH_TOPICS, STREAM_TOPIC, KILL_TOPIC):
        data = asyncio.run(route(net_cluster.name_server, topic))
        assert {q.broker_name: q.read_queue_nums for q in data.queue_datas} == {b: QUEUES for b in GROUPS}
        addrs = {b.broker_name: b.broker_addrs for b in data.broker_datas}
        assert addrs["broker-a"] == {0: net_cluster.master_a.addr, 1: net_cluster.slave_a.addr}
        assert addrs["broker-b"] == {0: net_cluster.master_b.addr}
    for topic in BATCH_TOPICS:  # every queue non-empty, no two queues the same length, offsets dense from 0
        ends = net_cluster.max_offsets(topic)
        assert all(ends.values()) and len(set(ends.values())) == len(ends)
        for (broker, q), end in ends.items():
            got = sorted(s.queue_offset for s in net_cluster.of(topic) if (s.broker, s.queue_id) == (broker, q))
            assert got == list(range(end))
    assert len(multiset(net_cluster.sent)) == len(net_cluster.sent)


# ---- batch reads ----------------------------------------------------------------------------------------------------
def test_a_batch_read_of_the_cluster_is_exactly_what_was_sent(spark, net_cluster):
    df = read(spark, net_cluster.name_server, topic=",".join(BATCH_TOPICS))
    assert df.columns[:3] == ["topic", "broker", "queue_id"]
    assert not df.schema["broker"].nullable
    assert df.rdd.getNumPartitions() == len(GROUPS)  # small ranges: one task per brokerName reads them all
    rows = rows_of(df, "commitlog_offset", "tags", "keys", "store_timestamp")
    sent = net_cluster.of(*BATCH_TOPICS)
    assert multiset(rows) == multiset(sent)  # nothing missing, nothing twice (the slave's copy is not read too)
    by_key = {s.key: s for s in sent}
    for row in rows:
        s = by_key[(row.topic, row.broker, row.queue_id, row.queue_offset, bytes(row.body))]
        assert (row.commitlog_offset, row.tags, row.keys) == (s.commitlog_offset, s.tags, s.keys)
        assert int(row.store_timestamp.timestamp() * 1000) == s.store_ms
    # commitlog_offset is per broker: both brokers' logs start at 0, so offsets repeat across brokers only
    per_broker = Counter((r.broker, r.commitlog_offset) for r in rows)
    assert max(per_broker.values()) == 1
    unpacked = read(spark, net_cluster.name_server, topic=",".join(BATCH_TOPICS), minOffsetsPerPartition=1)
    assert unpacked.rdd.getNumPartitions() == len(BATCH_TOPICS) * len(GROUPS) * QUEUES  # one per non-empty queue
    assert multiset(rows_of(unpacked)) == multiset(sent)


def test_the_topic_option_selects_topics(spark, net_cluster):
    one = rows_of(read(spark, net_cluster.name_server, topic="NetOrders"))
    assert multiset(one) == multiset(net_cluster.of("NetOrders"))
    two = rows_of(read(spark, net_cluster.name_server, topics="NetEvents,NetAudit"))  # the alias
    assert multiset(two) == multiset(net_cluster.of("NetEvents", "NetAudit"))


def test_the_columns_option_and_the_broker_column(spark, net_cluster):
    df = read(spark, net_cluster.name_server, topic="NetAudit", columns="broker,queue_offset,topic")
    assert df.columns == ["broker", "queue_offset", "topic"]
    got = Counter((r.topic, r.broker, r.queue_offset) for r in df.collect())
    assert got == Counter((s.topic, s.broker, s.queue_offset) for s in net_cluster.of("NetAudit"))


def test_starting_and_ending_offsets_given_as_json(spark, net_cluster):
    ends = net_cluster.max_offsets("NetOrders")
    starting = {"NetOrders": {"broker-a": {"0": 3, "1": -2, "2": -1}, "broker-b": {"1": 5}}}
    ending = {"NetOrders": {"broker-a": {"0": 8, "3": 4}, "broker-b": {"1": -1, "2": 6}}}
    start = {k: 0 for k in ends}  # queues not listed: earliest (batch)
    start.update({("broker-a", 0): 3, ("broker-a", 2): ends[("broker-a", 2)], ("broker-b", 1): 5})
    end = dict(ends)  # queues not listed: latest
    end.update({("broker-a", 0): 8, ("broker-a", 3): 4, ("broker-b", 2): 6})
    df = read(spark, net_cluster.name_server, topic="NetOrders", startingOffsets=starting, endingOffsets=ending,
              minOffsetsPerPartition=1)
    expected = in_range(net_cluster.of("NetOrders"), start, end)
    assert multiset(rows_of(df)) == multiset(expected)
    assert df.rdd.getNumPartitions() == len(GROUPS) * QUEUES - 1  # broker-a queue 2 is empty: [latest, latest)

    latest = read(spark, net_cluster.name_server, topic="NetOrders", startingOffsets="latest")
    assert latest.count() == 0


def test_ending_offsets_cannot_be_earliest(spark, net_cluster):
    with pytest.raises(Exception) as err:
        read(spark, net_cluster.name_server, topic="NetOrders",
             endingOffsets={"NetOrders": {"broker-a": {"0": -2}}}).collect()
    assert "endingOffsets" in reason(err.value)


def test_starting_timestamp_picks_the_first_offset_stored_at_or_after_it(spark, net_cluster):
    sent = net_cluster.of(*BATCH_TOPICS)
    ts = net_cluster.boundary_ms
    first: dict[tuple[str, str, int], int] = {}
    for s in sorted(sent, key=lambda s: s.queue_offset):
        if s.store_ms >= ts:
            first.setdefault((s.topic, s.broker, s.queue_id), s.queue_offset)
    expected = [s for s in sent if s.queue_offset >= first[(s.topic, s.broker, s.queue_id)]]
    assert 0 < len(expected) < len(sent)
    # the timestamp wins over startingOffsets
    df = read(spark, net_cluster.name_server, topic=",".join(BATCH_TOPICS), startingTimestamp=ts,
              startingOffsets={"NetOrders": {"broker-a": {"0": -1}, "broker-b": {"3": 0}}})
    assert multiset(rows_of(df)) == multiset(expected)
    after_all = max(s.store_ms for s in sent) + 60_000
    assert read(spark, net_cluster.name_server, topic="NetEvents", startingTimestamp=after_all).count() == 0


def test_sub_expression_keeps_the_tagged_messages(spark, net_cluster):
    df = read(spark, net_cluster.name_server, topic=",".join(BATCH_TOPICS), subExpression="TagA || TagB")
    rows = rows_of(df, "tags")
    expected = [s for s in net_cluster.of(*BATCH_TOPICS) if s.tags in ("TagA", "TagB")]
    assert multiset(rows) == multiset(expected)
    assert {r.tags for r in rows} == {"TagA", "TagB"}


def test_min_partitions_splits_ranges_without_changing_rows(spark, net_cluster):
    topics = ",".join(BATCH_TOPICS)
    base = len(BATCH_TOPICS) * len(GROUPS) * QUEUES
    df = read(spark, net_cluster.name_server, topic=topics, minPartitions=60)
    parts = df.rdd.getNumPartitions()
    assert base < parts <= 60 + base, parts  # about minPartitions (Kafka's hint: rounding per range)
    assert parts >= 48, parts
    assert multiset(rows_of(df)) == multiset(net_cluster.of(*BATCH_TOPICS))
    few = read(spark, net_cluster.name_server, topic=topics, minPartitions=3)  # fewer than queues: no effect
    assert few.rdd.getNumPartitions() == base


def test_small_pulls_read_the_same_rows(spark, net_cluster):
    df = read(spark, net_cluster.name_server, topic="NetEvents", pullBatchSize=3)
    assert multiset(rows_of(df)) == multiset(net_cluster.of("NetEvents"))


# ---- data loss --------------------------------------------------------------------------------------------------------
def test_a_start_beyond_the_brokers_max_offset_is_data_loss(spark, net_cluster):
    ends = net_cluster.max_offsets("NetAudit")
    beyond = ends[("broker-b", 2)] + 50
    starting = {"NetAudit": {"broker-b": {"2": beyond}}}
    with pytest.raises(Exception) as err:
        read(spark, net_cluster.name_server, topic="NetAudit", startingOffsets=starting).collect()
    why = reason(err.value)
    assert "NetAudit" in why and "broker-b" in why and str(beyond) in why, why
    skipped = read(spark, net_cluster.name_server, topic="NetAudit", startingOffsets=starting, failOnDataLoss=False)
    expected = [s for s in net_cluster.of("NetAudit") if (s.broker, s.queue_id) != ("broker-b", 2)]
    assert multiset(rows_of(skipped)) == multiset(expected)


def test_a_range_removed_by_retention_is_data_loss(spark, net_retention_broker):
    loss = net_retention_broker
    ns = loss.name_server
    starting = {LOSS_TOPIC: {"broker-loss": {"0": 0}}}
    with pytest.raises(Exception) as err:
        read(spark, ns, topic=LOSS_TOPIC, startingOffsets=starting).collect()
    why = reason(err.value)
    assert LOSS_TOPIC in why and "broker-loss" in why and str(loss.min_offset) in why, why

    def offsets(df) -> list[int]:
        rows = df.select("queue_offset", "body").collect()
        assert all(bytes(r.body).startswith(f"loss-{r.queue_offset}|".encode()) for r in rows)
        return sorted(r.queue_offset for r in rows)
    kept = list(range(loss.min_offset, loss.max_offset))
    assert offsets(read(spark, ns, topic=LOSS_TOPIC, startingOffsets=starting, failOnDataLoss=False)) == kept
    assert offsets(read(spark, ns, topic=LOSS_TOPIC)) == kept  # earliest = the broker's minOffset: no loss


# ---- errors ---------------------------------------------------------------------------------------------------------
def test_a_name_server_nobody_listens_on_is_one_clear_line(spark):
    dead = f"127.0.0.1:{free_port()}"  # free a moment ago: nothing listens there
    started = time.monotonic()
    with pytest.raises(Exception) as err:
        read(spark, dead, topic="NetOrders", pullTimeoutMs=3000).collect()
    why = reason(err.value)
    assert dead in why and re.search(r"(?i)name ?server", why), why
    assert time.monotonic() - started < 60


def test_an_unknown_topic_is_one_clear_line(spark, net_cluster):
    with pytest.raises(Exception) as err:
        read(spark, net_cluster.name_server, topic="NoSuchNetTopic").collect()
    why = reason(err.value)
    assert "NoSuchNetTopic" in why, why


# ---- ACL -------------------------------------------------------------------------------------------------------------
def test_an_acl_broker_is_read_with_credentials_and_refused_without(spark, net_acl_broker):
    acl = net_acl_broker
    df = read(spark, acl.name_server, topic=ACL_TOPIC, accessKey=ACL_READER[0], secretKey=ACL_READER[1])
    assert multiset(rows_of(df)) == multiset(acl.sent)
    with pytest.raises(Exception) as err:
        read(spark, acl.name_server, topic=ACL_TOPIC).collect()
    why = reason(err.value)
    assert re.search(r"(?i)accessKey|acl|refused|permission", why), why
    with pytest.raises(Exception) as err:
        read(spark, acl.name_server, topic=ACL_TOPIC, accessKey=ACL_READER[0], secretKey="not-the-secret").collect()
    why = reason(err.value)
    assert re.search(r"(?i)signature|refused|acl", why), why


# ---- streaming --------------------------------------------------------------------------------------------------------
def stream(spark, name_server: str, **options: Any):
    reader = spark.readStream.format("rocketmq").option("nameServer", name_server)
    for key, value in options.items():
        reader = reader.option(key, _value(value))
    return reader.load()


def finished(query, timeout: float = 120.0) -> list:
    """Wait for an availableNow query; its progress reports of batches that read rows."""
    try:
        assert query.awaitTermination(timeout), "the availableNow query did not finish"
        assert query.exception() is None, query.exception()
        return [p for p in query.recentProgress if p.numInputRows > 0]
    finally:
        query.stop()


def test_a_stream_stopped_fed_and_restarted_reads_every_message_once(spark, net_cluster, tmp_path):
    ns, sink, checkpoint = net_cluster.name_server, str(tmp_path / "sink"), str(tmp_path / "checkpoint")

    def start(trigger: dict, **options: Any):
        df = stream(spark, ns, topic=STREAM_TOPIC, **options).select(*KEY_COLUMNS)
        return (df.writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint)
                .trigger(**trigger).start())

    def in_sink() -> list:
        return spark.read.parquet(sink).collect()  # only files of committed batches (the sink's log)

    initial = net_cluster.of(STREAM_TOPIC)
    batches = finished(start({"availableNow": True}, startingOffsets="earliest", maxOffsetsPerTrigger=50))
    assert sum(p.numInputRows for p in batches) == len(initial) == 160
    assert len(batches) >= 4 and all(p.numInputRows <= 50 for p in batches), [p.numInputRows for p in batches]
    assert multiset(in_sink()) == multiset(initial)

    fed = asyncio.run(net_cluster.send(STREAM_TOPIC, 10, seed=11))  # sent while no query runs
    query = start({"processingTime": "300 milliseconds"}, startingOffsets="earliest")  # the checkpoint wins
    try:
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    assert multiset(in_sink()) == multiset(initial + fed)

    later = asyncio.run(net_cluster.send(STREAM_TOPIC, 5, seed=12))
    batches = finished(start({"availableNow": True}, maxOffsetsPerTrigger=1000))
    assert sum(p.numInputRows for p in batches) == len(later)
    assert multiset(in_sink()) == multiset(initial + fed + later)  # every message exactly once

    # a new query (another checkpoint) starts at the latest offsets by default: nothing to read
    fresh = (stream(spark, ns, topic=STREAM_TOPIC).select(*KEY_COLUMNS).writeStream.format("parquet")
             .option("path", str(tmp_path / "fresh")).option("checkpointLocation", str(tmp_path / "fresh-cp"))
             .trigger(availableNow=True).start())
    assert finished(fresh) == []


def test_stream_offsets_in_the_checkpoint_name_topic_broker_and_queue(spark, net_cluster, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    query = (stream(spark, net_cluster.name_server, topic="NetAudit", startingOffsets="earliest")
             .select(*KEY_COLUMNS).writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    batches = finished(query)
    last = max((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    offsets = json.loads(last.read_text().splitlines()[-1])
    ends = net_cluster.max_offsets("NetAudit")
    assert offsets == {"NetAudit": {b: {str(q): ends[(b, q)] for q in range(QUEUES)} for b in GROUPS}}
    assert len(batches) == 1 and json.loads(batches[0].sources[0].latestOffset) == offsets  # the brokers' ends


def test_reads_commit_nothing_to_the_brokers(net_cluster):
    """Offsets live in Spark's checkpoint only: the source's consumer group has no offset on any queue read above."""
    async def committed() -> dict:
        found = {}
        for broker, master in net_cluster.masters.items():
            async with await WireClient.connect(master.addr) as client:
                for topic in (*BATCH_TOPICS, STREAM_TOPIC):
                    for q in range(QUEUES):
                        resp = await client.request(RC.QUERY_CONSUMER_OFFSET, {
                            "consumerGroup": "spark-rocketmq-source", "topic": topic, "queueId": str(q),
                            "setZeroIfNotFound": "false"})
                        if resp.code != R.QUERY_NOT_FOUND:
                            found[(topic, broker, q)] = (resp.code, resp.ext_fields.get("offset"))
        return found
    assert asyncio.run(committed()) == {}


# ---- a master killed mid-read (these run last: they kill and restart broker-a's master) ----------------------------
def test_a_master_killed_mid_batch_read_is_read_from_the_slave(spark, net_cluster):
    tracker = spark.sparkContext.statusTracker()
    at_kill: dict[str, int] = {}
    done = threading.Event()

    def kill_once_reading() -> None:  # planning is over once a task runs: partitions carry the master's address
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None and info.numActiveTasks > 0:
                    net_cluster.kill_master_a()
                    info = tracker.getStageInfo(stage_id)
                    at_kill.update(total=info.numTasks, completed=info.numCompletedTasks, active=info.numActiveTasks)
                    return
            time.sleep(0.005)

    killer = threading.Thread(target=kill_once_reading, daemon=True)
    killer.start()
    try:
        rows = rows_of(read(spark, net_cluster.name_server, topic=KILL_TOPIC, minPartitions=48, pullBatchSize=4))
    finally:
        done.set()
        killer.join(10)
        net_cluster.restart_master_a()
    assert at_kill, "the master was not killed while the read ran"
    assert at_kill["completed"] + at_kill["active"] < at_kill["total"], at_kill  # tasks started after the kill
    assert multiset(rows) == multiset(net_cluster.of(KILL_TOPIC))


def test_a_master_killed_during_a_stream_is_read_from_the_slave(spark, net_cluster, tmp_path):
    got: list = []

    def collect(df, batch_id: int) -> None:
        got.extend(df.select(*KEY_COLUMNS).collect())
        if batch_id == 0:
            net_cluster.kill_master_a()  # the next batches are planned and read without it

    query = (stream(spark, net_cluster.name_server, topic=KILL_TOPIC, startingOffsets="earliest",
                    maxOffsetsPerTrigger=300)
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    try:
        batches = finished(query, timeout=180)
    finally:
        net_cluster.restart_master_a()
    assert len(batches) >= 4
    assert multiset(got) == multiset(net_cluster.of(KILL_TOPIC))
