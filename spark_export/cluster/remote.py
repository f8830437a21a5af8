"""The remoting requests a cluster read sends: routes from the name server, queue offsets and pulls from brokers.

Spark calls a reader from plain threads (planning on the driver, read() on executors), so this is a blocking facade:
each ClusterClient owns a private event loop and runs the project's asyncio remoting client on it; requests to many
queues go out together (one round trip for a whole cluster's offsets). Addresses are tried master first, then the
slaves of the same brokerName: replicas hold the same queue offsets, so a read can change replica mid-range.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from protocol.codes import RequestCode, ResponseCode, SerializeType
from protocol.command import RemotingCommand, encode_header
from spark_export.cluster.options import ClusterOptions

if TYPE_CHECKING:
    from client.route import TopicRoute

__all__ = ["ClusterClient", "ClusterReadError", "QueueRef", "PullReply", "PullFrames", "queue_homes"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_PERM_READ = 4
_PULL_FLAG_SUBSCRIPTION = 0x4  # send the subscription with the pull; never commit (0x1), never suspend (0x2)
_UNAVAILABLE = {ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE}


_FRAME_PREFIX = struct.Struct(">iI")  # frame length, serialize type << 24 | header length
_OFFSET_MARK, _COUNT_MARK, _OPAQUE_MARK = "QOFFSETMARKQ", "QCOUNTMARKQ", 1_999_999_937


class PullFrames:
    """The PULL_MESSAGE request frames of one queue: the JSON header encoded once and cut where the offset, the
    count and the opaque go, so a pull is a splice (no dict, no per-field escaping). None from `make` when the
    header cannot be cut safely (a marker appears elsewhere): the caller then builds a command."""

    __slots__ = ("pieces",)

    def __init__(self, pieces: tuple[bytes, bytes, bytes, bytes]) -> None:
        self.pieces = pieces

    @classmethod
    def make(cls, fields: dict[str, str]) -> "PullFrames | None":
        probe = RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=_OPAQUE_MARK,
                                ext_fields={**fields, "queueOffset": _OFFSET_MARK, "maxMsgNums": _COUNT_MARK})
        header = encode_header(probe)
        marks = (_OFFSET_MARK.encode(), _COUNT_MARK.encode(), b'"opaque":%d,' % _OPAQUE_MARK)
        if any(header.count(mark) != 1 for mark in marks):
            return None
        at = sorted((header.index(mark), k) for k, mark in enumerate(marks))
        if [k for _, k in at] != [0, 1, 2]:  # extFields (in the order given) come before the opaque
            return None
        head, rest = header.split(marks[0])
        middle, rest = rest.split(marks[1])
        before, after = rest.split(marks[2])
        return cls((head, middle, before + b'"opaque":', b"," + after))

    def frame(self, offset: int, count: int, opaque: int) -> bytes:
        p0, p1, p2, p3 = self.pieces
        header = b"%b%d%b%d%b%d%b" % (p0, offset, p1, count, p2, opaque, p3)
        return _FRAME_PREFIX.pack(4 + len(header), (SerializeType.JSON << 24) | len(header)) + header


class ClusterReadError(RuntimeError):
    """A read cannot go on; the message is one line a user can act on (it starts with 'rocketmq:')."""


@dataclass(frozen=True, order=True, slots=True)
class QueueRef:
    """A message queue: queue ids restart at 0 on every brokerName."""

    topic: str
    broker: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.broker}/{self.queue_id}"


@dataclass(frozen=True, slots=True)
class PullReply:
    code: int
    body: bytes | None
    next_begin: int
    min_offset: int
    max_offset: int
    suggested: int
    addr: str
    remark: str | None


def _int(value: object, default: int = 0) -> int:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


def queue_homes(route: TopicRoute, topic: str) -> dict[QueueRef, tuple[str, ...]]:
    """Readable queues of a topic and, for each, its brokerName's addresses: the master (id 0) first, then the
    slaves by id."""
    homes: dict[QueueRef, tuple[str, ...]] = {}
    for queue_data in route.queues:
        if not queue_data.perm & _PERM_READ:
            continue
        broker = route.broker(queue_data.broker_name)
        addrs = tuple(addr for _, addr in sorted(broker.addrs.items())) if broker is not None else ()
        for queue_id in range(queue_data.read_queue_nums):
            homes[QueueRef(topic, queue_data.broker_name, queue_id)] = addrs
    return homes


class ClusterClient:
    """Blocking access to one cluster for one reader (driver or executor task). Close it (or use `with`)."""

    def __init__(self, options: ClusterOptions) -> None:
        # the client package is imported here, not with this module: a streaming query's read function is planned
        # in a new Python process that builds (and pickles) a reader but never sends a request (~0.12 s saved)
        from client.credentials import Credentials
        from client.instance import NameServerClient
        from client.remoting import RemotingClient, tls_context

        self.options = options
        credentials = (Credentials(options.access_key, options.secret_key, options.security_token)
                       if options.access_key and options.secret_key else None)
        ssl_context = (tls_context(True, options.tls_trust_cert_path, options.tls_cert_path, options.tls_key_path)
                       if options.tls else None)
        self.timeout = options.pull_timeout_ms / 1000
        self.loop = asyncio.new_event_loop()
        self.name_servers = NameServerClient(options.name_servers, min(self.timeout, 5.0), credentials, ssl_context)
        self.brokers = RemotingClient(credentials=credentials, ssl_context=ssl_context, allow_msgpack=False,
                                      connect_timeout=min(self.timeout, 3.0))
        self._pull_frames: dict[QueueRef, PullFrames | None] = {}  # signed requests (ACL) are built per pull

    def __enter__(self) -> "ClusterClient":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.loop.run_until_complete(self._close())
        finally:
            self.loop.close()

    async def _close(self) -> None:
        await self.name_servers.close()
        await self.brokers.close()

    def run(self, coro: Awaitable[T]) -> T:
        """Run one coroutine on this client's loop (from the thread that owns the client)."""
        return self.loop.run_until_complete(coro)

    # ----------------------------------------------------------------------------------------- name server
    async def route(self, topic: str) -> TopicRoute:
        from client.errors import MQBrokerError, RemotingError

        try:
            return await self.name_servers.get_route(topic)
        except MQBrokerError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                raise ClusterReadError(f"rocketmq: topic {topic!r} is unknown to the name server "
                                       f"{self.options.name_servers} ({exc.remark or 'no route'})") from None
            raise ClusterReadError(f"rocketmq: the name server refused the route of {topic!r}: "
                                   f"{exc.remark} (code {exc.code})") from None
        except RemotingError as exc:
            reason = str(exc).rpartition("]: ")[2] or str(exc)
            raise ClusterReadError(f"rocketmq: no name server reachable at {self.options.name_servers} ({reason})") from None

    async def queues(self, topics: Iterable[str]) -> dict[QueueRef, tuple[str, ...]]:
        """Every readable queue of the topics, with its replicas' addresses."""
        homes: dict[QueueRef, tuple[str, ...]] = {}
        for topic, route in zip(topics, await asyncio.gather(*(self.route(t) for t in topics))):
            homes.update(queue_homes(route, topic))
        return dict(sorted(homes.items()))

    # ----------------------------------------------------------------------------------------- brokers
    async def _first_answer(self, queue: QueueRef, addrs: tuple[str, ...], what: str,
                            make: Callable[[], RemotingCommand]) -> tuple[RemotingCommand, str]:
        """The first replica that answers (master first). An error answer other than 'busy' is final."""
        if not addrs:
            raise ClusterReadError(f"rocketmq: no address known for broker {queue.broker!r} ({what} of {queue})")
        from client.errors import RemotingError

        problems = []
        for addr in addrs:
            try:
                reply = await self.brokers.invoke(addr, make(), self.timeout)
            except RemotingError as exc:
                problems.append(f"{addr}: {exc}")
                continue
            if reply.code in _UNAVAILABLE:
                problems.append(f"{addr}: {reply.remark or 'busy'} (code {reply.code})")
                continue
            return reply, addr
        raise ClusterReadError(f"rocketmq: no replica of broker {queue.broker!r} answered {what} of {queue}: "
                               + "; ".join(problems))

    async def queue_offset(self, queue: QueueRef, addrs: tuple[str, ...], code: int,
                           timestamp_ms: int | None = None) -> int:
        """GET_MIN_OFFSET / GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP of one queue."""
        what = {RequestCode.GET_MIN_OFFSET: "the min offset", RequestCode.GET_MAX_OFFSET: "the max offset",
                RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: "the offset at a timestamp"}[code]

        def make() -> RemotingCommand:
            fields: dict[str, object] = {"topic": queue.topic, "queueId": str(queue.queue_id), "bname": queue.broker}
            if code == RequestCode.GET_MAX_OFFSET:
                fields["committed"] = "true"
            if timestamp_ms is not None:
                fields["timestamp"] = str(timestamp_ms)
                fields["boundaryType"] = "LOWER"
            return RemotingCommand(code=code, ext_fields=fields)

        reply, addr = await self._first_answer(queue, addrs, what, make)
        if reply.code != ResponseCode.SUCCESS:
            raise ClusterReadError(f"rocketmq: broker {queue.broker!r} ({addr}) refused {what} of {queue}: "
                                   f"{reply.remark} (code {reply.code})")
        return _int((reply.ext_fields or {}).get("offset"), 0)

    def _pull_fields(self, queue: QueueRef, offset: int, max_nums: int) -> dict[str, str]:
        opts = self.options
        return {
            "consumerGroup": opts.consumer_group, "topic": queue.topic, "queueId": str(queue.queue_id),
            "queueOffset": str(offset), "maxMsgNums": str(max_nums), "sysFlag": str(_PULL_FLAG_SUBSCRIPTION),
            "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": opts.sub_expression,
            "subVersion": "0", "expressionType": "TAG", "bname": queue.broker,
        }

    async def pull(self, queue: QueueRef, addr: str, offset: int, max_nums: int) -> PullReply:
        """One PULL_MESSAGE from one replica (transport errors are raised: the caller picks another replica)."""
        brokers = self.brokers
        frames = None
        if brokers.credentials is None:
            if queue not in self._pull_frames:
                self._pull_frames[queue] = PullFrames.make(self._pull_fields(queue, 0, 0))
            frames = self._pull_frames[queue]
        conn = brokers.connected(addr) if frames is not None else None
        if conn is None and frames is not None:
            conn = await brokers.connection(addr)
        if conn is not None and conn.serialize_type == SerializeType.JSON:
            opaque = brokers.next_opaque()
            answer = conn.request_frame(opaque, frames.frame(offset, max_nums, opaque), self.timeout,
                                        RequestCode.PULL_MESSAGE)
            try:
                reply = await answer
            except asyncio.CancelledError:
                conn.cancel(opaque)
                raise
        else:
            fields = self._pull_fields(queue, offset, max_nums)
            reply = await brokers.invoke(addr, RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=fields),
                                         self.timeout)
        hdr = reply.ext_fields or {}
        return PullReply(reply.code, reply.body, _int(hdr.get("nextBeginOffset"), offset), _int(hdr.get("minOffset")),
                         _int(hdr.get("maxOffset")), _int(hdr.get("suggestWhichBrokerId")), addr, reply.remark)
