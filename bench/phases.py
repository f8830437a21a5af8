"""The send phases: one request in flight (single), a window of sends in flight (pipelined), batches (batch)."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from client import Message, Producer

from results import PhaseResult

BODY = b"x" * 128
TAG = "TagA"


async def run_senders(count: int, chunk: int, workers: int, deadline: float,
                      send_chunk: Callable[[int, int], Awaitable[object]], check_mask: int = 0) -> int:
    """`workers` coroutines each taking the next `chunk` (or fewer) of `count` items and awaiting
    send_chunk(first_index, n), so `workers` sends stay in flight until the count is reached. The deadline is
    checked when the number sent has no bits of check_mask set (0: after every send); once passed, no further
    chunks are taken. Returns the number sent."""
    taken = sent = 0

    async def worker() -> None:
        nonlocal taken, sent
        while taken < count:
            first = taken
            n = min(chunk, count - taken)
            taken += n
            await send_chunk(first, n)
            sent += n
            if not sent & check_mask and time.perf_counter() > deadline:
                taken = count

    await asyncio.gather(*(worker() for _ in range(workers)))
    return sent


async def phase_single(producer: Producer, topic: str, count: int, limit_s: float) -> PhaseResult:
    """One request at a time: latency-bound round trips."""
    await producer.send(Message(topic, BODY, tags=TAG))  # route + connection warm-up, not timed
    sent = 0
    start = time.perf_counter()
    deadline = start + limit_s
    send = producer.send
    while sent < count:
        await send(Message(topic, BODY, tags=TAG))
        sent += 1
        if not sent & 255 and time.perf_counter() > deadline:
            break
    return PhaseResult("single", sent, time.perf_counter() - start, "1 in flight")


async def phase_pipelined(producer: Producer, topic: str, count: int, limit_s: float, window: int) -> PhaseResult:
    """`window` coroutines each looping over send: exactly `window` requests in flight until the count is reached."""
    await producer.send(Message(topic, BODY, tags=TAG))
    send = producer.send
    start = time.perf_counter()
    sent = await run_senders(count, 1, window, start + limit_s,
                             lambda _first, _n: send(Message(topic, BODY, tags=TAG)), check_mask=1023)
    return PhaseResult("pipelined", sent, time.perf_counter() - start, f"{window} in flight")


async def phase_batch(producer: Producer, topic: str, count: int, limit_s: float, batch_size: int,
                      in_flight: int) -> tuple[PhaseResult, int]:
    """send_batch of batch_size fresh messages, in_flight batches outstanding. Returns (result, messages stored)."""
    send_batch = producer.send_batch
    start = time.perf_counter()
    sent = await run_senders(count, batch_size, in_flight, start + limit_s,
                             lambda _first, n: send_batch([Message(topic, BODY, tags=TAG) for _ in range(n)]))
    result = PhaseResult("batch", sent, time.perf_counter() - start, f"{batch_size}/batch, {in_flight} in flight")
    return result, sent
