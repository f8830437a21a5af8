"""Streaming from a live broker's store, and the export job on a local-cluster (separate executor JVMs)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path


from tests.support.wire import WireClient, props, send_v2_fields
from protocol.codes import RequestCode as RC, ResponseCode as R
from tests.support.spark_scenario import DEAD, GROUP, MESSAGES, RETRIED

PROJECT = Path(__file__).resolve().parent.parent.parent


async def _send(addr: str, topic: str, first: int, count: int) -> list[str]:
    keys = []
    async with await WireClient.connect(addr) as client:
        for i in range(first, first + count):
            key = f"{0xC0A80003:08X}{i:024X}"
            keys.append(key)
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, i % 2, props(UNIQ_KEY=key, TAGS="S")),
                                        bytes([i % 256]) * 900)
            assert resp.code == R.SUCCESS, resp.remark
    return keys


class _Collector:
    """foreachBatch sink (recoverable from a checkpoint, unlike the memory sink) collecting uniq keys."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def __call__(self, df, batch_id: int) -> None:
        self.keys.extend(r.uniq_key for r in df.select("uniq_key").collect())


def _wait_keys(collector: _Collector, count: int, query, timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(collector.keys) < count:
        if query.exception() is not None:
            raise AssertionError(f"stream failed: {query.exception()}")
        assert time.monotonic() < deadline, f"{len(collector.keys)}/{count} rows streamed"
        time.sleep(0.2)
    return list(collector.keys)


def test_stream_follows_the_live_broker(spark, broker_factory, tmp_path):
    # Small commit-log files: the stream crosses BLANK end-of-file markers and new files.
    broker = broker_factory("broker-stream", extra={"mappedFileSizeCommitLog": 64 * 1024})
    before = asyncio.run(_send(broker.addr, "StreamTopic", 0, 40))
    checkpoint = str(tmp_path / "checkpoint")
    stream = (spark.readStream.format("rocketmq").option("topics", "StreamTopic")
              .load(str(broker.store_dir)))
    first = _Collector()
    query = (stream.writeStream.foreachBatch(first).option("checkpointLocation", checkpoint)
             .trigger(processingTime="300 milliseconds").start())
    try:
        _wait_keys(first, 40, query)
        after = asyncio.run(_send(broker.addr, "StreamTopic", 40, 120))  # sent after the query started
        keys = _wait_keys(first, 160, query)
        # foreachBatch ran for the last batch, but its commit may not be written yet; stopping before it is
        # would let the restart below replay that batch (at-least-once), so wait for the commit
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(keys) == sorted(before + after) and len(keys) == len(set(keys))
    assert len(list((broker.store_dir / "commitlog").iterdir())) >= 3

    # Restart from the checkpoint with Trigger.AvailableNow: only what arrived meanwhile is read.
    later = asyncio.run(_send(broker.addr, "StreamTopic", 160, 25))
    second = _Collector()
    query = (stream.writeStream.foreachBatch(second).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    assert query.awaitTermination(60), "availableNow query did not finish"
    assert query.exception() is None
    assert sorted(second.keys) == sorted(later)


def _spark_submit() -> str:
    import pyspark

    candidate = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    return str(candidate) if candidate.exists() else "spark-submit"


def test_export_job_on_local_cluster(spark, broker_store, tmp_path):
    """spark-submit --master local-cluster[2,1,1024] --py-files spark_export.zip spark_export/job.py ..."""
    from spark_export.job import package_zip

    zip_path = package_zip(str(tmp_path / "dist"))
    out = tmp_path / "export"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    cmd = [_spark_submit(), "--master", "local-cluster[2,1,1024]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.ui.showConsoleProgress=false", "--py-files", zip_path,
           str(PROJECT / "spark_export" / "job.py"),
           "--store", str(broker_store.store_dir), "--out", str(out), "--format", "json"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert f"Retry messages: {RETRIED}   DLQ messages: {DEAD}" in proc.stdout
    assert "sparkGroup" in proc.stdout and "SparkOrders" in proc.stdout
    exported = spark.read.json(str(out / "messages"))
    assert exported.count() == MESSAGES + 10 + 2 * RETRIED + DEAD
    offsets = {(r.topic, r.group, r.queue_id): r.offset for r in spark.read.json(str(out / "offsets")).collect()}
    assert offsets == broker_store.consumer_offsets


def test_job_reports_missing_java(tmp_path, broker_store):
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYTHONPATH")}
    empty = tmp_path / "bin"
    empty.mkdir()
    env["PATH"] = str(empty)  # the interpreter is run by its full path; nothing else may be found
    proc = subprocess.run([sys.executable, "-m", "spark_export", "--store", str(broker_store.store_dir),
                           "--out", str(tmp_path / "o")], cwd=PROJECT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "no Java runtime found" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "spark_export", "--store", str(tmp_path), "--out", str(tmp_path)],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a RocketMQ store" in proc.stderr, proc.stderr


def test_group_lag_in_summary(broker_store, spark, tmp_path):
    from spark_export.job import export

    summary = export(spark, str(broker_store.store_dir), str(tmp_path / "parquet"), "parquet")
    lag = {(g, t, q): (mx, off, l) for g, t, q, mx, off, l in summary["lag"]}
    for (topic, group, queue_id), offset in broker_store.consumer_offsets.items():
        max_offset = broker_store.max_offsets[(topic, queue_id)]
        assert lag[(group, topic, queue_id)] == (max_offset, offset, max(max_offset - offset, 0))
    assert summary["retry_messages"] == RETRIED and summary["dlq_messages"] == DEAD
    assert summary["rows"]["messages"] == MESSAGES + 10 + 2 * RETRIED + DEAD
    assert GROUP in {g for g, _, _ in lag}
