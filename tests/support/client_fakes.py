"""Fakes for the client's unit tests, without a broker: an in-process stand-in for the client instance, a tiny
remoting server on 127.0.0.1 (FakePeer) with handlers playing a broker or a name server, and decoded messages."""

from __future__ import annotations

import asyncio
import json

from client.consumer_ops import decode_messages
from client.route import TopicRoute
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand, decode_command, encode_command
from protocol.ids import pack_host
from protocol.message import encode_record

# topic "T" on two brokers: b1 with a master and a slave, b2 with a master
ROUTE = TopicRoute.parse(json.dumps({
    "queueDatas": [{"brokerName": "b1", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
                   {"brokerName": "b2", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}],
    "brokerDatas": [{"cluster": "c", "brokerName": "b1", "brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.9:1"}},
                    {"cluster": "c", "brokerName": "b2", "brokerAddrs": {"0": "10.0.0.2:10911"}}],
}))


class FakeInstance:
    """The client instance as ConsumerOps sees it: routes, and invoke_broker answering from `answers` (addr ->
    (code, remark) or an exception to raise; SUCCESS by default), every call recorded."""

    client_id = "127.0.0.1@fake"

    def __init__(self, answers=None) -> None:
        self.routes = {"T": ROUTE}
        self.answers = answers or {}
        self.calls: list[tuple[str, RemotingCommand]] = []

    async def invoke_broker(self, addr, cmd, timeout=None):
        self.calls.append((addr, cmd))
        answer = self.answers.get(addr, (ResponseCode.SUCCESS, None))
        if isinstance(answer, Exception):
            raise answer
        return cmd.make_response(*answer)


class FakePeer:
    """A remoting server whose answers come from handler(peer, writer, cmd) -> RemotingCommand | None."""

    def __init__(self, handler=None):
        self.handler = handler or (lambda peer, writer, cmd: cmd.make_response(0))
        self.received: list[RemotingCommand] = []
        self.connections = 0
        self.writers = []
        self.server = None
        self.port = 0

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    async def start(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader, writer):
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readexactly(4)
                payload = await reader.readexactly(int.from_bytes(head, "big"))
                cmd = decode_command(payload)
                self.received.append(cmd)
                if cmd.flag & 1:
                    continue  # a response to one of our requests
                reply = self.handler(self, writer, cmd)
                if asyncio.iscoroutine(reply):
                    reply = await reply
                if reply is not None and not cmd.flag & 2:
                    writer.write(encode_command(reply))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self):
        for w in self.writers:
            w.close()
        self.server.close()
        await self.server.wait_closed()


def route_body(brokers, queues=1):
    """A name server's route body: brokers [(name, addr)], each master with `queues` read/write queues."""
    return json.dumps({
        "brokerDatas": [{"brokerName": n, "cluster": "C", "brokerAddrs": {"0": a}} for n, a in brokers],
        "queueDatas": [{"brokerName": n, "perm": 6, "readQueueNums": queues, "writeQueueNums": queues}
                       for n, _ in brokers],
    }).encode()


def broker_handler(send_code):
    """A FakePeer handler answering sends (310, 320) with send_code (or send_code(cmd); None: no answer), anything
    else with SUCCESS."""
    def handler(peer, writer, cmd):
        if cmd.code in (310, 320):
            code = send_code(cmd) if callable(send_code) else send_code
            if code is None:
                return None
            ext = {"msgId": "7F00000100002A9F0000000000000000", "queueId": "0", "queueOffset": "12"}
            return cmd.make_response(code, remark="busy" if code else None, ext_fields=ext)
        return cmd.make_response(0)

    return handler


async def name_server(peers, topics):
    """A FakePeer (from the `peers` factory) answering route queries from topics {topic: route body}."""
    def handler(peer, writer, cmd):
        body = topics.get(cmd.ext_fields["topic"])
        if body is None:
            return cmd.make_response(17, remark="No topic route info in name server for the topic")
        return cmd.make_response(0, body=body)

    return await peers(handler)


STORE = pack_host("127.0.0.1", 10911)


def msgs(offsets, topic=b"T", props=""):
    """Decoded messages of queue 0 at the given queue offsets (bodies "m<offset>"), as a pull returns them."""
    body = b"".join(
        encode_record(
            queue_id=0, flag=0, queue_offset=o, physical_offset=o * 100, sys_flag=0, born_timestamp=1,
            born_host=STORE, store_timestamp=2, store_host=STORE, reconsume_times=0, prepared_transaction_offset=0,
            body=f"m{o}".encode(), topic=topic, properties=props.encode(),
        )
        for o in offsets
    )
    return decode_messages(body, "b", None)
