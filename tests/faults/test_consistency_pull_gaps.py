"""A pull never moves past a message it did not return: consume-queue units pointing at a missing or invalid
commit-log position end the batch there, and are skipped (logged) only when nothing was read before them."""

from __future__ import annotations

import os
import struct
import time

from protocol.codes import RequestCode as RC, ResponseCode as R

from tests.support.wire import WireClient, pull_fields, records, send_v2_fields

UNIT = struct.Struct(">qiq")
TOPIC = "Gappy"


def _damage_units(store_dir, queue_id: int, damage: dict[int, tuple[int, int]]) -> None:
    """Overwrite units of the running broker's CQ file in place (a MAP_SHARED mapping sees the page cache)."""
    path = store_dir / "consumequeue" / TOPIC / str(queue_id) / ("%020d" % 0)
    fd = os.open(path, os.O_RDWR)
    try:
        for offset, (phys_delta, size_delta) in damage.items():
            phys, size, tags = UNIT.unpack(os.pread(fd, UNIT.size, offset * UNIT.size))
            os.pwrite(fd, UNIT.pack(phys + phys_delta, size + size_delta, tags), offset * UNIT.size)
    finally:
        os.close(fd)


async def test_pull_stops_at_damaged_units_and_then_moves_on(broker):
    async with await WireClient.connect(broker.addr) as client:
        for i in range(50):
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(TOPIC, 0), f"m{i}".encode())
            assert resp.code == 0 and int(resp.ext_fields["queueOffset"]) == i
        # 20: points into the middle of its record; 21: a wrong size; 35: far beyond the commit log's end
        _damage_units(broker.store_dir, 0, {20: (5, 0), 21: (0, 17), 35: (1 << 40, 0)})

        resp = await client.request(RC.PULL_MESSAGE, pull_fields(TOPIC, "g", 0, 0, max_nums=32))
        assert resp.code == R.SUCCESS
        assert [m.queue_offset for m in records(resp.body)] == list(range(20))
        assert resp.ext_fields["nextBeginOffset"] == "20", "the batch must end at the gap, not past it"

        got, offset, rounds = [], 0, 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and rounds < 100:
            rounds += 1
            resp = await client.request(RC.PULL_MESSAGE, pull_fields(TOPIC, "g", 0, offset, max_nums=8))
            if resp.code == R.PULL_NOT_FOUND:
                break
            assert resp.code in (R.SUCCESS, R.PULL_RETRY_IMMEDIATELY), (resp.code, resp.remark)
            batch = [m.queue_offset for m in records(resp.body)]
            nxt = int(resp.ext_fields["nextBeginOffset"])
            passed = set(range(offset, nxt)) - set(batch) - {20, 21, 35}
            assert not passed, f"pull at {offset} moved to {nxt} past unreturned messages {sorted(passed)}"
            got.extend(batch)
            offset = nxt
        assert got == [o for o in range(50) if o not in (20, 21, 35)]
    assert "skipped" in broker.log_text()
