"""Who resent which dead letter, when, and where to: the audit of RESEND_DLQ_MESSAGE, kept across restarts.

A dead letter is named by its group and its commit-log offset in ``%DLQ%<group>`` (the same message can die twice:
each death is its own letter). One entry per letter holds the last resend and how many there were; the file
(``<config dir>/dlqResends.json``) keeps the newest `max_entries` letters, so it stays small however many resends a
broker sees. Written coalesced shortly after a change, like the other config/*.json tables.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from typing import Any

from broker.managers.persistence import PersistentTable

__all__ = ["DlqResendLog", "DEFAULT_MAX_ENTRIES"]

DEFAULT_MAX_ENTRIES = 10_000


def _key(group: str, dead_offset: int) -> str:
    return f"{group}@{dead_offset}"


class DlqResendLog(PersistentTable):
    """letter (group, dead-letter commit-log offset) -> its last resend: at (ms), by, target, msgId, count."""

    def __init__(self, config_dir: str, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        super().__init__(os.path.join(config_dir, "dlqResends.json"))
        self.max_entries = max(1, max_entries)
        self.entries: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._loaded = False

    # -- persistence -------------------------------------------------------------------------------
    def encode(self) -> dict[str, Any]:
        return {"resends": list(self.entries.values())}

    def decode(self, obj: dict[str, Any]) -> None:
        self.entries.clear()
        for entry in obj.get("resends") or []:
            if isinstance(entry, dict) and isinstance(entry.get("group"), str) and isinstance(entry.get("deadOffset"), int):
                self.entries[_key(entry["group"], entry["deadOffset"])] = entry
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)

    def _ensure_loaded(self) -> None:
        """Read the file on first use (the config directory exists by then; a broken file starts a new log)."""
        if self._loaded:
            return
        self._loaded = True
        try:
            self.load()
        except (OSError, ValueError):
            self.entries.clear()

    def persist(self) -> None:
        """Write only when something changed (a broker that never resent anything leaves no file)."""
        if self.dirty:
            super().persist()

    # -- the audit ---------------------------------------------------------------------------------
    def last(self, group: str, dead_offset: int) -> dict[str, Any] | None:
        self._ensure_loaded()
        return self.entries.get(_key(group, dead_offset))

    def of_group(self, group: str) -> dict[int, dict[str, Any]]:
        """dead-letter offset -> its entry, for one group."""
        self._ensure_loaded()
        return {e["deadOffset"]: e for e in self.entries.values() if e.get("group") == group}

    def record(self, group: str, dead_offset: int, dead_msg_id: str, target: str, new_msg_id: str, by: str,
               at_ms: int | None = None) -> dict[str, Any]:
        """Remember one resend (the newest letters kept, the oldest dropped past max_entries)."""
        self._ensure_loaded()
        key = _key(group, dead_offset)
        previous = self.entries.pop(key, None)
        entry = {"group": group, "deadOffset": dead_offset, "deadMsgId": dead_msg_id, "target": target,
                 "newMsgId": new_msg_id, "by": by, "at": int(time.time() * 1000) if at_ms is None else at_ms,
                 "count": (previous or {}).get("count", 0) + 1}
        self.entries[key] = entry
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)
        self._changed(notify=False)
        return entry
