"""Fixtures for the Spark exporter tests: one SparkSession and one store written by the real broker."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

_IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

if any(importlib.util.find_spec(m) is None for m in ("pyspark", "pyarrow", "numba")):
    if _IN_CI:  # .ci/run installs the spark extra: a missing one is a broken CI set-up, not a reason to skip
        raise RuntimeError("pyspark/pyarrow/numba missing: .ci/run must pip install -e '.[test,spark]'")
    pytest.skip("pip install -e '.[spark]' for the Spark exporter tests", allow_module_level=True)

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    if _IN_CI:
        raise RuntimeError("no Java runtime: .ci/run must install openjdk-17-jre-headless")
    pytest.skip("no Java runtime for Spark", allow_module_level=True)

from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.spark_scenario import BROKER_EXTRA, BrokerStore, populate  # noqa: E402


@pytest.fixture(scope="session")
def broker_store(tmp_path_factory) -> BrokerStore:
    broker = BrokerProcess(tmp_path_factory.mktemp("spark-store"), "broker-spark", extra=BROKER_EXTRA).start()
    out = BrokerStore(broker.store_dir, broker.addr)
    try:
        asyncio.run(populate(broker, out))
    finally:
        assert broker.stop() == 0, broker.log_text()[-3000:]  # graceful: offsets and files flushed
    return out


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    project = str(Path(__file__).resolve().parent.parent.parent)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if project not in paths:  # Spark's Python workers import spark_export from the checkout
        os.environ["PYTHONPATH"] = os.pathsep.join([project, *paths])
    from pyspark.sql import SparkSession

    from spark_export import register

    session = (SparkSession.builder.master("local[2]").appName("spark-export-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
    _stop_jvm()


def _stop_jvm() -> None:
    """End the driver JVM now (it exits when its stdin closes), so that its shutdown hooks have removed Spark's
    temporary directories before the run's directory is removed (tests/conftest.py)."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None or proc.poll() is not None:
        return
    SparkContext._gateway.shutdown()
    SparkContext._gateway = SparkContext._jvm = None  # a later session starts a new JVM
    proc.stdin.close()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


# ---- network mode (issue 29): real clusters on loopback; see tests/support/spark_cluster.py ---------------------
@pytest.fixture(scope="session")
def net_cluster(tmp_path_factory):
    """Name server + broker-a (master and slave) + broker-b, populated; the slave has caught up."""
    from tests.support.spark_cluster import start_net_cluster

    cluster = start_net_cluster(tmp_path_factory.mktemp("net-cluster"), BrokerProcess)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def net_acl_broker(tmp_path_factory):
    """A broker with plain ACL on (aclEnable=true) and a populated topic only the reader account may read."""
    from tests.support.spark_cluster import start_acl_broker

    acl = start_acl_broker(tmp_path_factory.mktemp("net-acl"), BrokerProcess)
    yield acl
    acl.broker.stop()


@pytest.fixture(scope="session")
def net_retention_broker(tmp_path_factory):
    """A broker whose old commit-log files were deleted: a queue whose minOffset is above 0."""
    from tests.support.spark_cluster import start_retention_broker

    loss = start_retention_broker(tmp_path_factory.mktemp("net-loss"), BrokerProcess)
    yield loss
    loss.broker.stop()
