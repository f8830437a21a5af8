"""File mode of the `rocketmq` source: a broker's store directory (or several) read from disk, batch and streaming.

Several store directories (a list, which Spark passes as the option `paths`, a JSON array; or a comma-separated
path) are read as one table, one directory per brokerName (spark_export.brokers: replicas are read once).

Planning (partitions) runs in a Python worker next to the driver; read() runs on executors, so the store
directory must be visible at the same path there (a local disk for local[*]/local-cluster, a shared
filesystem for a cluster). Reads are read-only and stop at the end of complete data, so a live store is safe.
Imported only when a read is in file mode (spark_export.datasource): its decoder loads numba.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from spark_export.brokers import resolve_stores
from spark_export.decode import DecodeOptions, decode_consume_queue, iter_message_batches
from spark_export.index_files import lookup_offsets
import spark_export.pushdown as _pushdown  # looked up per call: tests switch the version gate
from spark_export.pushdown import Pushdown, collect_filters, read_filter_mask
from spark_export.records import DEFAULT_BATCH_ROWS, ChainEnd, locate_records
from spark_export.schema import OFFSETS_ARROW, TOPICS_ARROW
from spark_export.store import (
    StoreError,
    StoreLayout,
    mapped,
    offset_rows,
    pack_ranges,
    plan_commit_log_partitions,
    topic_rows,
)
from spark_export.targeted import consume_queue_offsets, group_by_file, known_topics, read_records

try:  # Spark >= 4.2: read limits and Trigger.AvailableNow for Python streaming sources
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older Spark 4.x
    ReadMaxRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

__all__ = ["ReadOptions", "RocketMQReader", "RocketMQFilteringReader", "RocketMQStreamReader", "current_end_offset",
           "scan_forward"]

_TRUE = {"true", "1", "yes", "on"}

@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Data source options (all strings in Spark; parsed once on the planning side)."""

    paths: tuple[str, ...]  # store directories
    table: str = "messages"
    topics: frozenset[str] | None = None
    include_body: bool = True
    decompress: bool = True
    split_bytes: int = 256 << 20
    min_partitions: int = 2
    batch_rows: int = DEFAULT_BATCH_ROWS
    commit_log_dir: str | None = None
    starting_offset: str = "earliest"
    max_records_per_trigger: int | None = None
    columns: tuple[str, ...] | None = None  # read only these columns (the API has no automatic pruning)
    pushdown: str = "auto"  # take Spark's filters: auto (when the session allows it), true, false
    index_hash_slots: int | None = None  # hash slots per index file (maxHashSlotNum) when not the usual ratio
    broker_names: tuple[str, ...] | None = None  # brokerName per directory of `paths` ("": found in the store)

    @classmethod
    def parse(cls, options) -> "ReadOptions":
        opts = {str(k).lower(): v for k, v in dict(options).items()}
        paths, broker_names = _store_paths(opts)
        if len(paths) > 1 and opts.get("commitlog_dir"):
            raise ValueError("rocketmq: option commitlog_dir is for a single store directory; "
                             f"{len(paths)} were given")
        topics = opts.get("topics")
        topic_set = frozenset(t.strip() for t in topics.split(",") if t.strip()) if topics else None
        max_rows = opts.get("maxrecordspertrigger") or opts.get("max_records_per_trigger")
        columns = opts.get("columns")
        column_list = tuple(c.strip() for c in columns.split(",") if c.strip()) if columns else None
        return cls(
            paths=paths,
            broker_names=broker_names,
            table=opts.get("table", "messages").lower(),
            topics=topic_set,
            include_body=str(opts.get("include_body", "true")).lower() in _TRUE,
            decompress=str(opts.get("decompress", "true")).lower() in _TRUE,
            split_bytes=int(opts.get("split_bytes", 256 << 20)),
            min_partitions=int(opts.get("min_partitions", 2)),
            batch_rows=int(opts.get("batch_rows", DEFAULT_BATCH_ROWS)),
            commit_log_dir=opts.get("commitlog_dir") or None,
            starting_offset=str(opts.get("startingoffset") or opts.get("starting_offset") or "earliest").lower(),
            max_records_per_trigger=int(max_rows) if max_rows else None,
            columns=column_list,
            pushdown=str(opts.get("pushdown", "auto")),
            index_hash_slots=int(opts["index_hash_slots"]) if opts.get("index_hash_slots") else None,
        )

    def layouts(self) -> list[StoreLayout]:
        """The stores to read, each with its brokerName, one per brokerName (StoreError for a bad one)."""
        return resolve_stores(self.paths, self.broker_names, self.commit_log_dir)

    def require_single_store(self) -> None:
        """Streaming offsets are one commit log's positions: a stream reads one store directory."""
        if len(self.paths) != 1:
            raise ValueError(f"rocketmq streaming reads one store directory; {len(self.paths)} were given "
                             f"({', '.join(self.paths)}): start one stream per broker")

    def layout(self) -> StoreLayout:
        """The single store of a streaming read."""
        self.require_single_store()
        return self.layouts()[0]


