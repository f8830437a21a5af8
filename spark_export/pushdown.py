"""Filters Spark pushes into the `rocketmq` source (DataSourceReader.pushFilters), and what they let a read skip.

When a reader may take filters at all (:func:`pushed_reads_stay_with_their_scan`): Spark plans the read (partitions
and read function) in the same Python call that pushes the filters, and Spark 4.1-4.3 keep that read on the
*relation* (PythonScanBuilder.pushFilters -> PythonDataSourceV2.setReadInfo), i.e. on every DataFrame derived from
one ``load()``. Every later scan of the relation that pushes no filter Python can take (no filter; only ORs or
functions; pushdown switched off meanwhile) reuses it, and so does every scan of a query that scans the relation
twice (a union, a self-join: the last scan to push wins). No information reaches read() that tells those scans
apart, and Spark reuses the read whatever pushFilters returned (returning every filter as unsupported does not
help). So on those versions a reader must not narrow its read: it does not override pushFilters, and narrowing
comes only from the options (``topics``), which belong to the relation and so hold for all its scans.

Where a Spark keeps the read with the scan that pushed, a query's filters are read into a :class:`Pushdown` (sets
and inclusive ranges per column). The filters the reader takes narrow what is read, and the reader applies each of
them exactly to the rows it returns (Spark trusts a pushed filter and does not apply it again); the others are
left to Spark. So a pushed query returns exactly the rows the same query returns unpushed. What a read can skip:

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

__all__ = ["Bounds", "Pushdown", "collect_filters", "read_filter_mask", "pushdown_requested", "reader_takes_filters",
           "pushed_reads_stay_with_their_scan", "SCAN_SCOPED_READS_SINCE", "java_string_hash"]

_PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"
_INT_COLUMNS = ("queue_id", "queue_offset", "commitlog_offset")
_SET_COLUMNS = {"topic": "topics", "tags": "tags", "keys": "keys", "uniq_key": "uniq_keys"}
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")

# The first Spark (major, minor) checked to keep the read planned by filter pushdown with the scan that pushed the
# filters (tests/spark/test_spark_pushdown_reuse.py passes there with narrowing on). None: no released Spark does:
# 4.1-4.3 keep it on the relation. (apache/spark master keeps it in PythonScanBuilder since its limit-pushdown
# change, SPARK-58551, meant for 5.0.0: set this once a release is checked.)
SCAN_SCOPED_READS_SINCE: tuple[int, int] | None = None


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
    """An aware datetime (Spark's TimestampType filter value) as epoch ms; None for anything else."""
    if isinstance(value, _dt.datetime) and value.tzinfo is not None:
        return int(value.timestamp() * 1000)
    return None


_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_RANGES = {"queue_id": _INT32, "queue_offset": _INT64, "commitlog_offset": _INT64}
_FILTER_TABLES = ("messages", "consume_queue")


def _int_value(column: str, value: Any) -> bool:
    low, high = _RANGES[column]
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def collect_filters(filters: Iterable[Any], table: str, columns: Iterable[str]) -> tuple[Pushdown, list, list]:
    """(Pushdown, handled filters, filters left to Spark).

    A filter is handled when the reader can apply it exactly to the rows it decodes (its column is produced, its
    value has the column's type): EqualTo / In on topic, tags, keys, uniq_key, queue_id; ranges (>, >=, <, <=)
    and EqualTo on queue_id, queue_offset, commitlog_offset and store_timestamp. Only handled filters narrow the
    read, and the reader applies each of them to the rows it returns (read_filter_mask): Spark trusts a pushed
    filter and does not apply it again."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

    produced = set(columns)
    push = Pushdown()
    handled: list = []
    rest: list = []
    for f in filters:
        path = getattr(f, "attribute", ())
        column = path[0] if len(path) == 1 else None
        if table not in _FILTER_TABLES or column not in produced:
            rest.append(f)
            continue
        before = push
        if isinstance(f, (EqualTo, In)):
            values = (f.value,) if isinstance(f, EqualTo) else tuple(f.value)
            if not values or any(v is None for v in values):
                pass
            elif column in _SET_COLUMNS and all(isinstance(v, str) for v in values):
                name = _SET_COLUMNS[column]
                current = getattr(push, name)
                new = frozenset(values)
                push = replace(push, **{name: new if current is None else current & new})
            elif column == "queue_id" and all(_int_value(column, v) for v in values):
                new = frozenset(values)
                push = replace(push, queue_ids=new if push.queue_ids is None else push.queue_ids & new)
            elif column in _RANGES and isinstance(f, EqualTo) and _int_value(column, f.value):
                push = replace(push, **{column: getattr(push, column).narrow(f.value, f.value)})
            elif column == "store_timestamp" and isinstance(f, EqualTo) and _epoch_ms(f.value) is not None:
                ms = _epoch_ms(f.value)
                push = replace(push, store_timestamp_ms=push.store_timestamp_ms.narrow(ms, ms))
        elif isinstance(f, (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
            lower = isinstance(f, (GreaterThan, GreaterThanOrEqual))
            strict = isinstance(f, (GreaterThan, LessThan))
            if column in _RANGES and _int_value(column, f.value):
                bound = f.value + (1 if lower else -1) * strict
                push = replace(push, **{column: getattr(push, column).narrow(bound if lower else None,
                                                                             None if lower else bound)})
            elif column == "store_timestamp" and _epoch_ms(f.value) is not None:
                ms = _epoch_ms(f.value)  # whole ms bounds: inclusive both ways (the exact test is per row)
                push = replace(push, store_timestamp_ms=push.store_timestamp_ms.narrow(
                    ms if lower else None, None if lower else ms + 1))
        (handled if push is not before else rest).append(f)
    return push, handled, rest


def read_filter_mask(batch: Any, filters: list) -> Any:
    """The rows of a decoded RecordBatch that every handled filter keeps (a pyarrow boolean array), or None when
    they all do. Nulls never match, as in Spark."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan

    mask = None
    for f in filters:
        column = batch.column(batch.schema.get_field_index(f.attribute[0]))
        if isinstance(f, In):
            keep = pc.is_in(column, value_set=pa.array(list(f.value), column.type))
        else:
            value = pa.scalar(f.value, column.type)
            if isinstance(f, EqualTo):
                keep = pc.equal(column, value)
            elif isinstance(f, GreaterThan):
                keep = pc.greater(column, value)
            elif isinstance(f, GreaterThanOrEqual):
                keep = pc.greater_equal(column, value)
            elif isinstance(f, LessThan):
                keep = pc.less(column, value)
            else:
                keep = pc.less_equal(column, value)
        keep = pc.fill_null(keep, False)
        mask = keep if mask is None else pc.and_(mask, keep)
    if mask is None or pc.all(mask).as_py():
        return None
    return mask


def pushed_reads_stay_with_their_scan(version: str | None = None) -> bool:
    """Whether this Spark (its pyspark, which runs the planning worker: `version` or pyspark.__version__) keeps a
    pushed read with its scan, so that narrowing a read by the filters of one query cannot answer another."""
    if SCAN_SCOPED_READS_SINCE is None:
        return False
    if version is None:
        import pyspark

        version = pyspark.__version__
    parts = version.split(".")
    try:
        major, minor = int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or "0")
    except (IndexError, ValueError):
        return False  # an unknown version: not checked, so not trusted
    return (major, minor) >= SCAN_SCOPED_READS_SINCE


