"""Retention: delete old commit-log files, then the CQ and index files that only point into them.

Policy (RocketMQ's CleanCommitLogService):
* at the ``delete_when`` hours, or at once when disk usage ≥ disk_max_used_space_ratio,
  delete commit-log files last modified more than ``file_reserved_time_hours`` ago;
* when usage ≥ disk_space_clean_forcibly_ratio, delete the oldest files even if not expired;
* only a prefix of the file list, at most ``delete_files_batch_max`` per run, never the
  file being written.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .message_store import MessageStore

log = logging.getLogger(__name__)


def disk_used_ratio(path: str) -> float:
    """Used space of the file system holding ``path`` in percent (like Java's getTotalSpace-getFreeSpace)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0.0
    if st.f_blocks <= 0:
        return 0.0
    return (st.f_blocks - st.f_bfree) * 100.0 / st.f_blocks


class RetentionService:
    """Periodic clean-up task + the synchronous ``clean_once`` it runs."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._task: asyncio.Task | None = None
        self.deleted_files_total = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="store-retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
            self._task = None

    async def _loop(self) -> None:
        interval = max(0.01, self.store.config.clean_resource_interval_ms / 1000)
        while True:
            await asyncio.sleep(interval)
            try:
                paths = self.clean_once(unlink=False)
                if paths:
                    await asyncio.get_running_loop().run_in_executor(None, _unlink_all, paths)
            except Exception:  # noqa: BLE001 - never let the service die
                log.exception("store retention run failed")

    def clean_once(self, now_ms: int | None = None, *, unlink: bool = True, force_time: bool = False,
                   used_ratio: float | None = None) -> list[str]:
        """One retention pass; returns the paths of deleted files.

        ``force_time`` acts as if the current hour were a delete hour; ``used_ratio`` overrides the
        measured disk usage (both for tests and manual triggers)."""
        store = self.store
        cfg = store.config
        if now_ms is None:
            now_ms = time.time_ns() // 1_000_000
        if used_ratio is None:
            used_ratio = disk_used_ratio(cfg.commit_log_path)
        hour = time.localtime(now_ms / 1000).tm_hour
        time_up = force_time or hour in cfg.delete_hours()
        space_full = used_ratio >= cfg.disk_max_used_space_ratio
        forcibly = used_ratio >= cfg.disk_space_clean_forcibly_ratio
        if not (time_up or space_full):
            return []
        expire_ms = cfg.file_reserved_time_hours * 3_600_000
        mfq = store.commit_log.mfq
        doomed = []
        for mf in mfq.files[:-1]:  # never the file being written
            if len(doomed) >= cfg.delete_files_batch_max:
                break
            expired = now_ms - mf.mtime() * 1000 >= expire_ms
            if expired or forcibly:
                doomed.append(mf)
            else:
                break  # only a prefix: never leave holes
        deleted: list[str] = []
        if doomed:
            removed = mfq.remove_first(len(doomed))
            for mf in removed:
                mf.close()
                deleted.append(mf.path)
            log.info("retention: deleting %d commit log file(s) (disk used %.1f%%): %s", len(removed), used_ratio,
                     ", ".join(os.path.basename(p) for p in deleted))
        new_min = store.commit_log.min_offset
        if doomed:
            store.tombstones.prune(new_min)
        for cq in list(store.iter_consume_queues()):
            files = cq.mfq.files
            before = [mf.path for mf in files]
            cq.delete_expired(new_min)
            after = {mf.path for mf in cq.mfq.files}
            deleted.extend(p for p in before if p not in after)
        if store.index is not None:
            before = [f.path for f in store.index.files]
            store.index.delete_below(new_min)
            after = {f.path for f in store.index.files}
            deleted.extend(p for p in before if p not in after)
        if unlink:
            _unlink_all(deleted)
        self.deleted_files_total += len(deleted)
        return deleted


def _unlink_all(paths: list[str]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.error("cannot delete %s: %s", path, exc)
