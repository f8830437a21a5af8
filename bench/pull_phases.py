"""The read phases: pull (everything the batch phase wrote), push (a new PushConsumer group) and the opt-in
sqlpull comparison (unfiltered, tag and SQL92 pulls of one topic written for it)."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from client import ConsumeResult, Message, MessageSelector, Producer, PullConsumer, PullStatus, PushConsumer

from phases import BODY, run_senders
from profiling import Profiling
from results import PhaseResult

SQL_SELECTOR = "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)"


async def queue_bounds(consumer: PullConsumer, topic: str) -> list[tuple]:
    """(queue, min offset, max offset) for every queue of topic."""
    queues = await consumer.fetch_message_queues(topic)
    return [(mq, await consumer.min_offset(mq), await consumer.max_offset(mq)) for mq in queues]


def split_ranges(bounds: list[tuple], per_queue: int) -> list[tuple]:
    """Each queue's [min, max) cut into per_queue contiguous (queue, lo, hi) ranges (fewer when it is short)."""
    ranges = []
    for mq, lo, hi in bounds:
        step = max(1, -(-(hi - lo) // per_queue))
        ranges.extend((mq, r_lo, min(hi, r_lo + step)) for r_lo in range(lo, hi, step))
    return ranges


async def pull_ranges(consumer: PullConsumer, bounds: list[tuple], per_queue: int, deadline: float,
                      selector: MessageSelector | str, max_nums: int, clip_to_range: bool,
                      take: Callable[[object, int, int, object], int]) -> int:
    """Pull the split_ranges(bounds, per_queue) concurrently, one request in flight per range, each until its end or
    the deadline. max_nums is lowered to what is left of the range when clip_to_range. take(queue, offset, range end,
    pull result) checks and counts one response and returns the offset to continue from. Returns the pull count."""
    pulls = 0

    async def read_range(mq, lo: int, hi: int) -> None:
        nonlocal pulls
        offset = lo
        while offset < hi and time.perf_counter() < deadline:
            nums = min(max_nums, hi - offset) if clip_to_range else max_nums
            result = await consumer.pull(mq, selector, offset, nums)
            pulls += 1
            offset = take(mq, offset, hi, result)

    await asyncio.gather(*(read_range(*r) for r in split_ranges(bounds, per_queue)))
    return pulls


async def phase_pull(consumer: PullConsumer, topic: str, expected: int, limit_s: float, max_nums: int,
                     per_queue: int) -> PhaseResult:
    """Read every queue of topic from its min to its max offset; per_queue contiguous ranges pulled concurrently."""
    bounds = await queue_bounds(consumer, topic)
    total_available = sum(hi - lo for _, lo, hi in bounds)
    received = 0
    start = time.perf_counter()

    def take(mq, offset: int, hi: int, result) -> int:
        nonlocal received
        if result.status is not PullStatus.FOUND:
            raise RuntimeError(f"pull {mq} @ {offset}: {result.status}")
        got = len(result.messages)
        if got == 0 or result.next_begin_offset <= offset:
            raise RuntimeError(f"pull {mq} @ {offset}: no progress")
        if result.messages[0].queue_offset != offset:
            raise RuntimeError(f"pull {mq} @ {offset}: first message has offset {result.messages[0].queue_offset}")
        # The broker does not know our range end; never count past it.
        got = min(got, hi - offset)
        received += got
        return offset + got

    pulls = await pull_ranges(consumer, bounds, per_queue, start + limit_s, "*", max_nums, True, take)
    seconds = time.perf_counter() - start
    note = f"{len(bounds)} queues x {per_queue} ranges, max_nums {max_nums}, {pulls} pulls"
    if received != total_available or received < expected:
        note += f" COUNT MISMATCH: got {received}, queues held {total_available}, batch phase sent {expected}"
    else:
        note += ", count verified"
    return PhaseResult("pull", received, seconds, note)


async def phase_push(namesrv: str, topic: str, expected: int, limit_s: float, pull_batch_size: int,
                     consume_batch: int, threads: int) -> PhaseResult:
    """A new push-consumer group reads the whole topic: rebalance, long-poll pull loops, listener, offsets."""
    received = 0
    offsets: dict[int, set[int]] = {}
    done = asyncio.Event()

    async def listener(msgs) -> ConsumeResult:
        nonlocal received
        received += len(msgs)
        for m in msgs:
            offsets.setdefault(m.queue_id, set()).add(m.queue_offset)
        if received >= expected:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        f"BenchPushGroup{int(time.time() * 1000)}", namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        pull_batch_size=pull_batch_size, consume_message_batch_max_size=consume_batch, consume_thread_max=threads,
    )
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    start = time.perf_counter()
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), limit_s)
    except asyncio.TimeoutError:
        pass
    seconds = time.perf_counter() - start
    await consumer.shutdown()
    distinct = sum(len(s) for s in offsets.values())
    note = f"pull batch {pull_batch_size}, consume batch {consume_batch}, {threads} workers"
    if received < expected or distinct != received:
        note += f" COUNT MISMATCH: received {received} ({distinct} distinct), expected {expected}"
    else:
        note += ", count verified, no duplicates"
    return PhaseResult("push", received, seconds, note)


