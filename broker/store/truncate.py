"""Cutting a running store back to an earlier commit-log offset: a replica that diverged from its new master
(controller.md §10) keeps only the common history, in the commit log, the consume queues and the index."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .recovery import redispatch

if TYPE_CHECKING:
    from .message_store import MessageStore

log = logging.getLogger(__name__)

__all__ = ["TruncateResult", "truncate_store"]


@dataclass(frozen=True, slots=True)
class TruncateResult:
    from_offset: int  # the log end before
    to_offset: int  # the log end after
    units_dropped: int  # consume-queue units that pointed at the cut bytes
    index_files_rebuilt: int

    @property
    def bytes_cut(self) -> int:
        return self.from_offset - self.to_offset


def truncate_store(store: "MessageStore", offset: int) -> TruncateResult:
    """Drop every byte of the commit log from ``offset`` on, the consume-queue units pointing there and the index
    files holding entries there (the surviving records of those files are indexed again). Nothing is done when the
    log already ends at or before ``offset``."""
    cl = store.commit_log
    before = cl.max_offset
    if offset >= before:
        return TruncateResult(before, before, 0, 0)
    offset = max(offset, cl.min_offset) if cl.mfq.files else offset
    cl.cut_tail(offset)
    if not cl.mfq.files:
        cl.set_end(offset)
    dropped = 0
    for cq in store.iter_consume_queues():
        dropped += cq.truncate_beyond(offset)
    rebuilt = 0
    index = store.index
    if index is not None and index.files and index.last_phy_offset >= offset:
        first_gone = None
        while index.files and index.files[-1].end_phy_offset >= offset:
            f = index.files.pop()
            first_gone = f.begin_phy_offset if first_gone is None else min(first_gone, f.begin_phy_offset)
            f.destroy()
            rebuilt += 1
        start = max(cl.min_offset, first_gone or 0)
        if start < offset:
            redispatch(store, start, offset)
    store.replica_dispatched = offset  # the next replicated frame starts here
    cp = store.checkpoint
    cp.confirm_phy_offset = min(cp.confirm_phy_offset, offset)
    return TruncateResult(before, offset, dropped, rebuilt)
