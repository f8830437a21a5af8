"""The store directory as files to read: commit-log byte ranges, consume-queue files, config JSON tables.

Pure Python + numpy (no Spark): planning happens here, reading in spark_export.records and spark_export.decode.
Files are opened read-only and memory-mapped; nothing is ever written.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "StoreError", "StoreLayout", "CommitLogRange", "ConsumeQueueFile", "open_store", "mapped",
    "plan_commit_log_partitions", "data_extent", "pack_ranges", "load_config_json", "offset_rows", "topic_rows",
]

_NAME = re.compile(r"^\d{20}$")


class StoreError(Exception):
    """The directory is not a RocketMQ store, or a file in it is unreadable."""


@dataclass(frozen=True, slots=True)
class CommitLogRange:
    """Records of one commit-log file whose start lies in [begin, end) (file positions)."""

    path: str
    base: int
    begin: int
    end: int
    synced: bool  # begin is known to be a record start (file start or a stream offset)


@dataclass(frozen=True, slots=True)
class ConsumeQueueFile:
    path: str
    base: int
    topic: str
    queue_id: int
    size: int


@dataclass(frozen=True, slots=True)
class StoreLayout:
    root: str
    commit_log_dir: str
    commit_log_files: tuple[tuple[int, str, int], ...]  # (base offset, path, size), by offset
    broker: str = ""  # the brokerName that wrote the store (spark_export.brokers)

    @property
    def config_dir(self) -> str:
        return os.path.join(self.root, "config")

    def consume_queue_files(self, topics: frozenset[str] | None = None) -> list[ConsumeQueueFile]:
        root = Path(self.root, "consumequeue")
        out: list[ConsumeQueueFile] = []
        if not root.is_dir():
            return out
        for topic_dir in sorted(root.iterdir()):
            if not topic_dir.is_dir() or (topics is not None and topic_dir.name not in topics):
                continue
            for queue_dir in sorted(topic_dir.iterdir(), key=lambda d: (len(d.name), d.name)):
                if not queue_dir.is_dir() or not queue_dir.name.lstrip("-").isdigit():
                    continue
                for f in _numbered_files(queue_dir):
                    out.append(ConsumeQueueFile(str(f[1]), f[0], topic_dir.name, int(queue_dir.name), f[2]))
        return out


def _numbered_files(directory: Path) -> list[tuple[int, Path, int]]:
    files = []
    for entry in directory.iterdir():
        if _NAME.match(entry.name) and entry.is_file():
            files.append((int(entry.name), entry, entry.stat().st_size))
    files.sort()
    return files


def open_store(root: str, commit_log_dir: str | None = None) -> StoreLayout:
    """Check that `root` looks like a store (a commitlog directory of 20-digit files) and list its files."""
    root_path = Path(root)
    if not root_path.is_dir():
        raise StoreError(f"{root}: no such directory")
    log_dir = Path(commit_log_dir) if commit_log_dir else root_path / "commitlog"
    if not log_dir.is_dir():
        raise StoreError(f"{root} is not a RocketMQ store: {log_dir} is missing "
                         "(expected commitlog/, consumequeue/, config/ under the store root)")
    files = tuple((base, str(path), size) for base, path, size in _numbered_files(log_dir))
    return StoreLayout(str(root_path), str(log_dir), files)


@contextmanager
def mapped(path: str) -> Iterator[np.ndarray]:
    """The file as a read-only np.uint8 array over an mmap (empty array for an empty file)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield np.empty(0, np.uint8)
            return
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        try:
            yield np.frombuffer(mm, np.uint8)
        finally:
            try:
                mm.close()
            except BufferError:  # an array still references it; the GC unmaps it later
                pass


