"""One `rocketmq` read over a whole cluster's stores: the `broker` column, replicas read once, and the brokerName
of a store directory (brokerIdentity, config/brokerName.json written by the broker, the directory's name).

The cluster is real: broker-a (a master), a slave of broker-a replicating over HA, and broker-b; the slave is
stopped before broker-a's last messages, so the master's commit log reaches further."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient, props, send_v2_fields
from protocol.codes import RequestCode as RC, ResponseCode as R

TOPIC = "ClusterTopic"
GROUP = "clusterGroup"
FILE_SIZE = 64 * 1024  # several commit-log files per store
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


@dataclass
class Cluster:
    master: Path
    slave: Path
    other: Path
    keys: dict[str, set[str]] = field(default_factory=dict)  # brokerName -> UNIQ_KEYs sent to it
    early_keys: set[str] = field(default_factory=set)  # broker-a's messages the slave has too
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (broker, topic, queue) -> committed


async def _send(addr: str, prefix: str, count: int) -> set[str]:
    keys = set()
    async with await WireClient.connect(addr) as client:
        for i in range(count):
            key = f"{prefix}-{i:05d}"
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(TOPIC, i % 2, props(UNIQ_KEY=key)),
                                        key.encode() * 40)
            assert resp.code == R.SUCCESS, resp.remark
            keys.add(key)
    return keys


async def _commit(addr: str, queue_id: int, offset: int) -> None:
    async with await WireClient.connect(addr) as client:
        resp = await client.request(RC.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id), "commitOffset": str(offset)})
        assert resp.code == R.SUCCESS, resp.remark


def _log_bytes(store: Path) -> bytes:
    return b"".join(f.read_bytes() for f in sorted((store / "commitlog").iterdir()))


def _wait_replicated(master: BrokerProcess, slave: BrokerProcess, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _log_bytes(master.store_dir).rstrip(b"\0") != _log_bytes(slave.store_dir).rstrip(b"\0"):
        assert time.monotonic() < deadline, "the slave did not catch up:\n" + slave.log_text()[-3000:]
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    root = tmp_path_factory.mktemp("cluster")
    for name in ("a", "a-slave", "b"):
        (root / name).mkdir()
    common = {"mappedFileSizeCommitLog": FILE_SIZE, "brokerClusterName": "SparkCluster"}
    master = BrokerProcess(root / "a", "broker-a", extra=common)
    slave = BrokerProcess(root / "a-slave", "broker-a", embedded_namesrv=False, namesrv_addr=master.namesrv_addr,
                          extra={**common, "brokerRole": "SLAVE", "brokerId": 1,
                                 "haMasterAddress": f"127.0.0.1:{master.port + 1}"})
    other = BrokerProcess(root / "b", "broker-b", extra=common)
    out = Cluster(master.store_dir, slave.store_dir, other.store_dir)
    started = []
    try:
        for broker in (master, slave, other):
            started.append(broker.start())
        early = asyncio.run(_send(master.addr, "A", 300))
        out.keys["broker-b"] = asyncio.run(_send(other.addr, "B", 200))
        _wait_replicated(master, slave)
        assert slave.stop() == 0, slave.log_text()[-3000:]
        late = asyncio.run(_send(master.addr, "A-late", 60))  # only the master has these
        out.keys["broker-a"], out.early_keys = early | late, early
        asyncio.run(_commit(master.addr, 0, 120))
        asyncio.run(_commit(other.addr, 1, 33))
        out.offsets = {("broker-a", TOPIC, 0): 120, ("broker-b", TOPIC, 1): 33}
    finally:
        for broker in started:
            assert broker.stop() in (0, None), broker.log_text()[-3000:]
    return out


def _load(spark, paths, **options):
    reader = spark.read.format("rocketmq")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load([str(p) for p in paths] if isinstance(paths, list) else str(paths))


def _keys_by_broker(df) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for row in df.where(F.col("topic") == TOPIC).select("broker", "uniq_key").collect():
        out.setdefault(row.broker, []).append(row.uniq_key)
    return out


def test_the_broker_writes_its_name_into_the_store(cluster):
    for store, name in ((cluster.master, "broker-a"), (cluster.slave, "broker-a"), (cluster.other, "broker-b")):
        doc = json.loads((store / "config" / "brokerName.json").read_text())
        assert doc == {"brokerClusterName": "SparkCluster", "brokerName": name}
    # the slave holds a byte-identical copy of the master's log, up to where it stopped
    slave_log = _log_bytes(cluster.slave).rstrip(b"\0")
    assert slave_log and _log_bytes(cluster.master).startswith(slave_log)


def test_one_read_over_the_cluster_gives_every_message_once(spark, cluster):
    want = {name: sorted(keys) for name, keys in cluster.keys.items()}
    # the slave first: the master is still chosen, its commit log reaching further
    got = _keys_by_broker(_load(spark, [cluster.slave, cluster.master, cluster.other]))
    assert {name: sorted(keys) for name, keys in got.items()} == want
    comma = _keys_by_broker(_load(spark, f"{cluster.other},{cluster.slave} , {cluster.master}"))
    assert {name: sorted(keys) for name, keys in comma.items()} == want
    # the slave alone: what it replicated, under the master's brokerName
    alone = _keys_by_broker(_load(spark, [cluster.slave]))
    assert list(alone) == ["broker-a"] and sorted(alone["broker-a"]) == sorted(cluster.early_keys)
    # the other columns are read per store: offsets are the store's own
    rows = _load(spark, [cluster.master, cluster.other], columns="broker,topic,commitlog_offset,uniq_key").where(
        F.col("topic") == TOPIC).collect()
    assert len({(r.broker, r.commitlog_offset) for r in rows}) == len(rows) == 560
    assert {r.commitlog_offset for r in rows if r.uniq_key == "A-00000"} == {0}
    assert {r.commitlog_offset for r in rows if r.uniq_key == "B-00000"} == {0}


def test_the_other_tables_over_the_cluster(spark, cluster):
    paths = [cluster.master, cluster.slave, cluster.other]
    cq = _load(spark, paths, table="consume_queue").where(F.col("topic") == TOPIC)
    assert {r.broker: r["count"] for r in cq.groupBy("broker").count().collect()} == {"broker-a": 360,
                                                                                      "broker-b": 200}
    offsets = _load(spark, paths, table="offsets").where(F.col("group") == GROUP).collect()
    assert {(r.broker, r.topic, r.queue_id): r.offset for r in offsets} == cluster.offsets
    topics = _load(spark, paths, table="topics").where(F.col("topic") == TOPIC).collect()
    assert sorted(r.broker for r in topics) == ["broker-a", "broker-b"]


def test_pushed_filters_over_several_stores(spark, cluster):
    paths = [cluster.slave, cluster.master, cluster.other]
    for where in (f"topic = '{TOPIC}' AND queue_id = 1", "uniq_key IN ('A-late-00007', 'B-00011')",
                  f"topic = '{TOPIC}' AND broker = 'broker-b'"):
        found = []
        for pushdown in ("true", "false"):
            spark.conf.set(PUSHDOWN, pushdown)
            try:
                df = _load(spark, paths, columns="broker,topic,queue_id,commitlog_offset,uniq_key").where(where)
                found.append(sorted(tuple(r) for r in df.collect()))
            finally:
                spark.conf.set(PUSHDOWN, "false")
        assert found[0] == found[1] and found[0], where
    assert {(r[0], r[4]) for r in found[0]} == {("broker-b", k) for k in cluster.keys["broker-b"]}


def _bare_copy(src: Path, dst: Path) -> Path:
    """The store's commit log only (no config/, so no brokerName.json)."""
    shutil.copytree(src / "commitlog", dst / "commitlog")
    return dst


