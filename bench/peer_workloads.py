"""The bench/peers.py workloads against Redis Streams (redis-py with hiredis), NATS JetStream (nats-py) and RabbitMQ
(aio-pika), each with its usual Python client and the same message (128-byte body, tag TagA as a field, subject
token or header) and the same shapes as bench/run.py: single (one in flight), pipelined (a window in flight),
batch (pipelined groups) and consume (one listener call per message, acknowledged per fetched batch).

Every loop is bounded by a message count and a deadline; each result is checked (count, and for consume the
distinct ids) and a mismatch is noted in the result so the run fails.
"""

from __future__ import annotations

import asyncio
import time

from phases import BODY, TAG, run_senders
from results import PhaseResult


async def redis_client(port: int):
    import redis.asyncio as redis

    client = redis.Redis(host="127.0.0.1", port=port, max_connections=64)
    await client.ping()
    return client


async def redis_single(port: int, count: int, limit_s: float, stream: str = "bench-single") -> PhaseResult:
    """XADD awaited one at a time (unpipelined) to a stream that must not exist yet."""
    client = await redis_client(port)
    try:
        await client.xadd(stream, {"body": BODY, "tag": TAG})
        start = time.perf_counter()
        deadline = start + limit_s
        xadd = client.xadd
        sent = 0
        while sent < count:
            await xadd(stream, {"body": BODY, "tag": TAG})
            sent += 1
            if not sent & 255 and time.perf_counter() > deadline:
                break
        seconds = time.perf_counter() - start
        stored = await client.xlen(stream) - 1
    finally:
        await client.aclose()
    note = "XADD, 1 in flight" + ("" if stored == sent else f" COUNT MISMATCH: stored {stored}, sent {sent}")
    return PhaseResult("single", sent, seconds, note)


async def redis_batch(port: int, stream: str, count: int, limit_s: float, batch_size: int,
                      in_flight: int) -> PhaseResult:
    """Pipelines (no MULTI) of batch_size XADDs, in_flight pipelines outstanding on their own connections."""
    client = await redis_client(port)
    try:
        async def send_chunk(_first: int, n: int) -> None:
            pipe = client.pipeline(transaction=False)
            for _ in range(n):
                pipe.xadd(stream, {"body": BODY, "tag": TAG})
            await pipe.execute()

        start = time.perf_counter()
        sent = await run_senders(count, batch_size, in_flight, start + limit_s, send_chunk)
        seconds = time.perf_counter() - start
        stored = await client.xlen(stream)
    finally:
        await client.aclose()
    note = f"pipelined XADD, {batch_size}/pipeline, {in_flight} in flight"
    note += "" if stored == sent else f" COUNT MISMATCH: stored {stored}, sent {sent}"
    return PhaseResult("batch", sent, seconds, note)


async def redis_consume(port: int, stream: str, expected: int, limit_s: float, read_count: int) -> PhaseResult:
    """A new group reads the whole stream: XREADGROUP COUNT read_count, a listener call per entry, one XACK per
    read batch."""
    client = await redis_client(port)
    group = f"bench-group-{int(time.time() * 1000)}"
    received = 0
    seen: set[bytes] = set()

    def listener(entry_id: bytes, fields: dict) -> None:
        nonlocal received
        received += 1
        seen.add(entry_id)

    try:
        start = time.perf_counter()
        await client.xgroup_create(stream, group, id="0")
        deadline = start + limit_s
        while received < expected and time.perf_counter() < deadline:
            reply = await client.xreadgroup(group, "c1", {stream: ">"}, count=read_count, block=100)
            if not reply:
                continue
            entries = reply[0][1]
            for entry_id, fields in entries:
                listener(entry_id, fields)
            await client.xack(stream, group, *(entry_id for entry_id, _ in entries))
        seconds = time.perf_counter() - start
    finally:
        await client.aclose()
    note = f"XREADGROUP COUNT {read_count} + XACK per batch"
    if received < expected or len(seen) != received:
        note += f" COUNT MISMATCH: received {received} ({len(seen)} distinct), expected {expected}"
    else:
        note += ", count verified, no duplicates"
    return PhaseResult("consume", received, seconds, note)


async def nats_jetstream(port: int):
    import nats

    connection = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5, max_reconnect_attempts=0)
    js = connection.jetstream(timeout=30)
    await js.add_stream(name="BENCH", subjects=["bench.>"], storage="file")
    return connection, js


async def nats_send(port: int, name: str, count: int, limit_s: float, window: int) -> PhaseResult:
    """JetStream publish awaiting each ack, `window` publishers in flight (1: single)."""
    connection, js = await nats_jetstream(port)
    subject = f"bench.{name}.{TAG}"
    try:
        await js.publish(subject, BODY)
        start = time.perf_counter()
        sent = await run_senders(count, 1, window, start + limit_s, lambda _f, _n: js.publish(subject, BODY),
                                 check_mask=255)
        seconds = time.perf_counter() - start
        info = await js.stream_info("BENCH", subjects_filter=subject)
        stored = (info.state.subjects or {}).get(subject, 0) - 1 if info.state.subjects else None
    finally:
        await connection.close()
    note = f"js.publish, {window} in flight"
    if stored is not None and stored != sent:
        note += f" COUNT MISMATCH: stored {stored}, sent {sent}"
    return PhaseResult(name, sent, seconds, note)


async def rabbitmq_send(port: int, name: str, count: int, limit_s: float, window: int) -> PhaseResult:
    """Persistent messages to a durable queue on a channel with publisher confirms, `window` awaiting confirms."""
    import aio_pika

    connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/", timeout=30)
    try:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.declare_queue(f"bench-{name}", durable=True)
        exchange = channel.default_exchange

        def publish(_first: int, _n: int):
            return exchange.publish(aio_pika.Message(BODY, delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                                                     headers={"tag": TAG}), routing_key=queue.name)

        await publish(0, 1)
        start = time.perf_counter()
        sent = await run_senders(count, 1, window, start + limit_s, publish, check_mask=255)
        seconds = time.perf_counter() - start
        declared = await channel.declare_queue(f"bench-{name}", durable=True, passive=True)
        stored = declared.declaration_result.message_count - 1
    finally:
        await connection.close()
    note = f"confirmed persistent publish, {window} in flight"
    note += "" if stored == sent else f" COUNT MISMATCH: stored {stored}, sent {sent}"
    return PhaseResult(name, sent, seconds, note)


async def bounded(coro, seconds: float):
    """A peer workload with an overall bound (a hung peer fails the run instead of stalling it)."""
    return await asyncio.wait_for(coro, seconds)
