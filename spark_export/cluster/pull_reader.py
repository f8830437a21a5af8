"""Executor side of a network read: pull one queue's exact offset range [start, end) and decode it into Arrow.

The range is cut into chunks of `pullBatchSize` offsets, or fewer once the broker's byte cap on an answer showed
that fewer fit in one answer; a few chunks are pulled at once (pipelining hides the round trips) and handed on
strictly in offset order, so memory is bounded by chunks in flight x pull size, never by the range. A pull answer is a run of commit-log records; records at or past a chunk's end are cut off (a
filtered pull may scan ahead), and the chunk goes on at `nextBeginOffset` until it is complete. Answers are
decoded many pulls at a time by the same vectorised decoder the file source uses.

Replicas: the master first; on a transport error, 'busy' or 'not available' the next replica of the brokerName
(same offsets), and when every replica failed the route is looked up again (a controller-mode failover moves the
master to another address). A range the broker no longer has is data loss: an error, or skipped with
failOnDataLoss=false.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from client.errors import RemotingError
from client.message import MessageSelector
from protocol.codes import ResponseCode
from spark_export.cluster.options import ClusterOptions
from spark_export.cluster.remote import ClusterClient, ClusterReadError, PullReply, QueueRef, queue_homes
from spark_export.decode import DecodeOptions, decode_messages
from spark_export.kernels import RECORD_FIELDS, WALK_STOP, ensure_loaded, walk_chain
from spark_export.records import Records

__all__ = ["read_range", "read_ranges", "RangePuller"]

log = logging.getLogger(__name__)

_NOT_PULLED = -1  # walk_chain's base for records that are not a slice of a commit-log file
_DECODE_BYTES = 8 << 20  # decode once this much pulled data waits (and at the end)
_RETRY_WINDOW_S = 60.0  # how long a chunk may make no progress (replicas down, failover under way) before failing
_BEHIND_RETRIES = 8  # PULL_NOT_FOUND inside a planned range: re-asks before it counts as data loss
_CAP_MARGIN = 0.95  # chunks aim below the broker's answer cap: records of varying size would spill into a 2nd pull
_FATAL = {ResponseCode.TOPIC_NOT_EXIST: "the topic no longer exists",
          ResponseCode.NO_PERMISSION: "permission denied",
          ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: "the consumer group does not exist (set option consumerGroup)"}


def _records(buf: np.ndarray) -> Records:
    """Every record of a pull answer (they are complete and back to back)."""
    out = np.empty((len(RECORD_FIELDS), max(1, len(buf) // 91 + 1)), np.int64)
    count, pos, status = walk_chain(buf, _NOT_PULLED, 0, len(buf), out)
    if status != WALK_STOP or pos != len(buf):
        raise ClusterReadError(f"rocketmq: a pull answer holds a broken record at byte {pos} of {len(buf)}")
    return Records(*out[:, :count])


def _queue_offsets(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """QUEUEOFFSET (8 bytes big-endian at +20) of the records at `pos`."""
    idx = pos[:, None] + np.arange(20, 28)
    return buf[idx].astype(np.int64) @ (256 ** np.arange(7, -1, -1, dtype=np.int64))


class RangePuller:
    """Pulls [start, end) of one queue, in order, as record runs (bytes) and their counts.

    Chunks are sized to what one pull answer holds: a broker caps an answer in bytes (256 KiB by default,
    maxTransferBytesOnMessageInMemory), so a chunk of pullBatchSize offsets of larger records would need a second,
    small pull for its tail. Once an answer came back short, the chunk size follows the largest short answer's
    bytes divided by the bytes per offset of the latest answer, with a margin for records of varying size."""

    def __init__(self, client: ClusterClient, queue: QueueRef, addrs: tuple[str, ...]) -> None:
        self.client = client
        self.options: ClusterOptions = client.options
        self.queue = queue
        self.addrs = addrs
        self.current = 0  # index of the replica in use
        self.answer_cap = 0  # bytes of the largest answer the broker cut short (0: none seen yet)
        self.bytes_per_offset = 0.0  # of the latest answer

    def stride(self) -> int:
        """Offsets per chunk: pullBatchSize, or fewer when the broker's byte cap would cut such a chunk."""
        limit = self.options.pull_batch_size
        if self.answer_cap and self.bytes_per_offset:
            return max(1, min(limit, int(self.answer_cap * _CAP_MARGIN / self.bytes_per_offset)))
        return limit

    def observe(self, asked: int, covered: int, size: int) -> None:
        """An answer to a pull of `asked` offsets covered `covered` offsets in `size` bytes."""
        if covered <= 0:
            return
        self.bytes_per_offset = size / covered
        if covered < asked:  # cut short: the byte cap (or the end of a consume-queue file: a smaller answer)
            self.answer_cap = max(self.answer_cap, size)

    def lost(self, lo: int, hi: int, why: str) -> None:
        text = (f"rocketmq: data loss in {self.queue}: offsets [{lo}, {hi}) are not on the broker ({why})")
        if self.options.fail_on_data_loss:
            raise ClusterReadError(text + "; option failOnDataLoss=false skips them")
        log.warning("%s; skipped (failOnDataLoss=false)", text)

    async def runs(self, start: int, end: int) -> AsyncIterator[tuple[bytes, int]]:
        """(records, count) in offset order; `pullsInFlight` chunks are fetched at once. count is the number of
        records, or, for an answer that needed no cut, the offsets it covers (the same unless units were missing)."""
        lo = start
        running: deque[asyncio.Task] = deque()
        try:
            while lo < end or running:
                while lo < end and len(running) < self.options.pulls_in_flight:
                    hi = min(lo + self.stride(), end)
                    running.append(asyncio.ensure_future(self.chunk(lo, hi)))
                    lo = hi
                for run in await running.popleft():
                    yield run
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def chunk(self, lo: int, hi: int) -> list[tuple[bytes, int]]:
        """The records of [lo, hi), pulled from `lo` on until the broker's next offset reaches `hi`."""
        runs: list[tuple[bytes, int]] = []
        offset = lo
        behind = 0
        stalled_since: float | None = None
        while offset < hi:
            asked = min(hi - offset, self.options.pull_batch_size)
            try:
                reply = await self.pull(offset, asked)
            except (RemotingError, _Unavailable) as exc:
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > _RETRY_WINDOW_S:
                    raise ClusterReadError(f"rocketmq: no replica of broker {self.queue.broker!r} served {self.queue} "
                                           f"at offset {offset} for {_RETRY_WINDOW_S:.0f} s: {exc}") from None
                await self.next_replica(refresh=self.current == len(self.addrs) - 1)
                await asyncio.sleep(0.2)
                continue
            code = reply.code
            if code == ResponseCode.SUCCESS:
                stalled_since, behind = None, 0
                if reply.next_begin <= offset:
                    raise ClusterReadError(f"rocketmq: {reply.addr} answered a pull of {self.queue} at {offset} "
                                           f"with next offset {reply.next_begin}")
                body = reply.body or b""
                self.observe(asked, reply.next_begin - offset, len(body))
                if reply.next_begin <= hi and not self.options.filtered:
                    # the records of offsets [offset, next_begin): all below hi, one per offset (the decoder walks
                    # and checks them later, so no walk here)
                    count = reply.next_begin - offset if body else 0
                else:  # a filtered pull: count what matched, and cut what it scanned past the chunk off
                    body, count = self.keep_below(body, hi)
                if count:
                    runs.append((body, count))
                offset = reply.next_begin
            elif code == ResponseCode.PULL_RETRY_IMMEDIATELY:
                if reply.next_begin > offset:  # examined, nothing matched the expression
                    offset = reply.next_begin
                    continue
                # a slave that defers to its master (no progress): go where it points
                await self.next_replica(prefer=reply.suggested)
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > _RETRY_WINDOW_S:
                    raise ClusterReadError(f"rocketmq: {self.queue} made no progress at offset {offset} "
                                           f"for {_RETRY_WINDOW_S:.0f} s ({reply.addr} asks to retry)")
            elif code == ResponseCode.PULL_OFFSET_MOVED:
                if reply.next_begin > offset:  # below the queue's min offset: retention removed it
                    self.lost(offset, min(reply.next_begin, hi), f"the queue now starts at {reply.min_offset}")
                    offset = reply.next_begin
                else:  # beyond what the broker has: it is behind the range
                    self.lost(offset, hi, f"the broker's queue ends at {reply.max_offset}")
                    offset = hi
            elif code == ResponseCode.PULL_NOT_FOUND:
                # the planned range said these offsets existed: a lagging replica or a failover cut them
                behind += 1
                if behind <= _BEHIND_RETRIES:
                    await self.next_replica(refresh=behind % len(self.addrs or (1,)) == 0)
                    await asyncio.sleep(min(0.05 * 2 ** behind, 1.0))
                    continue
                self.lost(offset, hi, f"the queue ends at {reply.max_offset} on {reply.addr}")
                offset = hi
            else:
                why = _FATAL.get(code, "refused")
                raise ClusterReadError(f"rocketmq: broker {self.queue.broker!r} ({reply.addr}) refused to pull "
                                       f"{self.queue} at offset {offset}: {why}: {reply.remark} (code {code})")
        return runs

    async def pull(self, offset: int, wanted: int) -> PullReply:
        if not self.addrs:
            await self.refresh()
            if not self.addrs:
                raise _Unavailable(f"no address for broker {self.queue.broker!r} in the route")
        addr = self.addrs[self.current % len(self.addrs)]
        reply = await self.client.pull(self.queue, addr, offset, wanted)
        if reply.code in (ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE):
            raise _Unavailable(f"{addr}: {reply.remark} (code {reply.code})")
        return reply

    async def next_replica(self, *, refresh: bool = False, prefer: int | None = None) -> None:
        if refresh:
            await self.refresh()
        if prefer is not None and prefer == 0:
            self.current = 0
        elif self.addrs:
            self.current = (self.current + 1) % len(self.addrs)

    async def refresh(self) -> None:
        """Look the queue's replicas up again; keep the old list when the name server cannot help."""
        try:
            route = await self.client.route(self.queue.topic)
        except ClusterReadError as exc:
            log.warning("route refresh for %s failed: %s", self.queue, exc)
            return
        addrs = queue_homes(route, self.queue.topic).get(self.queue)
        if addrs:
            self.addrs, self.current = addrs, 0

    @staticmethod
    def keep_below(body: bytes, hi: int) -> tuple[bytes, int]:
        """The records of a pull answer whose queue offset is below `hi` (a prefix: records come in order)."""
        if not body:
            return b"", 0
        buf = np.frombuffer(body, np.uint8)
        records = _records(buf)
        if not len(records):
            return b"", 0
        offsets = _queue_offsets(buf, records.pos)
        keep = int(np.searchsorted(offsets, hi))
        if keep == len(records):
            return body, keep
        return body[:int(records.pos[keep])] if keep else b"", keep


