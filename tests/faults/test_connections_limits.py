"""Connection limits of the real broker (and name server) processes: idle connections are closed on every
port, connections over serverMaxConnections are refused, and a flood of bad connections makes a bounded
number of log lines."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.broker_process import NamesrvProcess
from protocol.codes import RequestCode, ResponseCode

from tests.support.wire import WireClient

from tests.support.probes import LatencyProbe


async def _closed_within(reader: asyncio.StreamReader, timeout: float) -> bool:
    """True when the peer closes the connection within `timeout` seconds (nothing is sent to it)."""
    try:
        return await asyncio.wait_for(reader.read(1), timeout) == b""
    except asyncio.TimeoutError:
        return False
    except ConnectionError:
        return True


async def _open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)


async def test_idle_connections_are_closed_on_every_port(broker_factory):
    broker = broker_factory("broker-idle-ports", extra={"serverChannelMaxIdleTimeSeconds": 1})
    ports = {"broker": broker.port, "vip": broker.port - 2, "namesrv": broker.namesrv_port}
    silent = {name: await _open(port) for name, port in ports.items()}
    started = time.monotonic()
    results = await asyncio.gather(*(_closed_within(reader, 8) for reader, _ in silent.values()))
    elapsed = time.monotonic() - started
    assert dict(zip(silent, results)) == {name: True for name in silent}
    assert elapsed >= 0.8  # not closed before the idle timeout
    for _, writer in silent.values():
        writer.close()


async def test_busy_connection_outlives_the_idle_timeout(broker_factory):
    broker = broker_factory("broker-idle-busy", extra={"serverChannelMaxIdleTimeSeconds": 1})
    async with await WireClient.connect(broker.namesrv_addr) as client:
        for _ in range(15):  # 3 s of traffic every 0.2 s
            resp = await client.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
            assert resp.code == ResponseCode.SUCCESS
            await asyncio.sleep(0.2)
        assert not client.closed.is_set()


async def test_standalone_name_server_reads_its_config_and_closes_idle_connections(tmp_path):
    namesrv = NamesrvProcess(workdir=tmp_path, conf={"serverChannelMaxIdleTimeSeconds": 1, "serverMaxConnections": 3,
                                                     "kvConfigPath": "/tmp/unused.json"})
    port = namesrv.port
    try:
        reader, writer = await _open(port)
        assert await _closed_within(reader, 8)
        writer.close()
        held = [await _open(port) for _ in range(4)]  # one over serverMaxConnections=3
        assert await _closed_within(held[3][0], 5)
        assert not await _closed_within(held[0][0], 0.3)
        for _, w in held:
            w.close()
    finally:
        namesrv.stop()
    output = namesrv.log_text()
    assert "kvConfigPath" in output  # reported as unused, not fatal
    assert "serverMaxConnections=3 reached" in output


async def test_connections_over_the_limit_are_closed_and_logged_once(broker_factory):
    broker = broker_factory("broker-maxconn", extra={"serverMaxConnections": 5})
    clients = [await WireClient.connect(broker.addr) for _ in range(5)]
    try:
        for client in clients:
            resp = await client.request(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"})
            assert resp.code == ResponseCode.SUCCESS
        extra = [await _open(broker.port) for _ in range(10)]
        assert all(await asyncio.gather(*(_closed_within(reader, 5) for reader, _ in extra)))
        for _, writer in extra:
            writer.close()
        # the earlier connections keep working
        for client in clients:
            resp = await client.request(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"})
            assert resp.code == ResponseCode.SUCCESS and not client.closed.is_set()
    finally:
        for client in clients:
            await client.close()
    log = broker.wait_for_log("serverMaxConnections=5 reached")
    assert log.count("serverMaxConnections=5 reached") == 1, log[-2000:]
    # Closed connections free their slots (the count includes the VIP and name server ports).
    async with await WireClient.connect(broker.namesrv_addr) as again:
        resp = await again.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert resp.code == ResponseCode.SUCCESS


@pytest.mark.slow
async def test_malformed_frame_flood_makes_few_log_lines(broker_factory):
    broker = broker_factory("broker-malformed")
    bad_frames = [b"\x00\x00\x00\x01x", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x08\x00\x00\x00\x09{{{{"]
    async with LatencyProbe(broker.addr) as probe:
        for round_ in range(20):  # 20 x 50 = 1,000 connections, each sending one malformed frame
            conns = [await _open(broker.port if i % 3 else broker.namesrv_port) for i in range(50)]
            for i, (_, writer) in enumerate(conns):
                writer.write(bad_frames[(round_ + i) % len(bad_frames)])
            closed = await asyncio.gather(*(_closed_within(reader, 5) for reader, _ in conns))
            assert all(closed)
            for _, writer in conns:
                writer.close()
    assert probe.failures == 0 and probe.max_latency < 2.0
    lines = [line for line in broker.log_text().splitlines() if "closing connection from" in line]
    assert 1 <= len(lines) <= 6, len(lines)
