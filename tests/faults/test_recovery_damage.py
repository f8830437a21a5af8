"""Issue 11: damaged commit-log records are reported and never served, and never cost the records after them
(before: one flipped byte in the oldest file made a kill -9 restart delete every newer file)."""

from __future__ import annotations

import asyncio
import os
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker_process import free_port

from tests.support.recovery import BODY_HEAD, commit_log_file, expected, fill, flip_byte, pull_all

MB = 1024 * 1024


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if not s.labels}


async def test_bad_crc_in_one_of_the_last_records_after_a_clean_stop_is_not_served(broker_factory):
    broker = broker_factory("crc")
    placed = await fill(broker.addr, "CrcTopic", 0, 400)
    assert broker.stop() == 0
    victim_offset, victim_phys = placed[396]
    path, pos = commit_log_file(broker, victim_phys, 4 * MB)
    flip_byte(path, pos + BODY_HEAD + 20)
    broker.start()
    assert await pull_all(broker.addr, "CrcTopic", 0) == expected("CrcTopic", 0, 400, skip={396})
    log = broker.log_text()
    assert "commit log damaged" in log and "body CRC mismatch" in log and "CrcTopic/0@396" in log
    again = await fill(broker.addr, "CrcTopic", 0, 1, start=400)
    assert again[0][0] == 400  # the damaged record's offset is not handed out again


@pytest.mark.slow
async def test_flipped_byte_in_the_oldest_file_keeps_newer_files_after_kill_9(broker_factory):
    metrics_port = free_port()
    broker = broker_factory("oldest", extra={"mappedFileSizeCommitLog": MB, "metricsPort": metrics_port})
    count = 6000
    placed = await fill(broker.addr, "OldTopic", 0, count, size=600, batch=100)
    broker.kill()
    files = sorted(os.listdir(broker.store_dir / "commitlog"))
    assert len(files) >= 4
    victim_offset, victim_phys = placed[25]
    path, pos = commit_log_file(broker, victim_phys, MB)
    assert path.endswith(files[0])
    flip_byte(path, pos + BODY_HEAD + 100)
    broker.start()
    assert sorted(os.listdir(broker.store_dir / "commitlog")) == files
    got = await pull_all(broker.addr, "OldTopic", 0)
    assert len(got) == count - 1
    assert got == expected("OldTopic", 0, count, size=600, skip={25})
    log = broker.log_text()
    assert "commit log damaged" in log and files[0] in log and "OldTopic/0@25" in log
    metrics = await asyncio.get_running_loop().run_in_executor(None, _scrape, metrics_port)
    assert metrics["rocketmq_store_recovery_corrupt_regions"] == 1
    assert metrics["rocketmq_store_recovery_missing_messages"] == 1
    assert metrics["rocketmq_store_recovery_corrupt_bytes"] > 600