class _Unavailable(Exception):
    """A replica answered 'busy' or 'not available', or none is known: try another."""


def read_range(options: ClusterOptions, queue: QueueRef, addrs: tuple[str, ...], start: int, end: int,
               schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """RecordBatches (`schema`, a subset of the messages columns) of queue offsets [start, end)."""
    return read_ranges(options, [(queue, addrs, start, end)], schema)


def read_ranges(options: ClusterOptions, ranges: list[tuple[QueueRef, tuple[str, ...], int, int]],
                schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """RecordBatches of each (queue, replica addresses, start, end) in turn, through one client (one connection
    per broker for the whole task)."""
    ensure_loaded()
    tags = MessageSelector.tag(options.sub_expression).tags_set if options.filtered else None
    decode_schema = schema
    if tags is not None and "tags" not in schema.names:
        decode_schema = schema.append(pa.field("tags", pa.string()))
    client = ClusterClient(options)
    try:
        for queue, addrs, start, end in ranges:
            decode = DecodeOptions(options.include_body, options.decompress, None, decode_schema, None, queue.broker)
            runs = RangePuller(client, queue, addrs).runs(start, end)
            try:
                for _ in range(end - start + 1):  # bounded: every batch but the last holds at least one record
                    waiting, more = client.run(_next_batch(runs, options.batch_rows))
                    if waiting:
                        yield from _decoded(waiting, decode, schema, tags)
                    if not more:
                        break
            finally:
                client.run(runs.aclose())  # a read stopped early (a LIMIT) cancels the pulls in flight
    finally:
        client.close()


async def _next_batch(runs: AsyncIterator[tuple[bytes, int]], batch_rows: int) -> tuple[list[bytes], bool]:
    """The next record runs to decode together (about batch_rows records, at most ~_DECODE_BYTES), and whether
    more may follow. Collected in one visit to the event loop rather than one per pull answer."""
    waiting: list[bytes] = []
    size = rows = 0
    while rows < batch_rows and size < _DECODE_BYTES:
        try:
            body, count = await runs.__anext__()
        except StopAsyncIteration:
            return waiting, False
        waiting.append(body)
        size += len(body)
        rows += count
    return waiting, True


def _decoded(bodies: list[bytes], decode: DecodeOptions, schema: pa.Schema,
             tags: frozenset[str] | None) -> Iterator[pa.RecordBatch]:
    data = bodies[0] if len(bodies) == 1 else b"".join(bodies)
    buf = np.frombuffer(data, np.uint8)
    batch = decode_messages(buf, _NOT_PULLED, _records(buf), decode)
    if tags is not None:  # the broker matched tag hashes; keep only the tags asked for
        batch = batch.filter(pc.is_in(batch.column("tags"), value_set=pa.array(sorted(tags), pa.string())))
        if decode.schema is not schema:
            batch = batch.select(schema.names)
    if batch.num_rows:
        yield batch
