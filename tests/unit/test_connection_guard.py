"""ConnectionGuard pieces (frame budget, rate-limited log, limits from config) and their effect on an
in-process RemotingServer over real TCP: budget waiters and write-paused connections lose nothing."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest

from broker.config import BrokerConfig
from broker.connection_guard import ConnectionGuard, ConnectionLimits, FrameBudget
from broker.log_limit import RateLimitedLog
from broker.namesrv.__main__ import load_namesrv_config
from broker.remoting_server import RemotingServer
from protocol.command import RemotingCommand, encode_command
from protocol.frame import FrameDecoder

MIB = 1024 * 1024


class Holder:
    def __init__(self, name: str) -> None:
        self.peer = name
        self.frame_bytes_held = 0
        self.granted = 0
        self.closed = False

    def budget_granted(self) -> None:
        self.granted += 1

    def close_for_budget(self) -> None:
        self.closed = True


def _budget(limit: int = 10, stall: float = 5.0) -> FrameBudget:
    return FrameBudget(limit, stall, RateLimitedLog(logging.getLogger("test.budget")))


def test_budget_grants_in_fifo_order_and_lets_an_oversize_frame_through_alone():
    budget = _budget(10)
    a, b, c, d = Holder("a"), Holder("b"), Holder("c"), Holder("d")
    assert budget.reserve(a, 6) and not budget.reserve(b, 6)
    assert not budget.reserve(c, 1)  # fits, but waits behind b (no overtaking)
    assert budget.used == 6 and budget.waiting == 2
    budget.release(a)
    assert (b.granted, c.granted) == (1, 1) and budget.used == 7
    assert not budget.reserve(d, 50)
    budget.release(b)
    budget.release(c)
    assert d.granted == 1 and budget.used == 50  # larger than the whole budget, granted when alone
    assert budget.reserve(d, 4) and budget.used == 4  # re-reserving replaces the old size
    budget.release(d)
    budget.release(d)
    assert budget.used == 0 and budget.holders == 0


def test_budget_closes_stalled_holders_only_while_others_wait():
    budget = _budget(10, stall=5.0)
    a, b, c = Holder("a"), Holder("b"), Holder("c")
    a.frame_bytes_held = 100
    assert budget.reserve(a, 10)
    assert budget.close_stalled(0.0) == 0 and budget.close_stalled(100.0) == 0  # nobody waits: no harm done
    assert not budget.reserve(b, 5) and not budget.reserve(c, 5)
    assert budget.close_stalled(200.0) == 0  # progress tracking starts now
    a.frame_bytes_held = 200
    assert budget.close_stalled(204.0) == 0  # it progressed
    assert budget.close_stalled(208.0) == 0
    assert budget.close_stalled(209.5) == 1 and a.closed
    assert b.granted == 1 and c.granted == 1 and budget.used == 10


def test_limits_come_from_broker_config_and_names_match_its_keys():
    config = BrokerConfig(server_max_connections=7, write_buffer_high_water_mark=4096,
                          write_buffer_low_water_mark=1024, server_channel_max_idle_time_seconds=3)
    limits = ConnectionLimits.from_config(config)
    assert (limits.server_max_connections, limits.write_buffer_high_water_mark,
            limits.server_channel_max_idle_time_seconds) == (7, 4096, 3)
    assert set(ConnectionLimits.keys()) <= set(BrokerConfig.keys())
    defaults = BrokerConfig()
    assert ConnectionLimits.from_config(defaults) == ConnectionLimits()


def test_name_server_config_file(tmp_path):
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=9877\nserverMaxConnections = 12\nwriteBufferHighWaterMark=65536\nrocketmqHome=/x\n")
    settings, limits = load_namesrv_config(str(conf))
    assert settings["listenPort"] == 9877 and "serverMaxConnections" not in settings
    assert limits.server_max_connections == 12 and limits.write_buffer_high_water_mark == 65536
    conf.write_text("serverMaxConnections=many\n")
    with pytest.raises(ValueError, match="serverMaxConnections: expected an integer"):
        load_namesrv_config(str(conf))
    conf.write_text("writeBufferLowWaterMark=2000000\n")  # above the (default) high mark
    with pytest.raises(ValueError, match="writeBufferLowWaterMark"):
        load_namesrv_config(str(conf))


# ---- in-process server over TCP ----------------------------------------------------------------
ECHO = 900


async def _read_responses(reader: asyncio.StreamReader, count: int, timeout: float = 10.0) -> list[RemotingCommand]:
    decoder = FrameDecoder(64 * MIB)
    out: list[RemotingCommand] = []

    async def run() -> None:
        while len(out) < count:
            data = await reader.read(1 << 20)
            assert data, "connection closed"
            out.extend(decoder.feed(data))

    await asyncio.wait_for(run(), timeout)
    return out


async def test_budget_waiter_is_paused_then_served():
    seen: list[int] = []

    def echo(channel, cmd):
        seen.append(cmd.opaque)
        return cmd.make_response(0, "ok", None, b"")

    guard = ConnectionGuard(ConnectionLimits(server_max_buffered_frame_bytes=1 * MIB))
    server = RemotingServer({ECHO: echo}, "127.0.0.1", 0, name="t", guard=guard)
    await server.start()
    try:
        frames = [encode_command(RemotingCommand.request(ECHO, {}, b"z" * (700 * 1024), opaque=i)) for i in (1, 2)]
        (ra, wa), (rb, wb) = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        wa.write(frames[0][:200_000])
        await asyncio.sleep(0.2)
        wb.write(frames[1][:200_000])
        await asyncio.sleep(0.2)
        assert guard.budget.holders == 1 and guard.budget.waiting == 1
        wb.write(frames[1][200_000:])  # b waits for a's frame however much it sends
        await asyncio.sleep(0.2)
        assert seen == []
        wa.write(frames[0][200_000:])
        assert [r.opaque for r in await _read_responses(ra, 1)] == [1]
        assert [r.opaque for r in await _read_responses(rb, 1)] == [2]
        assert guard.budget.used == 0 and guard.budget.waiting == 0
        wa.close()
        wb.close()
    finally:
        await server.close()


async def test_unread_responses_pause_reading_and_nothing_is_lost():
    dispatched: list[int] = []
    body = b"r" * (64 * 1024)

    def big(channel, cmd):
        dispatched.append(cmd.opaque)
        return cmd.make_response(0, None, None, body)

    guard = ConnectionGuard(ConnectionLimits(write_buffer_high_water_mark=256 * 1024,
                                             write_buffer_low_water_mark=64 * 1024))
    server = RemotingServer({ECHO: big}, "127.0.0.1", 0, name="t", guard=guard)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, limit=1 << 20)
        requests = 2000  # ~128 MiB of responses if all were produced at once
        writer.write(b"".join(encode_command(RemotingCommand.request(ECHO, {}, b"", opaque=i))
                              for i in range(1, requests + 1)))
        await asyncio.sleep(0.5)
        assert len(dispatched) < requests // 4, len(dispatched)  # stopped taking requests it cannot answer
        (channel,) = server.channels
        assert not channel.transport.is_reading()
        responses = await _read_responses(reader, requests, timeout=60)
        assert [r.opaque for r in responses] == list(range(1, requests + 1))
        assert all(len(r.body) == len(body) for r in responses)
        assert channel.transport.is_reading()
        writer.close()
    finally:
        await server.close()


async def test_frame_length_prefix_alone_reserves_nothing_until_it_is_big():
    guard = ConnectionGuard(ConnectionLimits(server_max_buffered_frame_bytes=1 * MIB))
    server = RemotingServer({}, "127.0.0.1", 0, name="t", guard=guard)
    await server.start()
    try:
        _, small = await asyncio.open_connection("127.0.0.1", server.port)
        small.write(struct.pack(">i", 1000) + b"x" * 10)  # an unfinished small frame: not budgeted
        _, big = await asyncio.open_connection("127.0.0.1", server.port)
        big.write(struct.pack(">i", 900 * 1024) + b"x" * 10)
        await asyncio.sleep(0.2)
        assert guard.budget.used == 900 * 1024 + 4 and guard.connections == 2
        big.close()
        small.close()
        await asyncio.sleep(0.2)
        assert guard.budget.used == 0 and guard.connections == 0
    finally:
        await server.close()


def test_fd_limit_warning_names_the_key(caplog):
    import resource

    original = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft, hard = original
    if soft == resource.RLIM_INFINITY:  # give the process a finite limit (lowering is always allowed)
        soft = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        guard = ConnectionGuard(ConnectionLimits(server_max_connections=soft + 1))
        with caplog.at_level(logging.WARNING, logger="broker.connections"):
            guard.check_fd_limit()
            guard.check_fd_limit()
        assert len(caplog.records) == 1 and "ulimit -n" in caplog.records[0].getMessage()
        caplog.clear()
        ConnectionGuard(ConnectionLimits(server_max_connections=max(1, soft // 2 - 256))).check_fd_limit()
        assert not caplog.records
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, original)


def test_standalone_name_server_refuses_a_bad_config(tmp_path, capsys):
    from broker.namesrv.__main__ import main

    conf = tmp_path / "namesrv.conf"
    conf.write_text("serverChannelMaxIdleTimeSeconds=0\n")
    assert main(["-c", str(conf)]) == 2
    assert "serverChannelMaxIdleTimeSeconds must be greater than 0" in capsys.readouterr().err
    assert main(["-c", str(tmp_path / "missing.conf")]) == 2
    assert "cannot read" in capsys.readouterr().err
