"""Where the controller's group state lives, and who is the active controller.

``LocalBackend`` (controllerType=local): one controller, always active; every committed change rewrites its store
file atomically (write a temp file, fsync, rename, fsync the folder), so a restart serves what was decided.
``broker.controller.etcd_backend.EtcdBackend`` (controllerType=etcd) shares the state between controllers.

The service reads ``groups`` (the cache, authoritative on the active controller) and commits one group at a time
with ``commit(name, expected, new)``; a backend raises ``NotLeaderError`` when this controller may not change state
and ``ConflictError`` when the group changed underneath (the service then decides again).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any, Callable

from broker.controller.state import GroupState, group_from_json, group_to_json

__all__ = ["BackendError", "NotLeaderError", "ConflictError", "Backend", "LocalBackend", "STORE_FILE"]

log = logging.getLogger("broker.controller")

STORE_FILE = "controller_state.json"


class BackendError(Exception):
    """The state could not be read or stored (the request fails; nothing was decided)."""


class NotLeaderError(BackendError):
    """This controller is not (or no longer) the active one."""


class ConflictError(BackendError):
    """The group changed since it was read: decide again on the fresh state."""


class Backend:
    """Common part: the cache, the leadership flag and the metadata (1005) answer."""

    def __init__(self, self_address: str) -> None:
        self.self_address = self_address
        self.groups: dict[str, GroupState] = {}
        self.is_leader = False
        self.leader_since: float | None = None  # monotonic time this controller became active
        self.leader_address: str | None = None
        # called with True/False when this controller becomes / stops being the active one
        self.on_leadership: Callable[[bool], None] | None = None

    @property
    def group_name(self) -> str:
        return "local"

    @staticmethod
    def controller_id(address: str) -> str:
        """A controller's id in the metadata answer: its address with the colon swapped (``127.0.0.1-9878``) so
        ``peers`` (``id:addr;`` repeated) stays readable."""
        return address.replace(":", "-")

    def peers(self) -> list[str]:
        return [self.self_address]

    def _set_leader(self, leader: bool) -> None:
        if leader == self.is_leader:
            return
        self.is_leader = leader
        self.leader_since = time.monotonic() if leader else None
        callback = self.on_leadership
        if callback is not None:
            callback(leader)

    async def start(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    async def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    async def prepare(self, name: str) -> None:
        """Called before deciding on a group: a backend re-reads a group whose last commit's outcome is unknown."""

    async def commit(self, name: str, expected: GroupState | None, new: GroupState | None) -> None:
        raise NotImplementedError  # pragma: no cover - overridden


class LocalBackend(Backend):
    """One controller; the state in ``<controllerStorePath>/controller_state.json``."""

    def __init__(self, self_address: str, store_path: str) -> None:
        super().__init__(self_address)
        self.store_path = store_path
        self.file = os.path.join(store_path, STORE_FILE)
        self._write_lock = asyncio.Lock()

    def load(self) -> None:
        """Read the store (none yet: empty). A corrupt file is refused with BackendError, never half-read."""
        os.makedirs(self.store_path, exist_ok=True)
        try:
            with open(self.file, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            self.groups = {}
            return
        except OSError as exc:
            raise BackendError(f"cannot read {self.file}: {exc.strerror or exc}") from None
        try:
            doc = json.loads(raw)
            groups = {str(k): group_from_json(v) for k, v in dict(doc.get("groups") or {}).items()}
        except (ValueError, AttributeError, TypeError) as exc:
            raise BackendError(f"{self.file} is corrupt ({exc}); restore it or move it away") from None
        self.groups = groups

    async def start(self) -> None:
        self.load()
        self.leader_address = self.self_address
        self._set_leader(True)

    async def close(self) -> None:
        self._set_leader(False)

    def _write(self, groups: dict[str, GroupState]) -> None:
        doc = {"version": 1, "groups": {k: group_to_json(v) for k, v in sorted(groups.items())}}
        data = json.dumps(doc, indent=1, sort_keys=True).encode("utf-8")
        tmp = self.file + ".tmp"
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.file)
        fd = os.open(self.store_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    async def commit(self, name: str, expected: GroupState | None, new: GroupState | None) -> None:
        if not self.is_leader:
            raise NotLeaderError("controller is stopping")
        async with self._write_lock:
            if self.groups.get(name) is not expected:
                raise ConflictError(name)
            groups = dict(self.groups)
            if new is None:
                groups.pop(name, None)
            else:
                groups[name] = new
            try:
                await asyncio.to_thread(self._write, groups)
            except OSError as exc:
                raise BackendError(f"cannot write {self.file}: {exc.strerror or exc}") from None
            self.groups = groups

    def describe(self) -> dict[str, Any]:
        return {"type": "local", "store": self.file}
