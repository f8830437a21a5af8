"""Transaction ids as the reference forms them, and the map that leads from one back to its half record.

The reference answers every send with transactionId = the message's id (UNIQ_KEY), writes that id into the half
message as ``__transactionId__`` (so consumers of the committed message see it), and asks producers about a half
message under the same id. Its 5.x proxy remembers, per transaction id, which half record it names; END_TRANSACTION
needs that record's commit-log and half-queue offsets. HalfIds is that memory here: filled when a half message is
stored, when a check copies it forward (the answer must name the copy), and from the open half queue at start-up;
an entry goes when its transaction is decided. Bounded: the oldest entries go first, and a check re-adds an open
transaction's entry before its producer is asked.
"""

from __future__ import annotations


PROP_TRANSACTION_ID = "__transactionId__"
DEFAULT_LIMIT = 200_000


class HalfIds:
    """transaction id (UNIQ_KEY) -> (commit-log offset, half-queue offset) of the latest half record naming it."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = max(1, limit)
        self._offsets: dict[str, tuple[int, int]] = {}

    def note(self, transaction_id: str | None, commit_log_offset: int, queue_offset: int) -> None:
        if not transaction_id:
            return
        offsets = self._offsets
        offsets.pop(transaction_id, None)  # re-inserted: the newest record, and the youngest entry
        if len(offsets) >= self.limit:
            del offsets[next(iter(offsets))]
        offsets[transaction_id] = (commit_log_offset, queue_offset)

    def find(self, transaction_id: str) -> tuple[int, int] | None:
        return self._offsets.get(transaction_id)

    def forget(self, transaction_id: str | None) -> None:
        if transaction_id:
            self._offsets.pop(transaction_id, None)

    def __len__(self) -> int:
        return len(self._offsets)


__all__ = ["PROP_TRANSACTION_ID", "HalfIds"]
