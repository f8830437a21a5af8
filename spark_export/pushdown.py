"""Filters Spark pushes into the `rocketmq` source (DataSourceReader.pushFilters), and what they let a read skip.

A query's filters are read into a :class:`Pushdown` (sets and inclusive ranges per column). They only ever *narrow
what is read*: every filter is still handed back to Spark, which applies it to the rows read, so a pushed query
returns exactly the rows the same query returns unpushed. What a read can skip:

* ``topic = / IN``: the topic's consume queues say where its records are; only those records are read.
* ``queue_id`` (= / IN / range), ``queue_offset`` and ``commitlog_offset`` ranges, ``tags =``: consume-queue
  units outside them are skipped (tags through the units' tag hash); a ``commitlog_offset`` range also bounds a
  commit-log scan.
* ``keys =`` / ``uniq_key =``: the index files give the records stored under that key (topic#key), which are the
  only ones read.
* ``store_timestamp`` ranges: records outside are dropped before their columns are decoded.
"""

from __future__ import annotations

import datetime as _dt
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

import numpy as np

__all__ = ["Bounds", "Pushdown", "collect_filters", "pushdown_requested", "java_string_hash"]

_PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"
_INT_COLUMNS = ("queue_id", "queue_offset", "commitlog_offset")
_SET_COLUMNS = {"topic": "topics", "tags": "tags", "keys": "keys", "uniq_key": "uniq_keys"}


@dataclass(frozen=True, slots=True)
class Bounds:
    """An inclusive range; None = unbounded on that side."""

    lo: int | None = None
    hi: int | None = None

    def narrow(self, lo: int | None = None, hi: int | None = None) -> "Bounds":
        new_lo = self.lo if lo is None else (lo if self.lo is None else max(self.lo, lo))
        new_hi = self.hi if hi is None else (hi if self.hi is None else min(self.hi, hi))
        return Bounds(new_lo, new_hi)

    @property
    def empty(self) -> bool:
        return self.lo is not None and self.hi is not None and self.lo > self.hi

    @property
    def bounded(self) -> bool:
        return self.lo is not None or self.hi is not None

    def mask(self, values: np.ndarray) -> np.ndarray:
        keep = np.ones(len(values), bool)
        if self.lo is not None:
            keep &= values >= self.lo
        if self.hi is not None:
            keep &= values <= self.hi
        return keep


@dataclass(frozen=True, slots=True)
class Pushdown:
    """What the pushed filters of one query allow (all of them hold together: AND)."""

    topics: frozenset[str] | None = None
    tags: frozenset[str] | None = None
    keys: frozenset[str] | None = None
    uniq_keys: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    queue_id: Bounds = field(default_factory=Bounds)
    queue_offset: Bounds = field(default_factory=Bounds)
    commitlog_offset: Bounds = field(default_factory=Bounds)
    store_timestamp_ms: Bounds = field(default_factory=Bounds)

    @property
    def nothing(self) -> bool:
        """The filters contradict each other: no row can match."""
        return (any(s is not None and not s for s in (self.topics, self.tags, self.keys, self.uniq_keys,
                                                       self.queue_ids))
                or any(b.empty for b in (self.queue_id, self.queue_offset, self.commitlog_offset,
                                         self.store_timestamp_ms)))

    @property
    def any(self) -> bool:
        return self != Pushdown()

    def queue_allowed(self, queue_id: int) -> bool:
        if self.queue_ids is not None and queue_id not in self.queue_ids:
            return False
        return not ((self.queue_id.lo is not None and queue_id < self.queue_id.lo)
                    or (self.queue_id.hi is not None and queue_id > self.queue_id.hi))

    def with_topics(self, topics: frozenset[str] | None) -> "Pushdown":
        """Intersected with the `topics` option."""
        if topics is None:
            return self
        return replace(self, topics=topics if self.topics is None else self.topics & topics)

    @property
    def row_bounds(self) -> bool:
        """Whether rows can be dropped by header fields before decoding."""
        return (self.queue_ids is not None or self.queue_id.bounded or self.queue_offset.bounded
                or self.commitlog_offset.bounded or self.store_timestamp_ms.bounded)


