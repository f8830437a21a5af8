"""Consume-queue files mapped without a held descriptor (mapped_file.map_detached) and the descriptor budget
(broker/descriptors.py) that refuses new topics and connections before the store runs out (issue 27)."""

from __future__ import annotations

import gc
import os
import resource

import pytest

from broker.descriptors import DescriptorBudget, DescriptorsShortError, count_open_descriptors
from broker.store.consume_queue import ConsumeQueue
from broker.store.mapped_file import MappedFile, map_detached

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd")


def test_detached_mapping_holds_no_descriptor_and_writes_the_file(tmp_path):
    path = str(tmp_path / "f")
    with open(path, "wb") as f:
        f.truncate(8192)
    before = count_open_descriptors()
    views = [map_detached(path, 8192, random_access=True) for _ in range(50)]
    assert count_open_descriptors() == before
    views[0][100:105] = b"hello"
    assert bytes(views[1][100:105]) == b"hello"  # one shared mapping of the file
    with open(path, "rb") as f:
        f.seek(100)
        assert f.read(5) == b"hello"
    for v in views:
        v.release()


def test_mapped_file_slice_outlives_close(tmp_path):
    """A slice handed to a caller (a pull response) keeps the mapping after the file is closed and deleted."""
    mf = MappedFile(str(tmp_path / "00000000000000000000"), 0, 4096, create=True, preallocate=False, detached=True)
    mf.ensure_allocated(4096)
    mf.mm[0:3] = b"abc"
    piece = mf.mm[0:3]
    mf.destroy()
    gc.collect()
    assert bytes(piece) == b"abc"
    with pytest.raises(ValueError):
        mf.mm[0:3]  # closed, as a closed mmap.mmap would say


def test_consume_queues_hold_no_descriptors(tmp_path):
    """300 queues with a unit each: no descriptor left open; they reload and read back."""
    before = count_open_descriptors()
    queues = []
    for i in range(300):
        cq = ConsumeQueue(str(tmp_path), f"T{i}", 0, 6_000_000)
        cq.reserve(1)
        cq.append(1000 + i, 50, 7)
        queues.append(cq)
    assert count_open_descriptors() - before < 5
    for cq in queues:
        cq.close()
    again = ConsumeQueue(str(tmp_path), "T299", 0, 6_000_000)
    again.load()
    assert again.max_offset == 1 and again.get_unit(0) == (1299, 50, 7)
    again.close()


def test_budget_refuses_within_the_reserve():
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        pytest.skip("no open-file limit")
    open_now = count_open_descriptors()
    roomy = DescriptorBudget(max(1, soft - open_now - 50))
    assert roomy.shortage() is None
    roomy.check("topic A", "topic")  # no exception
    tight = DescriptorBudget(soft - open_now + 1)
    with pytest.raises(DescriptorsShortError, match="cannot create topic B now: the broker is short of file "
                                                    "descriptors.*fileDescriptorReserve"):
        tight.check("topic B", "topic")
    assert tight.refused == 1
    assert DescriptorBudget(0).shortage() is None  # 0: no reserve, never refuses


def test_budget_counts_reported_opens_between_refreshes():
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        pytest.skip("no open-file limit")
    budget = DescriptorBudget(10, refresh_ms=60_000)
    assert budget.shortage() is None
    budget.opened(soft)  # e.g. connections accepted since the last count
    assert budget.shortage() is not None
    budget.closed(soft)
    assert budget.shortage() is None
