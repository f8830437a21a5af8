"""Shared persistence plumbing for the config/*.json managers.

Files are read leniently (fastjson writes bare integer map keys) and written atomically with a
``.bak`` copy of the previous version, through ``broker.store.config_file.JsonConfigFile``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from protocol.json_body import as_int

log = logging.getLogger(__name__)

DEFAULT_PERSIST_DELAY_S = 0.2


def bump_version(version: Any) -> None:
    """Advance a protocol.config_bodies.DataVersion after a change; the timestamp strictly increases so two
    quick changes never compare equal."""
    version.counter += 1
    version.timestamp = max(int(time.time() * 1000), version.timestamp + 1)


def data_version_key(obj: Any) -> tuple[int, int, int]:
    """Comparable identity of a DataVersion given as a protocol.config_bodies.DataVersion or a JSON dict."""
    if obj is None:
        return (0, 0, 0)
    if isinstance(obj, dict):
        return (as_int(obj.get("stateVersion"), 0), as_int(obj.get("timestamp"), 0), as_int(obj.get("counter"), 0))
    return (
        as_int(getattr(obj, "state_version", 0), 0),
        as_int(getattr(obj, "timestamp", 0), 0),
        as_int(getattr(obj, "counter", 0), 0),
    )


def open_json_file(path: str) -> Any:
    """The store's atomic JSON file for ``path`` (load() -> object|None with .bak fallback, save(obj))."""
    from broker.store.config_file import JsonConfigFile

    return JsonConfigFile(path)


class PersistentTable:
    """Base for managers persisted as one JSON document.

    Mutations call ``_changed()``: marks the table dirty, notifies listeners, and (inside a running
    event loop) schedules one coalesced ``persist()`` shortly after, so a burst of changes costs one
    write. ``persist()`` may also be called directly (shutdown, periodic flush).
    """

    def __init__(
        self, path: str, persist_delay_s: float = DEFAULT_PERSIST_DELAY_S, *, auto_persist: bool = True
    ) -> None:
        self.path = path
        self._auto_persist = auto_persist
        self._file = open_json_file(path)
        self._dirty = False
        self._persist_delay_s = persist_delay_s
        self._persist_handle: asyncio.TimerHandle | None = None
        self._listeners: list[Callable[[], None]] = []

    # -- to implement ------------------------------------------------------------------------------
    def encode(self) -> dict[str, Any]:
        raise NotImplementedError

    def decode(self, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    # -- persistence -------------------------------------------------------------------------------
    def load(self) -> bool:
        """Read the file (or its .bak). Returns False when neither exists (fresh broker)."""
        obj = self._file.load()
        if obj is None:
            return False
        if not isinstance(obj, dict):
            raise ValueError(f"{self.path}: expected a JSON object, got {type(obj).__name__}")
        self.decode(obj)
        return True

    def persist(self) -> None:
        """Write the table now (atomically, keeping .bak)."""
        self._cancel_scheduled()
        self._file.save(self.encode())
        self._dirty = False

    def persist_if_dirty(self) -> bool:
        if not self._dirty:
            return False
        self.persist()
        return True

    @property
    def dirty(self) -> bool:
        return self._dirty

    def add_change_listener(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs synchronously after every change (e.g. to trigger route registration)."""
        self._listeners.append(callback)

    def _changed(self, *, notify: bool = True) -> None:
        self._dirty = True
        if notify:
            for callback in list(self._listeners):
                try:
                    callback()
                except Exception:  # a listener bug must not break the mutation that triggered it
                    log.exception("change listener of %s failed", self.path)
        self._schedule_persist()

    def _schedule_persist(self) -> None:
        if not self._auto_persist or self._persist_handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (tests, tools): the owner persists explicitly
        self._persist_handle = loop.call_later(self._persist_delay_s, self._scheduled_persist)

    def _scheduled_persist(self) -> None:
        self._persist_handle = None
        try:
            self.persist_if_dirty()
        except OSError:
            log.exception("persisting %s failed; will retry on the next change", self.path)

    def _cancel_scheduled(self) -> None:
        if self._persist_handle is not None:
            self._persist_handle.cancel()
            self._persist_handle = None
