"""Spark readers of the network mode: batch (`spark.read`) and streaming (`spark.readStream`).

Planning runs on the driver: routes, then offsets of every queue (all requested at once), then one partition per
queue range, or per few small ranges of one brokerName (planning.pack_ranges). Each partition carries everything
its task needs (queues, ranges, replica addresses; the reader holds the options): state of the driver-side reader
never reaches executors. Streaming offsets live only in Spark's checkpoint; nothing is
committed to the broker. No filter is pushed into these readers, so Spark never reuses a narrowed read for
another query (see the file source's pushdown notes).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from spark_export.cluster.options import ClusterOptions
from spark_export.cluster.planning import (Homes, Offsets, Range, from_json, latest_offsets, limit_rows, pack_ranges,
                                           resolve_ends, resolve_starts, split_ranges, starts_past_end, to_json)
from spark_export.cluster.remote import ClusterClient, ClusterReadError, QueueRef

try:  # Spark >= 4.2: read limits and Trigger.AvailableNow for Python streaming sources
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older Spark 4.x
    ReadAllAvailable = ReadMaxRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

__all__ = ["ClusterBatchReader", "ClusterStreamReader", "QueueRange", "QueueRanges"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueRange:
    """Queue offsets [start, end) of (topic, broker, queue_id), and where the replicas were."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int
    addrs: tuple[str, ...]

    @property
    def queue(self) -> QueueRef:
        return QueueRef(self.topic, self.broker, self.queue_id)


@dataclass(frozen=True)
class QueueRanges(InputPartition):
    """One task: one queue range, or several small ones of one brokerName (read one after the other)."""

    ranges: tuple[QueueRange, ...]


def _partitions(ranges: list[Range], homes: Homes, options: ClusterOptions) -> list[QueueRanges]:
    groups = pack_ranges(ranges, options.min_offsets_per_partition, options.min_partitions)
    return [QueueRanges(tuple(QueueRange(q.topic, q.broker, q.queue_id, lo, hi, homes.get(q, ()))
                              for q, lo, hi in group)) for group in groups]


def _read(options: ClusterOptions, schema: pa.Schema, partition: QueueRanges) -> Iterator[pa.RecordBatch]:
    from spark_export.cluster.pull_reader import read_ranges  # executors only: the decoder loads numba

    return read_ranges(options, [(r.queue, r.addrs, r.start, r.end) for r in partition.ranges], schema)


class ClusterBatchReader(DataSourceReader):
    def __init__(self, options: ClusterOptions, arrow_schema: pa.Schema) -> None:
        self.options = options
        self.arrow_schema = arrow_schema

    def partitions(self) -> list[InputPartition]:
        with ClusterClient(self.options) as client:
            homes = client.run(client.queues(self.options.topics))
            starts = client.run(resolve_starts(client, homes, self.options, "earliest"))
            latest = client.run(latest_offsets(client, homes))
        starts_past_end(starts, latest, self.options)
        ends = resolve_ends(latest, homes, self.options)
        parts = _partitions(split_ranges(starts, ends, self.options.min_partitions), homes, self.options)
        return parts or [InputPartition(None)]

    def read(self, partition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, QueueRanges):
            return iter(())
        return _read(self.options, self.arrow_schema, partition)


class ClusterStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets: {"topic": {"brokerName": {"queueId": next offset}}}."""

    def __init__(self, options: ClusterOptions, arrow_schema: pa.Schema) -> None:
        self.options = options
        self.arrow_schema = arrow_schema
        self._client: ClusterClient | None = None
        self._homes: Homes = {}
        self._target: Offsets | None = None  # Trigger.AvailableNow: never read past these
        self._latest: Offsets | None = None  # what the brokers had at the last trigger (progress reports)

    def __getstate__(self) -> dict:
        """Executors get the options and schema only (a client holds sockets and an event loop)."""
        return {"options": self.options, "arrow_schema": self.arrow_schema}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["options"], state["arrow_schema"])

    @property
    def client(self) -> ClusterClient:
        if self._client is None:
            self._client = ClusterClient(self.options)
        return self._client

    def _refresh(self) -> Homes:
        """The current queues; when the name server cannot answer, the last ones known (a failover in progress)."""
        try:
            self._homes = self.client.run(self.client.queues(self.options.topics))
        except ClusterReadError as exc:
            if not self._homes:
                raise
            log.warning("%s; using the last route known", exc)
        return self._homes

    def initialOffset(self) -> dict:
        homes = self._refresh()
        return to_json(self.client.run(resolve_starts(self.client, homes, self.options, "latest")))

    def getDefaultReadLimit(self):
        if ReadMaxRows is not None and self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return super().getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        homes = self._refresh()
        self._target = self.client.run(latest_offsets(self.client, homes, tolerate=True))

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        begin = from_json(start) if start is not None else from_json(self.initialOffset())
        homes = self._refresh()
        latest = self.client.run(latest_offsets(self.client, homes, tolerate=True))
        self._latest = latest
        for queue, top in latest.items():
            if top < begin.get(queue, 0):
                self._behind(queue, begin[queue], top)
        if self._target is not None:
            latest = {q: min(o, self._target[q]) for q, o in latest.items() if q in self._target}
        max_rows = self.options.max_offsets_per_trigger
        if limit is not None:
            max_rows = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        return to_json(limit_rows(begin, latest, max_rows))

    def reportLatestOffset(self) -> dict | None:
        """The brokers' ends at the last trigger: Spark's progress shows them beside the batch's end."""
        return to_json(self._latest) if self._latest is not None else None

    def _behind(self, queue: QueueRef, start: int, top: int) -> None:
        """The checkpoint is past the broker's end (an unclean failover lost messages): offsets will be reused."""
        text = (f"rocketmq: data loss in {queue}: the query has read up to offset {start} but the broker's queue now "
                f"ends at {top}")
        if self.options.fail_on_data_loss:
            raise ClusterReadError(text + "; option failOnDataLoss=false goes on from the checkpoint")
        log.warning("%s; going on from the checkpoint", text)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ranges = split_ranges(from_json(start), from_json(end), self.options.min_partitions)
        if not ranges:
            return []
        homes = self._homes
        if any(q not in homes for q, _, _ in ranges):
            homes = self._refresh()
        return _partitions(ranges, homes, self.options)

    def read(self, partition: QueueRanges) -> Iterator[pa.RecordBatch]:
        return _read(self.options, self.arrow_schema, partition)

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint only; nothing is committed to the broker

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
