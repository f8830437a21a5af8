"""Shared fixtures: the real broker (``python -m broker -c <conf>``) as a subprocess, stopped after the test.
The helpers themselves live in tests/support."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.client_helpers import DELAY_LEVELS

_RUN_DIR = pytest.StashKey[Path]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """One directory of this run holds everything the tests write: pytest's tmp_path dirs and, through TMPDIR and
    java.io.tmpdir, the temporary files of the brokers, Spark's JVM (spark-*, blockmgr-*, native libraries), its
    Python workers and numba's cache. A passing run removes it (pytest_sessionfinish); a failed one keeps it."""
    if config.option.basetemp is not None:  # the user's own --basetemp: left as pytest handles it
        return
    run_dir = Path(tempfile.mkdtemp(prefix="pytest-pyrocketmq-"))
    temp = run_dir / "tmp"
    temp.mkdir()
    config.stash[_RUN_DIR] = run_dir
    config.option.basetemp = str(run_dir / "pytest")  # created by pytest on first use
    os.environ["TMPDIR"] = str(temp)  # child processes (brokers, Spark's workers) and this one
    tempfile.tempdir = str(temp)
    java = f"-Djava.io.tmpdir={temp} -XX:-UsePerfData"  # Spark's driver JVM (spark-submit adds SPARK_SUBMIT_OPTS)
    os.environ["SPARK_SUBMIT_OPTS"] = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {java}".strip()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove this run's directory when nothing failed (exit 0, or 5: no tests collected)."""
    run_dir = session.config.stash.get(_RUN_DIR, None)
    if run_dir is not None and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def broker_factory(tmp_path):
    """Start brokers on demand; all are stopped at the end of the test."""
    started: list[BrokerProcess] = []

    def make(name: str = "broker-a", *, start: bool = True, **kwargs) -> BrokerProcess:
        broker = BrokerProcess(tmp_path, name, **kwargs)
        started.append(broker)
        return broker.start() if start else broker

    yield make
    for broker in started:
        broker.stop()


@pytest.fixture
def grpc_broker_factory(broker_factory):
    """`make(**extra)`: a started broker with its gRPC endpoint for 5.x SDKs on a free port (`grpc_port`, and
    `endpoints` as SDKs take it); `extra` are more broker.conf keys."""

    def make(**extra: object) -> BrokerProcess:
        port = free_port()
        broker = broker_factory(extra={"enableGrpcProxy": "true", "grpcServerPort": port, **extra})
        broker.grpc_port = port
        broker.endpoints = f"127.0.0.1:{port}"
        return broker

    return make


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for a whole test module (tests use distinct topics/groups)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("shared"), "broker-shared").start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def retry_broker(tmp_path_factory):
    """One broker per test module with the short DELAY_LEVELS of tests.support.client_helpers, for the client's
    retry and consumption tests."""
    broker = BrokerProcess(tmp_path_factory.mktemp("client-retry"), "broker-retry",
                           extra={"messageDelayLevel": DELAY_LEVELS}).start()
    yield broker
    broker.stop()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()
