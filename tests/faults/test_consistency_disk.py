"""Disk: auto-created queues do not pre-allocate whole consume-queue files, and a clean-up that deletes
messages some consumer group has not consumed yet says so (issue 11)."""

from __future__ import annotations

import asyncio
import os
import re
import time

from protocol.codes import RequestCode as RC

from tests.support.wire import WireClient, pull_fields, records, send_v2_fields

CQ_FILE_SIZE = 20 * 20_000  # the fixtures' mappedFileSizeConsumeQueue


def allocated_bytes(directory) -> tuple[int, int]:
    """(bytes with disk blocks, number of files) under ``directory`` (what ``du`` counts)."""
    total = files = 0
    for root, _dirs, names in os.walk(directory):
        for name in names:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
            files += 1
    return total, files


async def test_auto_created_queues_use_disk_for_what_they_hold(broker):
    topics, queues = 30, 4
    async with await WireClient.connect(broker.addr) as client:
        for t in range(topics):
            for q in range(queues):
                resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(f"Auto{t}", q), b"x" * 100)
                assert resp.code == 0, (resp.code, resp.remark)
        used, files = allocated_bytes(broker.store_dir / "consumequeue")
        assert files == topics * queues
        # pre-allocated: 120 x 400 KB = 48 MB; lazily allocated: a page (or a few) per queue
        assert used <= files * 16 * 1024, f"{used} bytes of disk for {files} queues of one message"
        for q in range(queues):  # full-size (sparse) files: the reference's layout is unchanged
            assert os.path.getsize(broker.store_dir / "consumequeue" / "Auto0" / str(q) / ("%020d" % 0)) == CQ_FILE_SIZE

        # a queue that grows gets its blocks ahead of the writer and stays readable after a restart
        for i in range(3000):
            client.send_nowait(client.make(RC.SEND_MESSAGE_V2, send_v2_fields("Auto0", 0), b"y" * 100))
        resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("Auto0", 0), b"last")
        assert int(resp.ext_fields["queueOffset"]) == 3001
    broker.kill()
    broker.start()
    async with await WireClient.connect(broker.addr) as client:
        resp = await client.request(RC.PULL_MESSAGE, pull_fields("Auto0", "g", 0, 3001, max_nums=1))
        assert [m.body for m in records(resp.body)] == [b"last"]
        for i in range(50):
            assert (await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("Auto0", 0), b"z")).code == 0
        resp = await client.request(RC.PULL_MESSAGE, pull_fields("Auto0", "g", 0, 3002, max_nums=32))
        assert [m.body for m in records(resp.body)] == [b"z"] * 32


async def test_clean_up_of_unconsumed_messages_names_the_groups(broker_factory):
    # Offsets can only be committed inside a queue, so the backlog is written and the offsets committed first
    # (files kept), then the broker is restarted on the same store with every file expired.
    retention = {"mappedFileSizeCommitLog": 64 * 1024, "deleteWhen": ";".join(str(h) for h in range(24)),
                 "cleanResourceInterval": 200}
    writer = broker_factory("backlog", extra={**retention, "fileReservedTime": 72})
    async with await WireClient.connect(writer.addr) as client:
        for i in range(300):
            client.send_nowait(client.make(RC.SEND_MESSAGE_V2, send_v2_fields("Backlog", i % 2), b"b" * 1000))
        resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("Backlog", 0), b"b" * 1000)
        assert resp.code == 0
        maxes = []
        for q in (0, 1):
            resp = await client.request(RC.GET_MAX_OFFSET, {"topic": "Backlog", "queueId": str(q)})
            maxes.append(int(resp.ext_fields["offset"]))
        commits = {("slow", 0): 3, ("slow", 1): 0, ("done", 0): maxes[0], ("done", 1): maxes[1]}
        for (group, q), offset in commits.items():
            commit = {"consumerGroup": group, "topic": "Backlog", "queueId": str(q), "commitOffset": str(offset)}
            assert (await client.request(RC.UPDATE_CONSUMER_OFFSET, commit)).code == 0
    writer.stop()
    broker = broker_factory("backlog", extra={**retention, "fileReservedTime": 0})
    async with await WireClient.connect(broker.addr) as client:
        commit_log = broker.store_dir / "commitlog"
        deadline = time.monotonic() + 20
        while len(os.listdir(commit_log)) > 1:  # everything but the file being written expires at once
            assert time.monotonic() < deadline, "retention did not run"
            await asyncio.sleep(0.1)
        mins = []
        for q in (0, 1):
            resp = await client.request(RC.GET_MIN_OFFSET, {"topic": "Backlog", "queueId": str(q)})
            mins.append(int(resp.ext_fields["offset"]))
    assert mins[0] > 3 and mins[1] > 0
    expected = (mins[0] - 3) + (mins[1] - 0)  # what "slow" never got; "done" is past the deleted range

    def reports() -> list[str]:
        return [ln for ln in list(broker.output) if "not yet consumed" in ln]

    deadline = time.monotonic() + 5
    while sum(_count(ln) for ln in reports()) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    lines = reports()
    assert lines, "no clean-up report:\n" + broker.log_text()[-3000:]
    assert all("slow (Backlog: " in ln and "done" not in ln for ln in lines), lines
    assert sum(_count(ln) for ln in lines) == expected, lines


def _count(line: str) -> int:
    return int(re.search(r"([\d,]+) messages not yet consumed", line).group(1).replace(",", ""))
