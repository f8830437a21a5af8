"""config/brokerName.json: the broker's name recorded in its store for offline readers (spark_export)."""

from __future__ import annotations

import json
import logging
import os

from broker.managers.broker_name_file import FILE_NAME, write_broker_name


def test_written_when_missing_and_only_when_different(tmp_path):
    config_dir = tmp_path / "config"
    path = config_dir / FILE_NAME
    assert write_broker_name(str(config_dir), "C1", "broker-a") is True
    assert json.loads(path.read_text()) == {"brokerClusterName": "C1", "brokerName": "broker-a"}
    before = os.stat(path).st_mtime_ns, os.stat(path).st_ino
    assert write_broker_name(str(config_dir), "C1", "broker-a") is False  # a restart does not rewrite it
    assert (os.stat(path).st_mtime_ns, os.stat(path).st_ino) == before
    assert write_broker_name(str(config_dir), "C1", "broker-b") is True  # renamed: rewritten atomically
    assert json.loads(path.read_text())["brokerName"] == "broker-b"
    assert not [n for n in os.listdir(config_dir) if n.endswith(".tmp")]


def test_a_damaged_file_is_replaced(tmp_path):
    path = tmp_path / FILE_NAME
    path.write_text("{not json")
    assert write_broker_name(str(tmp_path), "C1", "broker-a") is True
    assert json.loads(path.read_text()) == {"brokerClusterName": "C1", "brokerName": "broker-a"}


def test_a_write_failure_is_logged_not_raised(tmp_path, caplog):
    blocker = tmp_path / "config"
    blocker.write_text("a file where the config directory should be")
    with caplog.at_level(logging.WARNING, logger="broker.managers.broker_name_file"):
        assert write_broker_name(str(blocker), "C1", "broker-a") is False
    assert "offline readers of this store will not know its brokerName" in caplog.text
