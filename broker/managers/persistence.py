"""Shared persistence plumbing for the config/*.json managers.

Files are read leniently (fastjson writes bare integer map keys) and written atomically with a
``.bak`` copy of the previous version, through ``broker.store.config_file.JsonConfigFile``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
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


def is_older_data_version(candidate: tuple[int, int, int], known: tuple[int, int, int]) -> bool:
    """True when ``candidate`` (a data_version_key) describes an older state of the same table than ``known``.

    A lower stateVersion (5.x master epoch) is older. Within one epoch the version is older only when its
    counter is lower *and* its timestamp is not later: both grow with every change (the counter is persisted,
    the timestamp is the clock), so requiring both keeps a broker that restarted with a lost counter (later
    clock) or under a clock set back (higher counter) from ever looking older than its own past."""
    if candidate[0] != known[0]:
        return candidate[0] < known[0]
    return candidate[2] < known[2] and candidate[1] <= known[1]


def open_json_file(path: str) -> Any:
    """The store's atomic JSON file for ``path`` (load() -> object|None with .bak fallback, save(obj))."""
    from broker.store.config_file import JsonConfigFile

    return JsonConfigFile(path)


class PersistentTable:
    """Base for managers persisted as one JSON document.

    Mutations call ``_changed()``: marks the table dirty, notifies listeners, and (inside a running
    event loop) schedules one coalesced write shortly after, so a burst of changes costs one write.
    That write snapshots the table on the loop and encodes + saves it in a worker thread (a table of
    thousands of entries takes tens of milliseconds to write). ``persist()`` writes synchronously
    (shutdown, tools). Writes are serialised and never let an older snapshot replace a newer one.
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
        self._persist_task: asyncio.Task[bool] | None = None
        self._listeners: list[Callable[[], None]] = []
        self._save_lock = threading.Lock()
        self._snapshot_seq = 0  # snapshots taken (on the loop)
        self._saved_seq = 0  # newest snapshot on disk (under _save_lock)

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

    def _document_builder(self) -> Callable[[], dict[str, Any]]:
        """Called on the loop: capture a consistent view of the table and return a function that
        builds the document from it, possibly in a worker thread. Subclasses whose entries are
        replaced rather than modified in place can capture a shallow copy and defer the encoding."""
        document = self.encode()
        return lambda: document

    def _snapshot_taken(self) -> Any:
        """Hook (on the loop) right after a snapshot is captured; its result goes to ``_snapshot_saved``."""
        return None

    def _snapshot_saved(self, token: Any) -> None:
        """Hook (on the loop) once the snapshot that ``_snapshot_taken`` returned ``token`` for is on disk."""

    def _capture(self) -> tuple[int, Callable[[], dict[str, Any]], Any]:
        self._snapshot_seq += 1
        build = self._document_builder()
        token = self._snapshot_taken()
        self._dirty = False
        return self._snapshot_seq, build, token

    def _save(self, seq: int, build: Callable[[], dict[str, Any]]) -> bool:
        """Build and write snapshot ``seq`` unless a newer one is already on disk (any thread)."""
        with self._save_lock:
            if seq <= self._saved_seq:
                return False
            self._file.save(build())
            self._saved_seq = seq
            return True

    def persist(self) -> None:
        """Write the table now (atomically, keeping .bak)."""
        self._cancel_scheduled()
        seq, build, token = self._capture()
        try:
            self._save(seq, build)
        except BaseException:
            self._dirty = True
            raise
        self._snapshot_saved(token)

    async def persist_async(self) -> bool:
        """Snapshot on the loop, encode and write in a worker thread. True if something was written."""
        if not self._dirty:
            return False
        seq, build, token = self._capture()
        try:
            written = await asyncio.to_thread(self._save, seq, build)
        except BaseException:
            self._dirty = True
            raise
        self._snapshot_saved(token)
        return written

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

    def mark_changed(self) -> None:
        """The table was changed from outside its own methods (a slave replacing it by the master's copy): marked
        dirty, listeners told, a write scheduled, as after any of its own mutations."""
        self._changed()

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
        if self._persist_task is not None and not self._persist_task.done():
            self._schedule_persist()  # one background write at a time; look again shortly
            return
        self._persist_task = asyncio.get_running_loop().create_task(self._background_persist())

    async def _background_persist(self) -> bool:
        try:
            return await self.persist_async()
        except OSError:
            log.exception("persisting %s failed; will retry on the next change", self.path)
            return False

    def _cancel_scheduled(self) -> None:
        if self._persist_handle is not None:
            self._persist_handle.cancel()
            self._persist_handle = None


class ChangeJournal:
    """Append-only JSON-lines journal of changes next to a config file.

    Each change is one ``os.write`` (in the page cache at once, so it survives kill -9) and costs the
    same however large the table is, while the full file is rewritten only now and then. Records go to
    segments ``<path>.journal.<n>``; taking a snapshot of the table starts a new segment, and once that
    snapshot is on disk the segments it covers are deleted. Loading replays the remaining segments in
    order on top of the file (records carry full state, so replaying an already-saved one is harmless).
    """

    def __init__(self, path: str) -> None:
        self.directory = os.path.dirname(path) or "."
        self.prefix = os.path.basename(path) + ".journal."
        self._fd: int | None = None
        self._seq = 0

    def segments(self) -> list[tuple[int, str]]:
        """(number, path) of every segment on disk, oldest first."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            suffix = name[len(self.prefix):] if name.startswith(self.prefix) else ""
            if suffix.isdigit():
                found.append((int(suffix), os.path.join(self.directory, name)))
        return sorted(found)

    def read(self) -> list[dict[str, Any]]:
        """All records, oldest first. A torn last line (crash mid-write) is skipped."""
        records: list[dict[str, Any]] = []
        for _, path in self.segments():
            try:
                with open(path, "rb") as f:
                    lines = f.read().split(b"\n")
            except OSError as exc:
                log.warning("cannot read journal %s: %s", path, exc)
                continue
            for line in lines:
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    log.warning("skipping a torn record in %s", path)
                    continue
                if isinstance(record, dict):
                    records.append(record)
        return records

    def append(self, record: dict[str, Any]) -> None:
        if self._fd is None:
            self._open_next()
        assert self._fd is not None
        os.write(self._fd, json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n")

    def rotate(self) -> int:
        """Close the current segment (later records go to a new one); returns the number of the
        newest segment whose records a snapshot taken now includes."""
        self.close()
        self._seq = max(self._seq, max((n for n, _ in self.segments()), default=0))
        return self._seq

    def drop_through(self, seq: int) -> None:
        """Delete segments up to ``seq`` (their records are in a saved snapshot)."""
        for number, path in self.segments():
            if number > seq:
                break
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open_next(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        self._seq = max(self._seq, max((n for n, _ in self.segments()), default=0)) + 1
        path = os.path.join(self.directory, f"{self.prefix}{self._seq}")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
