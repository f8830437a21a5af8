"""Hot reload of plain_acl.yml: poll its modification time and size, re-read it when either changes.

A file that no longer loads (bad YAML, short key, bad pattern, unreadable) keeps the previous accounts and logs one
error per change of the file, not one per poll. The read runs in a worker thread so the event loop never waits on
the disk.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from broker.acl.accounts import AclConfig, AclFileError, load_acl_file
from broker.background import BackgroundService

__all__ = ["DEFAULT_POLL_INTERVAL_S", "AclFileWatcher"]

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_S = 1.0


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class AclFileWatcher(BackgroundService):
    """Owned by the broker: ``start()`` after the first load, ``stop()`` on shutdown."""

    task_name = "acl-file-watch"

    def __init__(self, path: str, on_change: Callable[[AclConfig], None],
                 interval_s: float = DEFAULT_POLL_INTERVAL_S) -> None:
        self.path = path
        self.on_change = on_change
        self.interval_s = interval_s
        self._stamp = _stamp(path)
        self.reloads = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.check()
            except Exception:  # a bug here must not end hot reload for good
                log.exception("checking %s for changes failed", self.path)

    async def check(self) -> bool:
        """Reload if the file changed since the last look; True when new accounts were applied."""
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            config = await asyncio.to_thread(load_acl_file, self.path)
        except AclFileError as exc:
            log.error("ACL file reload failed, keeping the previous accounts: %s", exc)
            return False
        self.on_change(config)
        self.reloads += 1
        log.info("ACL file %s reloaded: %d account(s), %d global white-list pattern(s)",
                    self.path, len(config.accounts), len(config.global_white))
        return True
