"""broker/pop/state.py: a group's progress on a queue, and the journal + snapshot that bring it back after a restart."""

from __future__ import annotations

import asyncio

from broker.pop.handle import InvalidHandle, ReceiptHandle
from broker.pop.state import Inflight, PopState, QueueProgress

import pytest

KEY = ("G", "T", 0)


def test_the_frontier_moves_only_over_finished_offsets():
    progress = QueueProgress(10)
    for offset in (10, 11, 12):
        progress.inflight[offset] = Inflight(100 + offset, 0, 1000, 1)
    progress.skip_to(10, 15, [10, 11, 12])  # 13 and 14 were filtered out
    assert progress.committed == 10 and progress.next_offset == 15
    progress.finish([12])
    assert progress.committed == 10
    progress.finish([10])
    assert progress.committed == 11
    progress.finish([11])
    assert progress.committed == 15 and not progress.done and not progress.inflight


def test_a_filtered_out_run_moves_an_idle_frontier_at_once():
    progress = QueueProgress(0)
    progress.skip_to(0, 5000, [])
    assert progress.committed == progress.next_offset == 5000 and not progress.done


def _snapshot(state: PopState) -> dict:
    return {key: progress.encode(key) for key, progress in state.queues.items()}


def test_the_journal_replays_to_the_same_state(tmp_path):
    live = PopState(str(tmp_path))
    progress = live.add(KEY, 0)
    delivered = [(o, Inflight(1000 + o, 5_000, 30_000, 1, "client-1")) for o in (0, 1, 3)]
    for offset, entry in delivered:
        progress.inflight[offset] = entry
    progress.skip_to(0, 4, [0, 1, 3])
    live.log_pop(KEY, 0, 4, delivered)
    progress.finish([1])
    live.log_finish(KEY, [1])
    entry = progress.inflight[3]
    entry.pop_time_ms, entry.invisible_ms = 9_000, 1_000
    live.log_update(KEY, 3, entry)
    other = live.add(("G2", "T", 1), 7)
    other.skip_to(7, 9, [])
    live.log_pop(("G2", "T", 1), 7, 9, [])
    expected = _snapshot(live)
    with open(live._journal.segments()[-1][1], "ab") as f:
        f.write(b'{"f":["G","T",0],"o":[')  # a torn last line (killed mid-write) is skipped
    restored = PopState(str(tmp_path))
    restored.load()
    assert _snapshot(restored) == expected
    assert restored.get(KEY).committed == 0 and sorted(restored.get(KEY).inflight) == [0, 3]
    assert restored.get(KEY).inflight[3].expiry_ms == 10_000


def test_a_pass_logged_as_columns_replays_like_rows(tmp_path):
    live = PopState(str(tmp_path))
    progress = live.add(KEY, 10)
    for offset, phys, attempt in ((10, 500, 1), (12, 540, 3)):
        progress.inflight[offset] = Inflight(phys, 7_000, 30_000, attempt, "client-2")
    progress.skip_to(10, 14, [10, 12])  # 11 and 13 filtered out
    live.log_popped(KEY, 10, 14, [10, 12], [500, 540], [1, 3], 7_000, 30_000, "client-2", "attempt-1")
    progress.attempt_id = "attempt-1"
    progress.finish([10])
    live.log_finish(KEY, [10])
    expected = _snapshot(live)
    restored = PopState(str(tmp_path))
    restored.load()
    assert _snapshot(restored) == expected
    entry = restored.get(KEY).inflight[12]
    assert (entry.phys, entry.attempt, entry.expiry_ms, entry.renew_client, entry.first_pop_ms) == \
        (540, 3, 37_000, "client-2", 7_000)
    assert restored.get(KEY).committed == 12 and restored.get(KEY).attempt_id == "attempt-1"


def test_a_snapshot_replaces_the_journal(tmp_path):
    state = PopState(str(tmp_path))
    progress = state.add(KEY, 0)
    progress.inflight[0] = Inflight(1, 1, 1, 1)
    progress.skip_to(0, 1, [0])
    state.log_pop(KEY, 0, 1, [(0, progress.inflight[0])])
    state.close()
    assert state._journal.segments() == []
    restored = PopState(str(tmp_path))
    restored.load()
    assert _snapshot(restored) == _snapshot(state)
    restored.drop_topic("T")
    assert restored.get(KEY) is None


def test_background_snapshots_keep_later_records(tmp_path, monkeypatch):
    monkeypatch.setattr("broker.pop.state.SNAPSHOT_EVERY_RECORDS", 3)
    state = PopState(str(tmp_path))

    async def churn():
        progress = state.add(KEY, 0)
        for offset in range(20):
            progress.inflight[offset] = Inflight(offset, 0, 1, 1)
            progress.skip_to(offset, offset + 1, [offset])
            state.log_pop(KEY, offset, offset + 1, [(offset, progress.inflight[offset])])
            state.maybe_snapshot()
            await asyncio.sleep(0)
            if offset % 2:
                progress.finish([offset])
                state.log_finish(KEY, [offset])
        await asyncio.sleep(0.2)

    asyncio.run(churn())
    restored = PopState(str(tmp_path))
    restored.load()
    assert _snapshot(restored) == _snapshot(state)


def test_receipt_handles_round_trip_and_refuse_garbage():
    handle = ReceiptHandle(1_700_000_000_000, 30_000, 1, "broker-a", 2, 41, 123_456)
    assert ReceiptHandle.decode(handle.encode()) == handle and handle.expiry_ms == 1_700_000_030_000
    for bad in ("", "1 2 3", "a b c d e f g h i", "1 2 3 0 7 b 1 2 3", "1 -2 3 0 0 b 1 2 3"):
        with pytest.raises(InvalidHandle):
            ReceiptHandle.decode(bad)