def _store_paths(opts: dict) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """(store directories, their brokerNames or None) from the options path (comma-separated), paths (a JSON array:
    what Spark passes for .load([...])), brokerName (one directory) and brokerNames (comma-separated, one per
    directory, "" = found in the store). A directory given twice is read once."""
    given: list[str] = []
    listed = opts.get("paths")
    if listed:
        try:
            values = json.loads(listed)
        except (TypeError, ValueError):
            values = None
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ValueError(f"rocketmq: option paths must be a JSON array of store directories, got {listed[:80]!r}")
        given += [v.strip() for v in values]
    if opts.get("path"):
        given += [p.strip() for p in str(opts["path"]).split(",")]
    given = [p for p in given if p]
    if not given:
        raise ValueError("rocketmq: give the store directory, e.g. .load('/path/to/store'), or several: "
                         ".load(['/a/store', '/b/store'])")
    one, many = opts.get("brokername"), opts.get("brokernames")
    if one and many:
        raise ValueError("rocketmq: give either brokerName (one store directory) or brokerNames (one per directory)")
    names: list[str] | None = None
    if one:
        if len(given) > 1:
            raise ValueError(f"rocketmq: option brokerName names the broker of one store directory; {len(given)} "
                             "were given: use brokerNames (comma-separated, one per directory, in order)")
        names = [str(one).strip()]
    elif many:
        names = [n.strip() for n in str(many).split(",")]
        if len(names) != len(given):
            raise ValueError(f"rocketmq: option brokerNames has {len(names)} name(s) for {len(given)} store "
                             f"directories ({', '.join(given)}): give one per directory, in order (empty: found "
                             "in the store)")
    paths: list[str] = []
    kept: list[str] = []
    seen: set[str] = set()
    for k, path in enumerate(given):
        key = os.path.normpath(os.path.abspath(path))
        if key not in seen:
            seen.add(key)
            paths.append(path)
            kept.append(names[k] if names else "")
    return tuple(paths), (tuple(kept) if names else None)


@dataclass(frozen=True)
class _Partition(InputPartition):
    kind: str
    items: tuple = field(default_factory=tuple)
    broker: str = ""  # the brokerName of the store the items belong to


