"""A tiny raw-protocol client for integration tests (FrameDecoder + encode_command over asyncio)."""

from __future__ import annotations

import asyncio
import ssl as ssl_module
import itertools
import json
import time

from protocol.codes import RequestCode, ResponseCode, SerializeType
from protocol.command import RemotingCommand, encode_command
from protocol.frame import FrameDecoder
from protocol.message import MessageRecord, iter_records

_opaque = itertools.count(1)


class WireClient:
    """One TCP connection; responses matched by opaque, broker->client requests queued."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.pending: dict[int, asyncio.Future] = {}
        self.server_requests: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        self.closed = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(cls, addr: str, ssl: "ssl_module.SSLContext | None" = None) -> "WireClient":
        host, port = addr.rsplit(":", 1)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            host, int(port), ssl=ssl, server_hostname="" if ssl is not None else None), 5)
        return cls(reader, writer)

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self.reader.read(1 << 20)
                if not data:
                    break
                for cmd in self.decoder.feed(data):
                    if cmd.is_response:
                        fut = self.pending.pop(cmd.opaque, None)
                        if fut is not None and not fut.done():
                            fut.set_result(cmd)
                    else:
                        self.server_requests.put_nowait(cmd)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.closed.set()
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("connection closed"))

    def make(self, code: int, ext: dict | None = None, body: bytes = b"", *, oneway: bool = False,
             serialize_type: int = SerializeType.JSON) -> RemotingCommand:
        return RemotingCommand.request(code, ext, body, opaque=next(_opaque), oneway=oneway,
                                       serialize_type=serialize_type)

    def send_nowait(self, cmd: RemotingCommand) -> asyncio.Future | None:
        fut = None
        if not cmd.is_oneway:
            fut = asyncio.get_running_loop().create_future()
            self.pending[cmd.opaque] = fut
        self.writer.write(encode_command(cmd))
        return fut

    async def request(self, code: int, ext: dict | None = None, body: bytes = b"", *,
                      serialize_type: int = SerializeType.JSON, timeout: float = 5.0) -> RemotingCommand:
        fut = self.send_nowait(self.make(code, ext, body, serialize_type=serialize_type))
        await self.writer.drain()
        return await asyncio.wait_for(fut, timeout)

    async def oneway(self, code: int, ext: dict | None = None, body: bytes = b"",
                     serialize_type: int = SerializeType.JSON) -> None:
        self.send_nowait(self.make(code, ext, body, oneway=True, serialize_type=serialize_type))
        await self.writer.drain()

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def close(self) -> None:
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 2)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            pass
        self._task.cancel()

    async def __aenter__(self) -> "WireClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ---- conveniences ------------------------------------------------------------------------
    async def heartbeat(self, client_id: str, consumer_group: str | None = None, topic: str | None = None,
                        sub_string: str = "*", model: str = "CLUSTERING", producer_group: str | None = None,
                        sub_version: int | None = None) -> RemotingCommand:
        consumers = []
        if consumer_group:
            subs = []
            if topic:
                subs.append({"topic": topic, "subString": sub_string, "tagsSet": [], "codeSet": [],
                             "subVersion": sub_version or int(time.time() * 1000), "expressionType": "TAG"})
            consumers.append({"groupName": consumer_group, "consumeType": "CONSUME_PASSIVELY",
                              "messageModel": model, "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                              "subscriptionDataSet": subs, "unitMode": False})
        producers = [{"groupName": producer_group}] if producer_group else []
        body = json.dumps({"clientID": client_id, "consumerDataSet": consumers,
                           "producerDataSet": producers}).encode()
        return await self.request(RequestCode.HEART_BEAT, {}, body)


def send_v2_fields(topic: str, queue_id: int = 0, properties: str = "", *, group: str = "pg",
                   born_ts: int | None = None, flag: int = 0, sys_flag: int = 0) -> dict[str, str]:
    return {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": str(sys_flag),
            "g": str(born_ts or int(time.time() * 1000)), "h": str(flag), "i": properties, "j": "0",
            "k": "false", "m": "false"}


def send_v1_fields(topic: str, queue_id: int = 0, properties: str = "", *, group: str = "pg") -> dict[str, str]:
    return {"producerGroup": group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)),
            "flag": "0", "properties": properties, "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}


def pull_fields(topic: str, group: str, queue_id: int = 0, offset: int = 0, *, max_nums: int = 32,
                sys_flag: int = 0x4, subscription: str = "*", suspend_ms: int = 500,
                commit_offset: int = 0) -> dict[str, str]:
    return {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
            "maxMsgNums": str(max_nums), "sysFlag": str(sys_flag), "commitOffset": str(commit_offset),
            "suspendTimeoutMillis": str(suspend_ms), "subscription": subscription, "subVersion": "0",
            "expressionType": "TAG"}


def props(**kv: str) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in kv.items())


def records(body: bytes) -> list[MessageRecord]:
    return list(iter_records(body))


async def wait_until(predicate, what: str, timeout: float = 10.0, interval: float = 0.05):
    """Await ``predicate()`` until it returns something truthy (returned); fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = await predicate()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(interval)


async def pull_records(client: WireClient, topic: str, queue_id: int, group: str = "drain", *,
                       max_pulls: int = 2000, timeout: float = 60.0) -> list[MessageRecord]:
    """Every record of a queue from offset 0 (non-suspending pulls; PULL_RETRY_IMMEDIATELY is stepped over).

    Ends at PULL_NOT_FOUND (the queue's end) or TOPIC_NOT_EXIST; any other answer fails the test, and so does
    a nextBeginOffset that does not move forward (a pull must never go back or stand still)."""
    out: list[MessageRecord] = []
    offset = 0
    deadline = time.monotonic() + timeout
    for _ in range(max_pulls):
        assert time.monotonic() < deadline, f"draining {topic}:{queue_id} took too long"
        resp = await client.request(RequestCode.PULL_MESSAGE,
                                    pull_fields(topic, group, queue_id, offset, max_nums=32, suspend_ms=0))
        if resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.TOPIC_NOT_EXIST):
            return out
        assert resp.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), (resp.code, resp.remark)
        if resp.code == ResponseCode.SUCCESS:
            out.extend(records(resp.body))
        following = int(resp.ext_fields["nextBeginOffset"])
        assert following > offset, (resp.code, resp.remark, offset, following)
        offset = following
    raise AssertionError(f"draining {topic}:{queue_id} took more than {max_pulls} pulls")


async def create_topic(addr: str, topic: str, queues: int = 2, message_type: str | None = None) -> None:
    """UPDATE_AND_CREATE_TOPIC with `queues` read and write queues, perm 6; `message_type` (FIFO, DELAY,
    TRANSACTION, ...) sets the topic's 5.x type (attribute message.type)."""
    fields = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6"}
    if message_type:
        fields["attributes"] = f"+message.type={message_type}"
    async with await WireClient.connect(addr) as client:
        resp = await client.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
