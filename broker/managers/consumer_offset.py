"""Committed consumer offsets, persisted as config/consumerOffset.json.

Layout (RocketMQ-compatible): ``{"offsetTable":{"<topic>@<group>":{<queueId>:<offset>,...}}}``.
The stored offset is the next message to consume. Java brokers write the inner keys unquoted; we
read both forms and write standard JSON (quoted keys), which fastjson reads back fine.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Callable

from broker.managers.persistence import PersistentTable
from protocol.json_body import as_int

TOPIC_GROUP_SEPARATOR = "@"
FILE_NAME = "consumerOffset.json"


class ConsumerOffsetManager(PersistentTable):
    """``offset_table[topic@group][queue_id] = next offset to consume``.

    Commits arrive every 5 s per queue from every consumer, so this table is not persisted per
    change: the broker calls ``persist()``/``persist_async()`` every flushConsumerOffsetInterval and
    at shutdown (only when something changed).
    """

    def __init__(self, config_dir: str) -> None:
        super().__init__(os.path.join(config_dir, FILE_NAME), auto_persist=False)
        self.offset_table: dict[str, dict[int, int]] = {}
        # A slave's client commits (consumers commit to a slave while its master is away), kept until they are
        # handed to the master (broker/ha/metadata_sync.py); None on a master. Same layout as offset_table.
        self.client_commits: dict[str, dict[int, int]] | None = None

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    # -- commit / query ----------------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, client_host: str | None = None) -> None:
        """Store ``offset`` for the queue. Negative offsets (idle queues report -1) are ignored."""
        if offset < 0:
            return
        queues = self.offset_table.get(self.key(topic, group))
        if queues is None:
            queues = self.offset_table[self.key(topic, group)] = {}
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self._changed(notify=False)
        if self.client_commits is not None:
            self.client_commits.setdefault(self.key(topic, group), {})[queue_id] = offset

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when none is stored."""
        queues = self.offset_table.get(self.key(topic, group))
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.offset_table.get(self.key(topic, group), {}))

    def has_offsets(self, group: str, topic: str) -> bool:
        return self.key(topic, group) in self.offset_table

    def topics_of_group(self, group: str) -> set[str]:
        out = set()
        for key in self.offset_table:
            topic, _, key_group = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if key_group == group:
                out.add(topic)
        return out

    def groups_of_topic(self, topic: str) -> set[str]:
        out = set()
        for key in self.offset_table:
            key_topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if key_topic == topic:
                out.add(group)
        return out

    def offsets_by_topic(self) -> dict[str, dict[str, dict[int, int]]]:
        """``topic -> group -> queue id -> offset`` (the store's clean-up report reads it; not on a hot path)."""
        out: dict[str, dict[str, dict[int, int]]] = {}
        for key, queues in self.offset_table.items():
            topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
            out.setdefault(topic, {})[group] = queues
        return out

    def reset_offset(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Replace all offsets of (topic, group) (admin reset)."""
        self.offset_table[self.key(topic, group)] = {int(q): int(o) for q, o in offsets.items()}
        self._changed(notify=False)

    def remove_group(self, group: str) -> None:
        self._remove_keys(lambda topic, key_group: key_group == group)

    def remove_topic(self, topic: str) -> None:
        self._remove_keys(lambda key_topic, group: key_topic == topic)

    def _remove_keys(self, doomed: Callable[[str, str], bool]) -> None:
        """Drop every ``topic@group`` entry for which ``doomed(topic, group)`` holds."""
        removed = []
        for key in self.offset_table:
            topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if doomed(topic, group):
                removed.append(key)
        for key in removed:
            del self.offset_table[key]
        if removed:
            self._changed(notify=False)

    # -- persistence -------------------------------------------------------------------------------
    def encode(self) -> dict[str, Any]:
        return {
            "offsetTable": {
                key: {str(queue_id): offset for queue_id, offset in sorted(queues.items())}
                for key, queues in self.offset_table.items()
            }
        }

    def decode(self, obj: dict[str, Any]) -> None:
        table: dict[str, dict[int, int]] = {}
        for key, queues in (obj.get("offsetTable") or {}).items():
            if TOPIC_GROUP_SEPARATOR not in key or not isinstance(queues, dict):
                continue
            table[key] = {as_int(q, -1): as_int(o, 0) for q, o in queues.items() if as_int(q, -1) >= 0}
        self.offset_table = table

    async def persist_async(self) -> bool:
        """Snapshot on the loop, write in a worker thread (the file can be large). True if written."""
        if not self._dirty:
            return False
        snapshot = self.encode()
        self._dirty = False
        try:
            await asyncio.to_thread(self._file.save, snapshot)
        except BaseException:
            self._dirty = True
            raise
        return True