class RocketMQReader(DataSourceReader):
    push = Pushdown()  # what the query's filters allow to skip (RocketMQFilteringReader fills it)
    handled: tuple = ()  # the filters this reader applies itself (Spark does not apply them again)

    def __init__(self, options: ReadOptions, arrow_schema: pa.Schema) -> None:
        self.options = options
        self.arrow_schema = arrow_schema

    def partitions(self) -> list[InputPartition]:
        opts = self.options
        try:
            layouts = opts.layouts()
        except StoreError as exc:
            raise ValueError(str(exc)) from None
        push = self.push.with_topics(opts.topics)
        if push.nothing:
            return [_Partition("empty")]
        # min_partitions is for the whole read: shared between the stores
        per_store = replace(opts, min_partitions=max(1, -(-opts.min_partitions // len(layouts))))
        parts = [p for layout in layouts for p in _store_partitions(layout, per_store, push)]
        return parts or [_Partition("empty")]

    def read(self, partition: _Partition) -> Iterator[pa.RecordBatch]:
        batches = _read_partition(partition, self.options, self.arrow_schema,
                                  self.push.with_topics(self.options.topics))
        if not self.handled:
            return batches
        return _exactly(batches, list(self.handled))


def _exactly(batches: Iterator[pa.RecordBatch], handled: list) -> Iterator[pa.RecordBatch]:
    """The rows of each batch that every handled filter keeps (the read itself is a superset)."""
    for batch in batches:
        mask = read_filter_mask(batch, handled)
        if mask is not None:
            batch = batch.filter(mask)
        if batch.num_rows:
            yield batch


class RocketMQFilteringReader(RocketMQReader):
    """The reader when the session pushes filters (spark.sql.python.filterPushdown.enabled=true) on a Spark that
    keeps a pushed read with its scan (spark_export.pushdown.pushed_reads_stay_with_their_scan). The rule it
    follows: the filters it takes decide what partitions() and read() return, so it takes none where Spark could
    hand this read to another scan."""

    def pushFilters(self, filters):
        """Take the filters the reader can apply exactly (they also narrow what is read); return the others,
        which Spark applies. Where Spark shares a pushed read between scans: take none, change nothing."""
        if not _pushdown.pushed_reads_stay_with_their_scan():
            return list(filters)
        push, handled, rest = collect_filters(list(filters), self.options.table, self.arrow_schema.names)
        self.push = push
        self.handled = tuple(handled)
        return rest


_RECORDS_PER_SET = 262_144


def _store_partitions(layout: StoreLayout, opts: ReadOptions, push: Pushdown) -> list[InputPartition]:
    """The partitions of one store for the table read."""
    broker = layout.broker
    if opts.table == "messages":
        return _planned_message_partitions(layout, opts, push)
    if opts.table == "consume_queue":
        files = [f for f in layout.consume_queue_files(push.topics) if push.queue_allowed(f.queue_id)]
        groups = pack_ranges(files, [max(f.size, 1) for f in files], opts.split_bytes, opts.min_partitions)
        return [_Partition("consume_queue", tuple(g), broker) for g in groups]
    if opts.table in ("offsets", "topics"):
        rows = offset_rows(layout, push.topics) if opts.table == "offsets" else topic_rows(layout, push.topics)
        return [_Partition(opts.table, tuple((row[0], broker, *row[1:]) for row in rows), broker)]
    raise ValueError(f"unknown table {opts.table!r}")


def _planned_message_partitions(layout: StoreLayout, opts: ReadOptions, push: Pushdown) -> list[InputPartition]:
    """Through the index (a key), the consume queues (topics), else a commit-log scan bounded by offsets."""
    keys = _index_keys(push)
    if keys:
        topics = sorted(push.topics) if push.topics is not None else known_topics(layout)
        offsets = lookup_offsets(layout, topics, keys, opts.index_hash_slots)
        if offsets is not None:
            found = np.array(offsets, np.int64)
            return _record_partitions(layout, found[push.commitlog_offset.mask(found)], opts)
    if push.topics is not None and push.topics <= set(known_topics(layout)):
        return _record_partitions(layout, consume_queue_offsets(layout, push.topics, push), opts)
    bounds = push.commitlog_offset
    return _message_partitions(layout, opts, bounds.lo, None if bounds.hi is None else bounds.hi + 1)


def _index_keys(push: Pushdown) -> list[str]:
    """Keys to look up: each UNIQ_KEY, and for a KEYS value ("k1 k2", indexed under each key) its first key; none
    when a value cannot be found through the index (empty)."""
    keys: set[str] = set()
    for value in push.uniq_keys or ():
        if not value:
            return []
        keys.add(value)
    for value in push.keys or ():
        parts = value.split()
        if not parts:
            return []
        keys.add(parts[0])
    return sorted(keys)


def _record_partitions(layout: StoreLayout, offsets: np.ndarray, opts: ReadOptions) -> list[InputPartition]:
    """Records at known offsets, shared evenly between min_partitions partitions (at most _RECORDS_PER_SET
    records per set)."""
    per_set = min(_RECORDS_PER_SET, max(1, -(-len(offsets) // max(1, opts.min_partitions))))
    sets = group_by_file(layout, offsets, per_set)
    if not sets:
        return []
    weights = [len(rs.positions) for rs in sets]
    groups = pack_ranges(sets, weights, max(1, sum(weights) // max(1, opts.min_partitions)) + 1, opts.min_partitions)
    return [_Partition("records", tuple(g), layout.broker) for g in groups]


def _message_partitions(layout: StoreLayout, opts: ReadOptions, start: int | None = None,
                        end: int | None = None, *, start_is_record: bool = False) -> list[InputPartition]:
    groups = plan_commit_log_partitions(layout, opts.split_bytes, opts.min_partitions, start, end,
                                        start_synced=start is None or start_is_record)
    return [_Partition("messages", tuple(g), layout.broker) for g in groups]


def _read_partition(partition: _Partition, opts: ReadOptions, schema: pa.Schema,
                    push: Pushdown | None = None) -> Iterator[pa.RecordBatch]:
    if partition.kind == "records":
        decode = DecodeOptions(opts.include_body, opts.decompress, push.topics if push else opts.topics, schema,
                               push if push is not None and push.row_bounds else None, partition.broker)
        yield from read_records(partition.items, decode, opts.batch_rows)
    elif partition.kind == "messages":
        rows = push if push is not None and push.row_bounds else None
        decode = DecodeOptions(opts.include_body, opts.decompress, push.topics if push else opts.topics, schema,
                               rows, partition.broker)
        for r in partition.items:
            with mapped(r.path) as buf:
                yield from iter_message_batches(buf, r.base, r.begin, r.end, decode, synced=r.synced,
                                                batch_rows=opts.batch_rows)
    elif partition.kind == "consume_queue":
        for f in partition.items:
            with mapped(f.path) as buf:
                batch = decode_consume_queue(buf, f.base, f.topic, f.queue_id, partition.broker)
            if batch.num_rows:
                yield batch.select(schema.names)
    elif partition.kind in ("offsets", "topics"):
        full = OFFSETS_ARROW if partition.kind == "offsets" else TOPICS_ARROW
        columns = list(zip(*partition.items)) if partition.items else [[] for _ in full]
        batch = pa.RecordBatch.from_arrays([pa.array(list(c), f.type) for c, f in zip(columns, full)], schema=full)
        if batch.num_rows:
            yield batch.select(schema.names)


# --- streaming ----------------------------------------------------------------------------------------------------

def scan_forward(layout: StoreLayout, start: int, max_records: int | None = None) -> int:
    """The commit-log offset after the last complete record reachable from `start` (a record/file boundary)."""
    offset = start
    remaining = max_records
    for base, path, size in layout.commit_log_files:
        if base + size <= offset:
            continue
        offset = max(offset, base)
        with mapped(path) as buf:
            starts, pos, why = locate_records(buf, base, offset - base, None, synced=True, max_records=remaining)
        offset = base + pos
        if remaining is not None:
            remaining -= len(starts)
            if remaining <= 0:
                return offset
        if why == ChainEnd.DATA:
            return offset
        offset = base + size  # BLANK marker or exactly full: continue in the next file
    return offset


def current_end_offset(layout: StoreLayout) -> int:
    """End of complete data now: earlier files are finished, so only the last one is scanned."""
    files = layout.commit_log_files
    if not files:
        return 0
    return scan_forward(StoreLayout(layout.root, layout.commit_log_dir, files[-1:]), files[-1][0])


def _earliest(layout: StoreLayout) -> int:
    return layout.commit_log_files[0][0] if layout.commit_log_files else 0


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {"commitlog_offset": N}: the global commit-log position up to which messages were read."""

    def __init__(self, options: ReadOptions, arrow_schema: pa.Schema) -> None:
        self.options = options
        self.arrow_schema = arrow_schema
        self._target: int | None = None
        self._last: int | None = None

    def _layout(self) -> StoreLayout:
        try:
            return self.options.layout()
        except StoreError as exc:
            raise ValueError(str(exc)) from None

    def initialOffset(self) -> dict:
        layout = self._layout()
        where = self.options.starting_offset
        if where == "earliest":
            offset = _earliest(layout)
        elif where == "latest":
            offset = current_end_offset(layout)
        else:
            offset = int(where)
        return {"commitlog_offset": offset}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        begin = start["commitlog_offset"] if start else (self._last if self._last is not None
                                                        else self.initialOffset()["commitlog_offset"])
        max_rows = self.options.max_records_per_trigger
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif limit is not None:
            max_rows = None  # ReadAllAvailable
        end = scan_forward(self._layout(), begin, max_rows)
        if self._target is not None:
            end = max(begin, min(end, self._target))
        self._last = end
        return {"commitlog_offset": end}

    def getDefaultReadLimit(self):
        if ReadMaxRows is not None and self.options.max_records_per_trigger:
            return ReadMaxRows(self.options.max_records_per_trigger)
        return super().getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = current_end_offset(self._layout())

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = start["commitlog_offset"], end["commitlog_offset"]
        if stop <= begin:
            return []
        return _message_partitions(self._layout(), self.options, begin, stop, start_is_record=True)

    def read(self, partition: _Partition) -> Iterator[pa.RecordBatch]:
        return _read_partition(partition, self.options, self.arrow_schema)

    def commit(self, end: dict) -> None:
        pass  # nothing to release: the store is only read