def test_broker_name_from_identity_file_name_file_and_directory(spark, cluster, tmp_path):
    from spark_export.brokers import broker_name_of

    fallback = _bare_copy(cluster.other, tmp_path / "host7" / "store")  # named "store": its parent names it
    named = _bare_copy(cluster.other, tmp_path / "b-copy")
    identity = tmp_path / "ctl"
    shutil.copytree(cluster.other, identity, ignore=shutil.ignore_patterns("lock"))
    (identity / "brokerIdentity").write_text("SparkCluster#broker-ctl#2")  # wins over config/brokerName.json
    assert broker_name_of(str(cluster.other))[0] == "broker-b"
    assert broker_name_of(str(fallback)) == ("host7", "the directory's name")
    assert broker_name_of(str(named))[0] == "b-copy"
    assert broker_name_of(str(identity))[0] == "broker-ctl"
    want = sorted(cluster.keys["broker-b"])
    got = _keys_by_broker(_load(spark, [fallback, identity]))  # the brokerName decides: two brokers here
    assert sorted(got) == ["broker-ctl", "host7"] and all(sorted(k) == want for k in got.values())
    got = _keys_by_broker(_load(spark, [fallback, named], brokerNames="x,"))
    assert sorted(got) == ["b-copy", "x"] and all(sorted(k) == want for k in got.values())
    got = _keys_by_broker(_load(spark, [fallback, named, identity], brokerNames="b,b,"))  # copies of one log
    assert sorted(got) == ["b", "broker-ctl"] and all(sorted(k) == want for k in got.values())
    assert list(_keys_by_broker(_load(spark, fallback))) == ["host7"]
    assert list(_keys_by_broker(_load(spark, identity, brokerName="given"))) == ["given"]


