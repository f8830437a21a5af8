"""Issue 11: consume queues that are missing or shorter than the commit log are re-built on any start, with the
same queue offsets (before: deleting consumequeue/ and restarting normally made every message invisible and
restarted offsets at 0)."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.support.recovery import expected, fill, pull_all

QUEUES = (("RebuildA", 0), ("RebuildA", 1), ("RebuildB", 0))


async def _fill_queues(broker, count=300):
    for topic, qid in QUEUES:
        await fill(broker.addr, topic, qid, count)


async def _assert_all_back(broker, count=300):
    for topic, qid in QUEUES:
        assert await pull_all(broker.addr, topic, qid) == expected(topic, qid, count), (topic, qid)


@pytest.mark.parametrize("stop", ["graceful", "kill-9"])
async def test_deleted_consumequeue_dir_is_rebuilt_on_restart(broker_factory, stop):
    broker = broker_factory("rebuild")
    await _fill_queues(broker)
    if stop == "graceful":
        assert broker.stop() == 0
    else:
        broker.kill()
    shutil.rmtree(broker.store_dir / "consumequeue")
    broker.start()
    await _assert_all_back(broker)
    placed = await fill(broker.addr, "RebuildB", 0, 1, start=300)
    assert placed[0][0] == 300  # offsets continue, not restart at 0
    if stop == "graceful":
        assert "re-building them" in broker.log_text()


async def test_consume_queue_file_cut_short_is_rebuilt(broker_factory):
    broker = broker_factory("cqcut")
    await _fill_queues(broker)
    assert broker.stop() == 0
    cq_file = broker.store_dir / "consumequeue" / "RebuildA" / "0" / ("%020d" % 0)
    os.truncate(cq_file, 100 * 20 + 3)
    broker.start()
    await _assert_all_back(broker)
    assert "cut short" in broker.log_text()