async def produce_filter_topic(producer: Producer, topic: str, count: int, batch_size: int,
                               in_flight: int) -> tuple[int, int, int]:
    """Message i: tag TagA (even i) / TagB (odd i), property a = i % 8, so tag "TagA" and SQL_SELECTOR (a between 0
    and 3) each match half. Untimed. Returns (messages stored, SQL matches, TagA matches)."""

    def make(i: int) -> Message:
        return Message(topic, BODY, tags="TagA" if i % 2 == 0 else "TagB", properties={"a": str(i % 8)})

    await producer.send(make(0))  # route warm-up / topic creation
    sql = tag = 1

    async def send_chunk(taken: int, n: int) -> None:
        nonlocal sql, tag
        indexes = range(taken + 1, taken + 1 + n)  # message 0 was the warm-up
        await producer.send_batch([make(i) for i in indexes])
        sql += sum(1 for i in indexes if i % 8 < 4)
        tag += sum(1 for i in indexes if i % 2 == 0)

    stored = 1 + await run_senders(count - 1, batch_size, in_flight, float("inf"), send_chunk)
    return stored, sql, tag


async def phase_filtered_pull(consumer: PullConsumer, topic: str, name: str, selector: MessageSelector | str,
                              expected: int, limit_s: float, max_nums: int, per_queue: int,
                              check=None) -> PhaseResult:
    """Like phase_pull, with a selector: every queue is read from min to max offset in per_queue concurrent ranges;
    the broker examines up to 800 entries per pull and answers the offset to continue from. Delivered messages are
    counted against `expected`; check(message) is applied to the first message of every response."""
    bounds = await queue_bounds(consumer, topic)
    examined = sum(hi - lo for _, lo, hi in bounds)
    delivered = 0
    bad: list[str] = []
    start = time.perf_counter()

    def take(mq, offset: int, hi: int, result) -> int:
        nonlocal delivered
        if result.status not in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
            raise RuntimeError(f"{name} {mq} @ {offset}: {result.status}")
        if result.next_begin_offset <= offset:
            raise RuntimeError(f"{name} {mq} @ {offset}: no progress")
        messages = result.messages
        if messages and check is not None and not check(messages[0]):
            bad.append(f"{mq.queue_id}@{messages[0].queue_offset}")
        # The broker does not know our range end; never count past it.
        delivered += sum(1 for m in messages if m.queue_offset < hi)
        return result.next_begin_offset

    pulls = await pull_ranges(consumer, bounds, per_queue, start + limit_s, selector, max_nums, False, take)
    seconds = time.perf_counter() - start
    result = PhaseResult(name, delivered, seconds)
    result.examined = examined
    result.note = (f"examined {examined:,} ({examined / seconds:,.0f}/s), {pulls} pulls, "
                   f"{delivered / max(1, examined):.0%} delivered")
    if delivered != expected or bad:
        result.note += f" COUNT MISMATCH: delivered {delivered}, expected {expected}; wrong: {bad[:5]}"
    else:
        result.note += ", count verified"
    return result


async def phase_sqlpull(namesrv: str, stamp: int, args, profiling: Profiling) -> list[PhaseResult]:
    """The filtered-pull comparison on one topic: unfiltered, tag (50%) and SQL92 (50%) pulls of the same data."""
    topic = f"BenchFilter{stamp}"
    producer = Producer("BenchFilterProducerGroup", namesrv, send_timeout=30.0)
    await producer.start()
    try:
        stored, sql_matches, tag_matches = await produce_filter_topic(
            producer, topic, args.messages, args.batch_size, args.batches_in_flight)
    finally:
        await producer.shutdown()
    results = []
    consumer = PullConsumer("BenchFilterConsumerGroup", namesrv, pull_timeout=30.0)
    await consumer.start()
    try:
        runs = [
            ("pull-all", "*", stored, None),
            ("pull-tag", "TagA", tag_matches, lambda m: m.tags == "TagA"),
            ("pull-sql", MessageSelector.sql(SQL_SELECTOR), sql_matches, lambda m: int(m.properties["a"]) <= 3),
        ]
        for name, selector, expected, check in runs:
            mq = (await consumer.fetch_message_queues(topic))[0]
            await consumer.pull(mq, selector, 0, 1)  # connection and selector-compile warm-up, not timed
            await profiling.run(f"sqlpull_{name}", results, phase_filtered_pull(
                consumer, topic, name, selector, expected, args.limit, args.max_nums, args.pulls_per_queue, check))
    finally:
        await consumer.shutdown()
    base = results[0].rate
    for r in results[1:]:
        r.note += f"; {r.rate / base:.0%} of the unfiltered delivery rate" if base else ""
    return results
