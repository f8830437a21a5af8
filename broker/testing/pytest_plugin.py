"""pytest plugin (entry point ``pytest11``): a real RocketMQ-compatible broker as a fixture.

* ``rocketmq_broker`` — one broker for the whole test session (started at its first use, stopped at the end).
  Tests share it, so give each test its own topic and group names.
* ``rocketmq_broker_function`` — a fresh broker with an empty store for one test (slower: about a second or two
  per test to boot).
* ``rocketmq_broker_conf`` — more broker.conf keys for both; override it (session scope) in a conftest.py::

      @pytest.fixture(scope="session")
      def rocketmq_broker_conf():
          return {"aclEnable": "true"}

Each fixture is a ``broker.testing.RocketMQBroker``: ``namesrv_addr``, ``broker_addr``, ``grpc_endpoint``,
``store_dir``, ``log_text()``. The store lives under pytest's temporary directory (``tmp_path_factory``).
Without the installed entry point, load it with ``-p broker.testing.pytest_plugin``.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from broker.testing import RocketMQBroker


@pytest.fixture(scope="session")
def rocketmq_broker_conf() -> dict[str, Any]:
    """broker.conf keys added to the test brokers' defaults (none); override in a conftest.py."""
    return {}


@pytest.fixture(scope="session")
def rocketmq_broker(tmp_path_factory: pytest.TempPathFactory,
                    rocketmq_broker_conf: dict[str, Any]) -> Iterator[RocketMQBroker]:
    """A broker process shared by the session's tests: name server, remoting and gRPC endpoints on loopback."""
    broker = RocketMQBroker(rocketmq_broker_conf, workdir=tmp_path_factory.mktemp("rocketmq-broker"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def rocketmq_broker_function(tmp_path_factory: pytest.TempPathFactory,
                             rocketmq_broker_conf: dict[str, Any]) -> Iterator[RocketMQBroker]:
    """A broker process of its own for one test, with an empty store."""
    broker = RocketMQBroker(rocketmq_broker_conf, workdir=tmp_path_factory.mktemp("rocketmq-broker-fn"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