def test_a_replica_is_logged_as_skipped(cluster, caplog):
    from spark_export.brokers import resolve_stores

    with caplog.at_level(logging.WARNING, logger="spark_export.brokers"):
        chosen = resolve_stores((str(cluster.slave), str(cluster.master), str(cluster.other)))
    assert [(Path(s.root), s.broker) for s in chosen] == [(cluster.master, "broker-a"), (cluster.other, "broker-b")]
    assert f"{cluster.slave} is a replica of broker 'broker-a'; reading {cluster.master}" in caplog.text


def _error(spark, paths, **options) -> str:
    with pytest.raises(Exception) as info:
        _load(spark, paths, **options).count()
    return str(info.value)


def test_bad_combinations_fail_clearly(spark, cluster, tmp_path):
    two = [cluster.master, cluster.other]
    assert "brokerName names the broker of one store directory; 2 were given" in _error(spark, two, brokerName="x")
    assert "brokerNames has 1 name(s) for 2 store directories" in _error(spark, two, brokerNames="x")
    assert "either brokerName" in _error(spark, cluster.master, brokerName="x", brokerNames="y")
    assert "commitlog_dir is for a single store directory" in _error(spark, two, commitlog_dir=str(tmp_path))
    assert "their commit logs differ" in _error(spark, two, brokerNames="same,same")
    assert "not a RocketMQ store" in _error(spark, [cluster.master, tmp_path])
    with pytest.raises(Exception, match="option paths must be a JSON array"):
        spark.read.format("rocketmq").option("paths", "/a/store").load().count()
    (tmp_path / "bad" / "commitlog").mkdir(parents=True)
    (tmp_path / "bad" / "brokerIdentity").write_text("not an identity")
    assert "expected clusterName#brokerName#brokerId" in _error(spark, tmp_path / "bad")
    stream = spark.readStream.format("rocketmq").load(f"{cluster.master},{cluster.other}")
    with pytest.raises(Exception, match="streaming reads one store directory; 2 were given"):
        query = stream.writeStream.format("noop").trigger(availableNow=True).start()
        try:
            query.awaitTermination(60)
        finally:
            query.stop()
