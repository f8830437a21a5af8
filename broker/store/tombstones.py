"""Tombstones of deleted topics: which commit-log records belong to a deleted incarnation of a topic.

Deleting a topic removes its consume queues, but its records stay in the commit log until retention
removes the files. Recovery re-builds consume queues from commit-log records, so without a record of
the deletion it would hand the old messages back (after a re-created topic's new ones, or as a
"recovered" topic). A tombstone is ``topic -> commit-log end offset at the deletion``: records of the
topic below it are dead. The table lives in ``<store root>/deletedTopics.json``, written atomically and
fsync'ed before the deletion is acknowledged, and a tombstone goes once the commit log's min offset has
passed it (no dead record is left).
"""

from __future__ import annotations

import logging

from .config_file import JsonConfigFile

log = logging.getLogger(__name__)

FILE_NAME = "deletedTopics.json"


class TopicTombstones:
    """``offsets[topic]`` = commit-log offset below which the topic's records are from a deleted incarnation."""

    def __init__(self, path: str) -> None:
        self._file = JsonConfigFile(path)
        self.offsets: dict[str, int] = {}

    def load(self) -> None:
        obj = self._file.load()
        table = obj.get("deletedTopics") if isinstance(obj, dict) else None
        if obj is not None and not isinstance(table, dict):
            log.error("%s: no deletedTopics table; deleted topics may come back in recovery", self._file.path)
            return
        for topic, offset in (table or {}).items():
            try:
                self.offsets[str(topic)] = int(offset)
            except (TypeError, ValueError):
                log.error("%s: bad offset %r for topic %s ignored", self._file.path, offset, topic)

    def save(self) -> None:
        """Write the table (tmp + fsync + rename, blocking)."""
        self._file.save({"deletedTopics": dict(sorted(self.offsets.items()))})

    def add(self, topic: str, commit_log_end: int) -> None:
        """Record a deletion of ``topic`` while the commit log ends at ``commit_log_end`` and persist it."""
        self.offsets[topic] = max(commit_log_end, self.offsets.get(topic, 0))
        self.save()

    def is_dead(self, topic: str, phys_offset: int) -> bool:
        """True when the record of ``topic`` at ``phys_offset`` was written before the topic was deleted."""
        offsets = self.offsets
        return bool(offsets) and phys_offset < offsets.get(topic, -1)

    def prune(self, commit_log_min: int) -> int:
        """Drop tombstones no record lies below any more; returns how many went."""
        gone = [topic for topic, offset in self.offsets.items() if offset <= commit_log_min]
        for topic in gone:
            del self.offsets[topic]
        if gone:
            try:
                self.save()
            except OSError as exc:  # harmless: the stale tombstones only cover records that no longer exist
                log.warning("cannot rewrite %s: %s", self._file.path, exc)
        return len(gone)