def _epoch_ms(value: Any) -> int | None:
    """A timestamp filter value as epoch ms (naive datetimes are taken as UTC)."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return int(value.timestamp() * 1000)
    if isinstance(value, _dt.date):
        return int(_dt.datetime(value.year, value.month, value.day, tzinfo=_dt.timezone.utc).timestamp() * 1000)
    return None


# Naive datetimes may be in the session's time zone rather than UTC: timestamp bounds are widened by this much so
# that they never drop a row (Spark applies the exact filter afterwards).
_TZ_SLACK_MS = 26 * 3600 * 1000


def collect_filters(filters: Iterable[Any]) -> Pushdown:
    """The Pushdown of Spark's pushed filters (EqualTo, In, GreaterThan(OrEqual), LessThan(OrEqual) on the
    columns above; anything else narrows nothing)."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

    push = Pushdown()
    for f in filters:
        path = getattr(f, "attribute", ())
        if len(path) != 1:
            continue
        column = path[0]
        if isinstance(f, (EqualTo, In)):
            values = (f.value,) if isinstance(f, EqualTo) else tuple(f.value)
            if any(v is None for v in values):
                continue
            if column in _SET_COLUMNS and all(isinstance(v, str) for v in values):
                name = _SET_COLUMNS[column]
                current = getattr(push, name)
                new = frozenset(values)
                push = replace(push, **{name: new if current is None else current & new})
            elif column == "queue_id" and all(isinstance(v, int) for v in values):
                new = frozenset(values)
                push = replace(push, queue_ids=new if push.queue_ids is None else push.queue_ids & new)
            elif column in _INT_COLUMNS and isinstance(f, EqualTo) and isinstance(f.value, int):
                push = replace(push, **{column: getattr(push, column).narrow(f.value, f.value)})
            elif column == "store_timestamp" and isinstance(f, EqualTo):
                ms = _epoch_ms(f.value)
                if ms is not None:
                    push = replace(push, store_timestamp_ms=push.store_timestamp_ms.narrow(
                        ms - _TZ_SLACK_MS, ms + _TZ_SLACK_MS))
            continue
        lower = isinstance(f, (GreaterThan, GreaterThanOrEqual))
        if not lower and not isinstance(f, (LessThan, LessThanOrEqual)):
            continue
        strict = isinstance(f, (GreaterThan, LessThan))
        if column in _INT_COLUMNS and isinstance(f.value, int) and not isinstance(f.value, bool):
            bound = f.value + (1 if lower else -1) * strict
            push = replace(push, **{column: getattr(push, column).narrow(bound if lower else None,
                                                                         None if lower else bound)})
        elif column == "store_timestamp":
            ms = _epoch_ms(f.value)
            if ms is not None:
                bound = ms - _TZ_SLACK_MS if lower else ms + _TZ_SLACK_MS
                push = replace(push, store_timestamp_ms=push.store_timestamp_ms.narrow(
                    bound if lower else None, None if lower else bound))
    return push


def pushdown_requested(option: str) -> bool:
    """Whether the reader should take filters: option pushdown=true/false, or auto (the default): when the session
    allows it (spark.sql.python.filterPushdown.enabled). Spark refuses a reader that takes filters while that
    setting is off, and does not tell the data source its value. It plans the read in one of two Python workers:
    with the setting on, pyspark.sql.worker.data_source_pushdown_filters (which then pushes the filters); with it
    off, plan_data_source_read, which holds the setting in a local variable. `auto` looks at the caller to tell
    (no pushdown when it cannot)."""
    value = (option or "auto").lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            break
        if frame.f_globals.get("__name__") == _PUSHDOWN_WORKER:
            return True
        enabled = frame.f_locals.get("enable_pushdown")
        if isinstance(enabled, bool):
            return enabled
        frame = frame.f_back
    return False


def java_string_hash(text: str) -> int:
    """Java's String.hashCode() as a signed 32-bit int (UTF-16 code units)."""
    h = 0
    data = text.encode("utf-16-le")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] | data[i + 1] << 8)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h
