"""Driver side of a network read: which queues exist, where each read starts and ends, and how to split it.

Offsets are per message queue (topic, brokerName, queueId); `end` is exclusive, like GET_MAX_OFFSET. In the
streaming checkpoint they are the rocketmq-spark JSON {"topic": {"brokerName": {"queueId": offset}}}, built
with sorted keys: Spark compares offsets as JSON text, so equal positions must give equal text.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from protocol.codes import RequestCode
from spark_export.cluster.options import EARLIEST, LATEST, ClusterOptions
from spark_export.cluster.remote import ClusterClient, ClusterReadError, QueueRef

__all__ = ["Homes", "Offsets", "resolve_starts", "resolve_ends", "starts_past_end", "latest_offsets", "to_json", "from_json",
           "limit_rows", "split_ranges", "pack_ranges", "Range"]

log = logging.getLogger(__name__)

Homes = dict[QueueRef, tuple[str, ...]]  # queue -> replica addresses, master first
Offsets = dict[QueueRef, int]
Range = tuple[QueueRef, int, int]  # [start, end) of one queue


async def _each(client: ClusterClient, homes: Homes, code: int, timestamp: int | None = None,
                tolerate: bool = False) -> Offsets:
    """One offset request per queue, all at once. tolerate: leave out queues no replica answered for."""
    queues = list(homes)
    answers = await asyncio.gather(*(client.queue_offset(q, homes[q], code, timestamp) for q in queues),
                                   return_exceptions=True)
    found: Offsets = {}
    for queue, answer in zip(queues, answers):
        if isinstance(answer, BaseException):
            if not tolerate or not isinstance(answer, ClusterReadError):
                raise answer
            log.warning("%s", answer)
            continue
        found[queue] = answer
    return found


async def latest_offsets(client: ClusterClient, homes: Homes, tolerate: bool = False) -> Offsets:
    return await _each(client, homes, RequestCode.GET_MAX_OFFSET, tolerate=tolerate)


async def resolve_starts(client: ClusterClient, homes: Homes, options: ClusterOptions, default: str) -> Offsets:
    """Where each queue starts: startingTimestamp, else startingOffsets (JSON entries, then its default for the
    queues it does not list), else `default` ('earliest' or 'latest')."""
    if options.starting_timestamp is not None:
        return await _each(client, homes, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, options.starting_timestamp)
    spec = options.starting_offsets or default
    given: dict[QueueRef, int] = {}
    if isinstance(spec, dict):
        given = _listed(spec, homes, "startingOffsets")
        spec = default
    want_earliest = [q for q in homes if given.get(q, EARLIEST if spec == "earliest" else LATEST) == EARLIEST]
    want_latest = [q for q in homes if given.get(q, EARLIEST if spec == "earliest" else LATEST) == LATEST]
    earliest = await _each(client, {q: homes[q] for q in want_earliest}, RequestCode.GET_MIN_OFFSET)
    latest = await latest_offsets(client, {q: homes[q] for q in want_latest})
    starts = {q: o for q, o in given.items() if o >= 0}
    starts.update(earliest)
    starts.update(latest)
    return dict(sorted(starts.items()))


def resolve_ends(latest: Offsets, homes: Homes, options: ClusterOptions) -> Offsets:
    """Where a batch read ends (exclusive): endingOffsets JSON entries, the latest offset for the others."""
    latest = dict(latest)
    if isinstance(options.ending_offsets, dict):
        latest.update({q: o for q, o in _listed(options.ending_offsets, homes, "endingOffsets").items() if o != LATEST})
    return latest


def _listed(spec: Mapping, homes: Homes, option: str) -> Offsets:
    """The queues an offsets JSON option names, each checked against the route."""
    given: Offsets = {}
    for topic, brokers in spec.items():
        for broker, queues in brokers.items():
            for queue_id, offset in queues.items():
                ref = QueueRef(topic, broker, queue_id)
                if ref not in homes:
                    raise ClusterReadError(f"rocketmq: {option} names {ref}, which the route of {topic!r} does not list")
                given[ref] = offset
    return given


def starts_past_end(starts: Offsets, latest: Offsets, options: ClusterOptions) -> Offsets:
    """Starts beyond a queue's end (a JSON offset past what the broker holds) are data loss: an error naming the
    queue, or (failOnDataLoss=false) a warning and nothing read from that queue."""
    for queue, start in starts.items():
        top = latest.get(queue)
        if top is not None and start > top:
            text = f"rocketmq: data loss in {queue}: the read starts at offset {start} but the queue ends at {top}"
            if options.fail_on_data_loss:
                raise ClusterReadError(text + "; option failOnDataLoss=false skips it")
            log.warning("%s; skipped", text)
    return starts


def to_json(offsets: Mapping[QueueRef, int]) -> dict:
    """The checkpoint form, keys sorted (queue ids in numeric order, as text)."""
    nested: dict[str, dict[str, dict[str, int]]] = {}
    for queue in sorted(offsets):
        nested.setdefault(queue.topic, {}).setdefault(queue.broker, {})[str(queue.queue_id)] = int(offsets[queue])
    return nested


def from_json(nested: Mapping) -> Offsets:
    offsets: Offsets = {}
    for topic, brokers in (nested or {}).items():
        for broker, queues in brokers.items():
            for queue_id, offset in queues.items():
                offsets[QueueRef(topic, broker, int(queue_id))] = int(offset)
    return offsets


def limit_rows(start: Offsets, latest: Offsets, max_rows: int | None) -> Offsets:
    """End offsets for the next batch: all of `latest`, or at most `max_rows` messages shared between the queues in
    proportion to their backlog (Kafka's rule: rounded down, at least 1 for a queue with backlog, never past its
    latest). Queues missing from `latest` (broker unreachable, gone from the route) keep their start."""
    ends = dict(start)
    backlog: Offsets = {}
    for queue, top in latest.items():
        begin = ends.setdefault(queue, start.get(queue, 0))  # a queue new to the query starts at 0
        if top > begin:
            backlog[queue] = top - begin
    total = sum(backlog.values())
    if max_rows is None or total <= max_rows:
        for queue in backlog:
            ends[queue] = latest[queue]
        return dict(sorted(ends.items()))
    for queue, behind in backlog.items():
        share = max(1, behind * max_rows // total)
        ends[queue] = start.get(queue, 0) + min(behind, share)
    return dict(sorted(ends.items()))


def split_ranges(start: Offsets, end: Offsets, min_partitions: int | None) -> list[Range]:
    """[start, end) per queue with something to read; with minPartitions, big ranges are cut so that about that many
    ranges exist (Kafka's rule: a range's pieces are proportional to its share of the total)."""
    ranges = [(q, start.get(q, 0), e) for q, e in sorted(end.items()) if e > start.get(q, 0)]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(hi - lo for _, lo, hi in ranges)
    out: list[Range] = []
    for queue, lo, hi in ranges:
        pieces = max(1, min(hi - lo, -(-(hi - lo) * min_partitions // total)))  # rounded up
        step, extra = divmod(hi - lo, pieces)
        at = lo
        for i in range(pieces):
            nxt = at + step + (1 if i < extra else 0)
            out.append((queue, at, nxt))
            at = nxt
    return out


def pack_ranges(ranges: list[Range], target: int, min_partitions: int | None = None) -> list[list[Range]]:
    """Ranges grouped into tasks: a range of `target` offsets or more is a task of its own; the smaller ranges of one
    brokerName share tasks of about `target` offsets (the fewest such groups, balanced: largest range first into the
    lightest group). A Spark task costs tens of milliseconds to start, as much as reading thousands of messages, and
    a micro-batch of a few thousand offsets per queue would otherwise be mostly task starts. Groups stay within one
    brokerName: a task's pulls then share one connection. Never fewer groups than minPartitions asks for (nor than
    ranges, if there are fewer): then one range per task, as without packing. target <= 1: one range per task."""
    if target <= 1 or len(ranges) <= 1:
        return [[r] for r in ranges]
    groups: list[list[Range]] = []
    small: dict[str, list[Range]] = {}
    for queue_range in ranges:
        queue, lo, hi = queue_range
        if hi - lo >= target:
            groups.append([queue_range])
        else:
            small.setdefault(queue.broker, []).append(queue_range)
    for broker in sorted(small):
        mine = sorted(small[broker], key=lambda r: (r[1] - r[2], r[0], r[1]))  # largest first
        total = sum(hi - lo for _, lo, hi in mine)
        count = min(len(mine), max(1, (total + target // 2) // target))
        sizes = [0] * count
        packed: list[list[Range]] = [[] for _ in range(count)]
        for queue_range in mine:
            lightest = min(range(count), key=sizes.__getitem__)
            packed[lightest].append(queue_range)
            sizes[lightest] += queue_range[2] - queue_range[1]
        groups.extend(sorted(group) for group in packed)
    if min_partitions and len(groups) < min(min_partitions, len(ranges)):
        return [[r] for r in ranges]
    return groups
