"""Flushing: ASYNC periodic commit-log flush, SYNC group commit, CQ/index flush + checkpoint.

All fdatasync calls run in dedicated single-thread executors so the event loop never
blocks on the disk. Positions to flush are captured on the loop thread first; only
bytes written before the capture are claimed as flushed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .message_store import MessageStore

log = logging.getLogger(__name__)


def _sync_files(files) -> None:
    for f in files:
        f.sync_to_disk()


class FlushService:
    """Owns the flush tasks of one MessageStore."""

    def __init__(self, store: MessageStore, observer: Callable[[float], None] | None = None) -> None:
        self.store = store
        self.observer = observer  # called with each commit-log flush's duration in seconds (lock wait included)
        self.commit_log_flushed_offset = store.commit_log.max_offset
        self._cl_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-flush-cl")
        self._logic_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-flush-cq")
        self._tasks: list[asyncio.Task] = []
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._wakeup: asyncio.Event | None = None
        self._cl_lock: asyncio.Lock | None = None
        self._running = False

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> None:
        self._running = True
        self._wakeup = asyncio.Event()
        self._cl_lock = asyncio.Lock()
        config = self.store.config
        if config.sync_flush:
            self._tasks.append(asyncio.create_task(self._group_commit_loop(), name="store-group-commit"))
        else:
            self._tasks.append(asyncio.create_task(
                self._every(config.flush_interval_commit_log_ms, self.flush_commit_log, "commit log"),
                name="store-flush-commitlog"))
        self._tasks.append(asyncio.create_task(
            self._every(config.flush_interval_consume_queue_ms, self.flush_logics, "consume queue / index"),
            name="store-flush-logics"))

    async def stop(self) -> None:
        self._running = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down anyway
                pass
        self._tasks.clear()
        for _off, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters.clear()

    def abandon(self) -> None:
        """Stop without flushing (crash simulation / emergency close)."""
        self._running = False
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        self._cl_executor.shutdown(wait=False)
        self._logic_executor.shutdown(wait=False)

    def close(self) -> None:
        self._cl_executor.shutdown(wait=True)
        self._logic_executor.shutdown(wait=True)

    # -- commit log -------------------------------------------------------------
    async def flush_commit_log(self) -> int:
        """Flush everything written so far; returns the flushed offset."""
        observer = self.observer
        if observer is None:
            return await self._flush_commit_log()
        started = time.perf_counter()
        try:
            return await self._flush_commit_log()
        finally:
            observer(time.perf_counter() - started)

    async def _flush_commit_log(self) -> int:
        if self._cl_lock is None:
            self._cl_lock = asyncio.Lock()
        async with self._cl_lock:
            store = self.store
            target = store.commit_log.max_offset
            last_ts = store.last_store_timestamp
            dirty = [(mf, mf.wrote_position) for mf in store.commit_log.dirty_files()]
            if dirty:
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(self._cl_executor, _sync_files, [mf for mf, _ in dirty])
                for mf, pos in dirty:
                    if mf.flushed_position < pos:
                        mf.flushed_position = pos
            if target > self.commit_log_flushed_offset:
                self.commit_log_flushed_offset = target
            if last_ts > store.checkpoint.physic_msg_timestamp:
                store.checkpoint.physic_msg_timestamp = last_ts
            return self.commit_log_flushed_offset

    async def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        """SYNC_FLUSH: wait (sharing one flush with concurrent callers) until ``offset`` is on disk."""
        if self.commit_log_flushed_offset >= offset:
            return True
        if not self._running:
            try:
                await asyncio.wait_for(self.flush_commit_log(), timeout_s)
            except (asyncio.TimeoutError, OSError):
                return False
            return self.commit_log_flushed_offset >= offset
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        self._wakeup.set()
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:
            return False

    async def _group_commit_loop(self) -> None:
        while self._running:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._waiters:
                waiters = self._waiters
                self._waiters = []
                try:
                    flushed = await self.flush_commit_log()
                    ok = True
                except OSError as exc:
                    log.error("commit log flush failed: %s", exc)
                    flushed, ok = self.commit_log_flushed_offset, False
                for offset, fut in waiters:
                    if not fut.done():
                        fut.set_result(ok and flushed >= offset)

    # -- consume queues, index, checkpoint ---------------------------------------
    async def flush_logics(self) -> None:
        """Flush CQ and index files, then persist the checkpoint."""
        store = self.store
        last_ts = store.last_store_timestamp
        cq_dirty = [(mf, mf.wrote_position) for cq in store.iter_consume_queues() for mf in cq.dirty_files()]
        index_dirty = [(f, f.index_count) for f in store.index.dirty_files()] if store.index else []
        loop = asyncio.get_running_loop()
        if cq_dirty or index_dirty:
            files = [mf for mf, _ in cq_dirty] + [f for f, _ in index_dirty]
            await loop.run_in_executor(self._logic_executor, _sync_files, files)
            for mf, pos in cq_dirty:
                if mf.flushed_position < pos:
                    mf.flushed_position = pos
            for f, count in index_dirty:
                f.flushed_count = count
        cp = store.checkpoint
        if last_ts > cp.logics_msg_timestamp:
            cp.logics_msg_timestamp = last_ts
        if last_ts > cp.index_msg_timestamp:
            cp.index_msg_timestamp = last_ts
        await loop.run_in_executor(self._logic_executor, cp.save)

    async def _every(self, interval_ms: int, flush, what: str) -> None:
        """Run ``flush`` every ``interval_ms`` until stopped; a failed flush is logged and retried next time."""
        interval = max(0.001, interval_ms / 1000)
        while self._running:
            await asyncio.sleep(interval)
            try:
                await flush()
            except OSError as exc:
                log.error("%s flush failed: %s", what, exc)
