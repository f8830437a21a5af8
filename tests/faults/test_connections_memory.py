"""Memory stays bounded whatever connections do: many peers holding big unfinished frames share one
budget (serverMaxBufferedFrameBytes), and a peer that pipelines big pulls without reading the responses
is no longer read from (writeBufferHighWaterMark)."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, encode_command

from tests.support.wire import WireClient, pull_fields, send_v2_fields

from tests.support.probes import LatencyProbe, peer_closed, raw_connect, rss_bytes, send_some

MIB = 1024 * 1024


@pytest.mark.slow
async def test_partial_frames_share_one_budget(broker_factory):
    budget = 32 * MIB
    broker = broker_factory("broker-budget", extra={"serverMaxBufferedFrameBytes": budget,
                                                    "serverFrameStallTimeoutSeconds": 2})
    peers, per_peer_body = 30, 3 * MIB
    async with LatencyProbe(broker.addr) as probe:
        await asyncio.sleep(0.3)
        baseline = rss_bytes(broker.proc.pid)
        socks = [raw_connect(broker.port) for _ in range(peers)]
        announced = 16 * MIB - 64  # just under frameMaxLength: a frame the decoder accepts and waits for
        payload = struct.pack(">i", announced) + b"\0" * per_peer_body
        offsets = [0] * peers
        peak = baseline
        closed: set[int] = set()
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            for i, sock in enumerate(socks):
                if i in closed or offsets[i] >= len(payload):
                    continue
                sent = send_some(sock, memoryview(payload)[offsets[i]:])
                if sent < 0:
                    closed.add(i)
                else:
                    offsets[i] += sent
            closed.update(i for i, sock in enumerate(socks) if i not in closed and peer_closed(sock))
            peak = max(peak, rss_bytes(broker.proc.pid))
            await asyncio.sleep(0.05)
        delivered = sum(offsets)
        still_open = peers - len(closed)
        for sock in socks:
            sock.close()
    growth = peak - baseline
    # Unbounded, the broker would hold everything delivered (30 x 3 MiB = 90 MiB).
    assert growth < budget + 16 * MIB, f"RSS grew {growth / MIB:.0f} MiB (budget 32 MiB, {delivered / MIB:.0f} MiB sent)"
    assert probe.failures == 0 and probe.max_latency < 2.0, probe.max_latency
    # Holders that stalled while others waited were closed; the waiting ones were paused, not closed.
    assert 2 <= len(closed) < peers, (len(closed), still_open)
    assert "serverMaxBufferedFrameBytes" in broker.log_text()
    # The budget is handed back when those connections go: a large send gets through.
    async with await WireClient.connect(broker.addr) as client:
        resp = await client.request(RequestCode.SEND_MESSAGE_V2, send_v2_fields("BudgetAfter"), b"x" * (2 * MIB),
                                    timeout=10)
        assert resp.code == ResponseCode.SUCCESS, resp.remark


@pytest.mark.slow
async def test_peer_not_reading_pulls_is_not_read_from(broker_factory):
    broker = broker_factory("broker-noread")
    topic, group = "NoReadTopic", "NoReadGroup"
    async with await WireClient.connect(broker.addr) as producer:
        for i in range(20):
            resp = await producer.request(RequestCode.SEND_MESSAGE_V2, send_v2_fields(topic, 0), bytes([i]) * 16384)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        first = await producer.request(RequestCode.PULL_MESSAGE, pull_fields(topic, group, 0, 0))
        assert first.code == ResponseCode.SUCCESS and len(first.body) > 200_000  # each pull answers ~256 KiB
    pull = encode_command(RemotingCommand.request(RequestCode.PULL_MESSAGE, pull_fields(topic, group, 0, 0),
                                                  opaque=1))
    batch = pull * 50
    async with LatencyProbe(broker.addr) as probe:
        await asyncio.sleep(0.3)
        baseline = rss_bytes(broker.proc.pid)
        sock = raw_connect(broker.port, rcvbuf=16384)
        sent_requests, blocked_since, peak = 0, None, baseline
        deadline = time.monotonic() + 20
        # Pipeline pulls and never read. Without backpressure every request read costs ~256 KiB of
        # buffered response: stop as soon as that shows (bounded), or once the broker stops reading.
        while time.monotonic() < deadline and sent_requests < 60_000:
            peak = max(peak, rss_bytes(broker.proc.pid))
            if peak - baseline > 150 * MIB:
                break
            view, sent = memoryview(batch), 0
            while sent < len(batch):
                n = send_some(sock, view[sent:])
                if n <= 0:
                    break
                sent += n
            sent_requests += sent // len(pull)
            if sent < len(batch):
                blocked_since = blocked_since or time.monotonic()
                if time.monotonic() - blocked_since > 2:
                    break
                batch = batch[sent:] + pull * (sent // len(pull))  # keep whole frames in order
                await asyncio.sleep(0.05)
            else:
                blocked_since = None
                await asyncio.sleep(0)
        growth = peak - baseline
        stopped_reading = blocked_since is not None and time.monotonic() - blocked_since > 2
    assert growth < 40 * MIB, f"RSS grew {growth / MIB:.0f} MiB after {sent_requests} unread pulls"
    assert stopped_reading, f"the broker kept reading: {sent_requests} pulls sent"
    assert probe.failures == 0 and probe.max_latency < 2.0, probe.max_latency
    sock.close()