def plan_commit_log_partitions(layout: StoreLayout, split_bytes: int, min_partitions: int = 1,
                               start_offset: int | None = None,
                               end_offset: int | None = None, *,
                               start_synced: bool = True) -> list[list[CommitLogRange]]:
    """Partitions (lists of byte ranges) over the commit-log files, global offsets [start, end) if given.

    The written data (estimated by :func:`data_extent`) is shared evenly: max(min_partitions,
    ceil(data / split_bytes)) partitions of about equal bytes, cutting across files. The estimate only
    balances the work: the last range of every file runs to the file's end (or `end_offset`), where the
    record chain itself stops at the first incomplete record, so no record depends on the estimate.
    """
    segments: list[tuple[str, int, int, int, int]] = []  # (path, base, lo, data_hi, hard_hi)
    for base, path, size in layout.commit_log_files:
        lo, hard = 0, size
        if start_offset is not None:
            if base + size <= start_offset:
                continue
            lo = max(0, start_offset - base)
        if end_offset is not None:
            if base >= end_offset:
                break
            hard = min(size, end_offset - base)
        if lo >= hard:
            continue
        data_hi = min(hard, max(lo, data_extent(path, size)))
        segments.append((path, base, lo, data_hi, hard))
    if not segments:
        return []
    total = sum(s[3] - s[2] for s in segments)
    # at least min_partitions (but not below 64 KiB each), at most split_bytes each
    count = max(1, -(-total // max(1, split_bytes)), min(min_partitions, total >> 16))
    cuts = [total * k // count for k in range(count + 1)]  # partition k covers data bytes [cuts[k], cuts[k+1])
    parts: list[list[CommitLogRange]] = [[] for _ in range(count)]
    done = 0  # data bytes of the segments before this one
    for path, base, lo, data_hi, hard in segments:
        length = data_hi - lo
        k = 0
        while k < count - 1 and cuts[k + 1] <= done:
            k += 1
        pos = lo
        while True:
            stop = lo + max(0, cuts[k + 1] - done) if k < count - 1 else hard
            if stop >= data_hi:
                stop = hard
            if stop > pos:
                # a range's start is a record start at a file's start, or at start_offset when the caller says so
                synced = pos == lo and (lo == 0 or start_offset is None or start_synced)
                parts[k].append(CommitLogRange(path, base, pos, stop, synced))
            if stop >= hard:
                break
            pos = stop
            k += 1
        done += length
    return [p for p in parts if p]


def _allocated_end(fd: int, size: int) -> int:
    """End of the last data extent of a (possibly sparse) file; `size` where holes are not reported."""
    pos = 0
    try:
        for _ in range(1 << 14):
            data = os.lseek(fd, pos, os.SEEK_DATA)
            pos = os.lseek(fd, data, os.SEEK_HOLE)
            if pos >= size:
                return size
    except OSError as exc:
        return min(pos, size) if exc.errno == errno.ENXIO else size  # ENXIO: only holes after pos
    return size


def data_extent(path: str, size: int, probe: int = 64 << 10) -> int:
    """About where the written data of a commit-log file ends (the rest is the pre-allocated zero tail).

    Cheap on a 1 GiB file: the end of the last allocated extent of a sparse file (SEEK_DATA/SEEK_HOLE),
    then a binary search for the first all-zero `probe`-byte window (the data is a prefix) and the exact last
    non-zero byte before it. A zero window inside the data can make the estimate short; it is only used to
    share the work between partitions (see :func:`plan_commit_log_partitions`).
    """
    if size <= 0:
        return 0
    end = size
    if hasattr(os, "SEEK_DATA"):
        with open(path, "rb") as f:
            end = _allocated_end(f.fileno(), size)
    if end <= 0:
        return 0
    with mapped(path) as buf:
        windows = -(-end // probe)
        if not buf[:min(end, probe)].any():
            return 0
        lo, hi = 1, windows  # window lo-1 has data; windows >= hi are taken as zero
        while lo < hi:
            mid = (lo + hi) // 2
            if buf[mid * probe: min(end, (mid + 1) * probe)].any():
                lo = mid + 1
            else:
                hi = mid
        part = buf[(lo - 1) * probe: min(end, lo * probe)]
        return (lo - 1) * probe + int(np.flatnonzero(part)[-1]) + 1


def pack_ranges(items: list, weights: list[int], target: int, min_groups: int = 1) -> list[list]:
    """Group consecutive items so each group weighs about `target` (small files share one partition)."""
    total = sum(weights)
    if min_groups > 1 and total:
        target = max(1, min(target, -(-total // min_groups)))
    groups: list[list] = []
    current: list = []
    weight = 0
    for item, w in zip(items, weights):
        if current and weight + w > target:
            groups.append(current)
            current, weight = [], 0
        current.append(item)
        weight += w
    if current:
        groups.append(current)
    return groups


# --- config/*.json ------------------------------------------------------------------------------------------------

_BARE_INT_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)', re.DOTALL)


def load_config_json(path: str) -> dict | None:
    """A fastjson config file (bare integer map keys allowed); None when absent. Falls back to `.bak`."""
    for candidate in (path, path + ".bak"):
        if not os.path.exists(candidate):
            continue
        with open(candidate, encoding="utf-8") as f:
            text = f.read()
        if not text.strip():
            continue
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            fixed = _BARE_INT_KEY.sub(lambda m: m.group(0) if m.group(2) is None
                                      else f'{m.group(1)}"{m.group(2)}"{m.group(3)}', text)
            try:
                return json.loads(fixed)
            except json.JSONDecodeError as exc:
                raise StoreError(f"{candidate}: not valid JSON ({exc})") from None
    return None


def offset_rows(layout: StoreLayout, topics: frozenset[str] | None = None) -> list[tuple[str, str, int, int]]:
    """(topic, group, queue_id, offset) from config/consumerOffset.json ("topic@group" keys)."""
    doc = load_config_json(os.path.join(layout.config_dir, "consumerOffset.json")) or {}
    rows = []
    for key, queues in sorted((doc.get("offsetTable") or {}).items()):
        topic, _, group = key.partition("@")
        if topics is not None and topic not in topics:
            continue
        for queue_id, offset in sorted((queues or {}).items(), key=lambda kv: int(kv[0])):
            rows.append((topic, group, int(queue_id), int(offset)))
    return rows


def topic_rows(layout: StoreLayout, topics: frozenset[str] | None = None) -> list[tuple]:
    """One row per topic of config/topics.json (schema TOPICS_FIELDS)."""
    doc = load_config_json(os.path.join(layout.config_dir, "topics.json")) or {}
    rows = []
    for name, cfg in sorted((doc.get("topicConfigTable") or {}).items()):
        if topics is not None and name not in topics:
            continue
        cfg = cfg or {}
        rows.append((
            cfg.get("topicName") or name,
            int(cfg.get("readQueueNums", 16)),
            int(cfg.get("writeQueueNums", 16)),
            int(cfg.get("perm", 6)),
            str(cfg.get("topicFilterType", "SINGLE_TAG")),
            int(cfg.get("topicSysFlag", 0)),
            bool(cfg.get("order", False)),
            [(str(k), str(v)) for k, v in (cfg.get("attributes") or {}).items()],
        ))
    return rows
