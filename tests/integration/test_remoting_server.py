"""RemotingServer in-process: dispatch rules, serialization echo, error handling, connection isolation."""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.remoting_server import RemotingServer
from protocol.codes import ResponseCode, SerializeType
from protocol.headers import GetMaxOffsetRequestHeader

from tests.support.wire import WireClient

ECHO, SLOW, BAD_HEADER, BOOM, NONE, CALLBACK = 900, 901, 902, 903, 904, 905


@pytest.fixture
async def server():
    seen_oneway: list[int] = []
    channels = []

    def echo(channel, cmd):
        channels.append(channel)
        if cmd.is_oneway:
            seen_oneway.append(cmd.opaque)
        return cmd.make_response(0, "echo", dict(cmd.ext_fields or {}), cmd.body)

    async def slow(channel, cmd):
        await asyncio.sleep(0.05)
        return cmd.make_response(0, "slow")

    def bad_header(channel, cmd):
        GetMaxOffsetRequestHeader.decode(cmd.ext_fields)
        return cmd.make_response(0)

    def boom(channel, cmd):
        raise RuntimeError("kaput")

    async def callback(channel, cmd):
        reply = await channel.invoke(cmd.make_response(0).__class__.request(777, {"q": "1"}, opaque=0), 2.0)
        return cmd.make_response(0, f"client said {reply.remark}")

    srv = RemotingServer({ECHO: echo, SLOW: slow, BAD_HEADER: bad_header, BOOM: boom,
                          NONE: lambda ch, cmd: None, CALLBACK: callback}, "127.0.0.1", 0, name="test")
    await srv.start()
    srv.seen_oneway = seen_oneway
    srv.seen_channels = channels
    yield srv
    await srv.close()


async def _client(srv) -> WireClient:
    return await WireClient.connect(f"127.0.0.1:{srv.port}")


@pytest.mark.parametrize("stype", [SerializeType.JSON, SerializeType.ROCKETMQ, SerializeType.MSGPACK])
async def test_echo_keeps_opaque_and_serialization(server, stype):
    async with await _client(server) as client:
        resp = await client.request(ECHO, {"k": "v"}, b"payload", serialize_type=stype)
        assert resp.code == 0 and resp.remark == "echo"
        assert resp.serialize_type == stype
        assert resp.ext_fields == {"k": "v"} and resp.body == b"payload"
        assert server.seen_channels[-1].remote_addr.startswith("127.0.0.1:")


async def test_async_handler_and_unknown_code_and_errors(server):
    async with await _client(server) as client:
        assert (await client.request(SLOW)).remark == "slow"
        unknown = await client.request(12345)
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert unknown.remark == " request type 12345 not supported"
        bad = await client.request(BAD_HEADER, {"queueId": "0"})
        assert bad.code == ResponseCode.INVALID_PARAMETER and "topic" in bad.remark
        boom = await client.request(BOOM)
        assert boom.code == ResponseCode.SYSTEM_ERROR and "kaput" in boom.remark


async def test_oneway_is_never_answered(server):
    async with await _client(server) as client:
        await client.oneway(ECHO, {"a": "1"})
        await client.oneway(12345)
        resp = await client.request(ECHO)  # a later two-way request still works and is the only answer
        assert resp.code == 0
        await asyncio.sleep(0.05)
        assert not client.pending and server.seen_oneway


async def test_pipelined_requests_all_answered(server):
    async with await _client(server) as client:
        futures = [client.send_nowait(client.make(ECHO if i % 3 else SLOW, {"i": str(i)})) for i in range(500)]
        await client.writer.drain()
        responses = await asyncio.wait_for(asyncio.gather(*futures), 10)
        assert [r.code for r in responses] == [0] * 500


async def test_malformed_frame_closes_only_that_connection(server):
    good = await _client(server)
    bad = await _client(server)
    try:
        await bad.send_raw(struct.pack(">ii", 0x7FFFFFFF, 0) + b"junk")
        await asyncio.wait_for(bad.closed.wait(), 5)
        assert (await good.request(ECHO)).code == 0
        third = await _client(server)
        assert (await third.request(ECHO)).code == 0
        await third.close()
    finally:
        await good.close()
        await bad.close()


async def test_broker_to_client_invoke(server):
    async with await _client(server) as client:
        fut = client.send_nowait(client.make(CALLBACK))
        pushed = await asyncio.wait_for(client.server_requests.get(), 5)
        assert pushed.code == 777 and not pushed.is_oneway
        client.writer.write(__import__("protocol.command", fromlist=["x"]).encode_command(
            pushed.make_response(0, "pong")))
        resp = await asyncio.wait_for(fut, 5)
        assert resp.remark == "client said pong"
