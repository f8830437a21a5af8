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
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .message_store import MessageStore

log = logging.getLogger(__name__)

# topic -> consumer group -> queue id -> committed offset (the next message the group will consume).
ConsumerOffsetsSource = Callable[[], Mapping[str, Mapping[str, Mapping[int, int]]]]
_REPORT_MAX_GROUPS = 10
_REPORT_MAX_TOPICS = 3


def disk_used_ratio(path: str) -> float:
    """Used space of the file system holding ``path`` in percent (like Java's getTotalSpace-getFreeSpace); a path
    not created yet (the commit log before its first file) is measured at its nearest existing parent."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path)
    except OSError:
        return 0.0
    if st.f_blocks <= 0:
        return 0.0
    return (st.f_blocks - st.f_bfree) * 100.0 / st.f_blocks


class RetentionService:
    """Periodic clean-up task + the synchronous ``clean_once`` it runs."""

    def __init__(self, store: MessageStore, consumer_offsets: ConsumerOffsetsSource | None = None) -> None:
        self.store = store
        self._task: asyncio.Task | None = None
        self.deleted_files_total = 0
        # From the broker: lets a clean-up report the messages it deleted before some group consumed them.
        self.consumer_offsets = consumer_offsets
        self.unconsumed_deleted_total = 0

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
        forced = False
        for mf in mfq.files[:-1]:  # never the file being written
            if len(doomed) >= cfg.delete_files_batch_max:
                break
            expired = now_ms - mf.mtime() * 1000 >= expire_ms
            if expired or forcibly:
                doomed.append(mf)
                forced = forced or not expired
            else:
                break  # only a prefix: never leave holes
        deleted: list[str] = []
        old_mins = {(cq.topic, cq.queue_id): cq.min_offset for cq in store.iter_consume_queues()} if doomed else {}
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
        if doomed:
            reason = ("forced: disk %.1f%% used >= diskSpaceCleanForciblyRatio %d%%"
                      % (used_ratio, cfg.disk_space_clean_forcibly_ratio) if forced else "expired files")
            self._report_unconsumed(doomed, old_mins, reason)
        if unlink:
            _unlink_all(deleted)
        self.deleted_files_total += len(deleted)
        return deleted


    def _report_unconsumed(self, doomed: list, old_mins: dict[tuple[str, int], int], reason: str) -> None:
        """One log line naming the groups (and counts per topic) whose unconsumed messages this clean-up deleted:
        on each queue whose min offset moved up, the messages in [max(committed, old min), new min)."""
        source = self.consumer_offsets
        if source is None:
            return
        advanced: dict[str, dict[int, tuple[int, int]]] = {}
        for cq in self.store.iter_consume_queues():
            old = old_mins.get((cq.topic, cq.queue_id))
            if old is not None and cq.min_offset > old:
                advanced.setdefault(cq.topic, {})[cq.queue_id] = (old, cq.min_offset)
        if not advanced:
            return
        try:
            offsets = source()
        except Exception:  # noqa: BLE001 - a report must never break the clean-up
            log.exception("reading consumer offsets for the clean-up report failed")
            return
        lost: dict[str, dict[str, int]] = {}  # group -> topic -> messages
        for topic, queues in advanced.items():
            for group, committed in (offsets.get(topic) or {}).items():
                for queue_id, (old, new) in queues.items():
                    offset = committed.get(queue_id)
                    if offset is not None and offset < new:
                        per_topic = lost.setdefault(group, {})
                        per_topic[topic] = per_topic.get(topic, 0) + new - max(offset, old)
        if not lost:
            return
        total = sum(sum(t.values()) for t in lost.values())
        self.unconsumed_deleted_total += total
        groups = sorted(lost.items(), key=lambda kv: -sum(kv[1].values()))
        parts = []
        for group, topics in groups[:_REPORT_MAX_GROUPS]:
            listed = sorted(topics.items(), key=lambda kv: -kv[1])
            text = ", ".join("%s: %s" % (t, format(n, ",")) for t, n in listed[:_REPORT_MAX_TOPICS])
            if len(listed) > _REPORT_MAX_TOPICS:
                text += ", %d more topics" % (len(listed) - _REPORT_MAX_TOPICS)
            parts.append("%s (%s)" % (group, text))
        if len(groups) > _REPORT_MAX_GROUPS:
            parts.append("and %d more groups" % (len(groups) - _REPORT_MAX_GROUPS))
        log.warning("retention (%s) deleted commit log %s (%s): %s messages not yet consumed by groups %s",
                    reason, ", ".join(os.path.basename(mf.path) for mf in doomed),
                    _human_size(sum(mf.file_size for mf in doomed)), format(total, ","), ", ".join(parts))


def _human_size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return "%.1f %s" % (size / scale, unit)
    return "%d B" % size


def _unlink_all(paths: list[str]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.error("cannot delete %s: %s", path, exc)