def reader_takes_filters(option: str) -> bool:
    """Whether the reader for this read takes Spark's filters (a RocketMQFilteringReader). Never on a Spark that
    shares a pushed read between scans (see the module doc): there pushdown=true is refused with one clear error,
    and auto gives the plain reader, whose filters Spark applies."""
    value = (option or "auto").lower()
    if value in _FALSE:
        return False
    if not pushed_reads_stay_with_their_scan():
        if value in _TRUE:
            import pyspark

            raise ValueError(
                f"rocketmq: option pushdown=true is refused on Spark {pyspark.__version__}: it reuses the read "
                "planned for one query's filters in the DataFrame's other queries (wrong answers); leave the "
                "option unset, and narrow the table itself with option topics")
        return False
    return pushdown_requested(value)


def pushdown_requested(option: str) -> bool:
    """Whether the reader should take filters: option pushdown=true/false, or auto (the default): when the session
    allows it (spark.sql.python.filterPushdown.enabled). Spark refuses a reader that takes filters while that
    setting is off, and does not tell the data source its value. It plans the read in one of two Python workers:
    with the setting on, pyspark.sql.worker.data_source_pushdown_filters (which then pushes the filters); with it
    off, plan_data_source_read, which holds the setting in a local variable. `auto` looks at the caller to tell
    (no pushdown when it cannot)."""
    value = (option or "auto").lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
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
    """Java's String.hashCode() as a signed 32-bit int (UTF-16 code units). protocol.hashing has the broker's
    version; spark_export keeps its own because it ships to executors without the project's other packages."""
    h = 0
    data = text.encode("utf-16-le")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] | data[i + 1] << 8)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h
