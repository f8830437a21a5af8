"""Client side of the remoting transport: one pipelined asyncio connection per address.

Many requests can be in flight on one connection; responses are matched by opaque. Writes issued in the same event
loop iteration are coalesced into one socket write (a large win with thousands of concurrent sends). Timeouts are
enforced by a per-connection sweep rather than one timer per request. A closed connection fails its pending requests
with RemotingClosedError and is replaced on next use.

msgpack negotiation (project contract): when `heartbeat_body` is given (broker connections), each new connection first
sends HEART_BEAT; only if the reply's extField `serializeTypes` lists MSGPACK does that connection switch to
serialize type 2. Name-server connections and stock brokers always stay on JSON.

ACL (plain ACL 4.x): a RemotingClient given `credentials` signs every request it sends through `request` / `oneway`
(the connection handshake included), name servers too, as the reference clients do. Pre-encoded frames
(`request_frame` / `oneway_frame`) are sent as they are: callers check `owner.credentials` and build a command
instead. Responses to broker-initiated requests are not signed (brokers do not check responses).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import ssl
from collections.abc import Awaitable, Callable

from client.credentials import Credentials
from client.errors import RemotingClosedError, RemotingConnectError, RemotingError, RemotingTimeoutError
from protocol.codes import RequestCode, ResponseCode, SerializeType
from protocol.command import RemotingCommand, encode_command
from protocol.frame import FrameDecoder

log = logging.getLogger(__name__)

RequestHandler = Callable[["Connection", RemotingCommand], "RemotingCommand | None | Awaitable[RemotingCommand | None]"]

_SWEEP_INTERVAL = 0.05
_MAX_FRAME = 16 * 1024 * 1024


def split_addr(addr: str) -> tuple[str, int]:
    """'host:port' (IPv6 as '[::1]:port' or 'a::b:port') -> (host, port)."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"address {addr!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def announces_msgpack(reply: RemotingCommand) -> bool:
    """True if a HEART_BEAT reply carries serializeTypes containing MSGPACK (only brokers of this project do)."""
    ext = reply.ext_fields
    if not ext:
        return False
    value = ext.get("serializeTypes")
    if value is None:
        return False
    if isinstance(value, (list, tuple)):
        names = [str(v) for v in value]
    else:
        names = str(value).split(",")
    return any(n.strip().upper() == "MSGPACK" for n in names)


class Connection(asyncio.Protocol):
    """One TCP connection; matches responses to pending futures by opaque."""

    def __init__(self, addr: str, owner: RemotingClient) -> None:
        self.addr = addr
        self.owner = owner
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(owner.max_frame_size)
        self.serialize_type: int = SerializeType.JSON
        self.broker_version: int | None = None
        self.closed = False
        self.close_reason: str | None = None
        # opaque -> (future, deadline, request code)
        self.pending: dict[int, tuple[asyncio.Future, float, int]] = {}
        self._out: list[bytes] = []
        self._sweeper: asyncio.TimerHandle | None = None

    # ----------------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            commands = self.decoder.feed(data)
        except Exception as exc:  # ProtocolError: the stream is unusable
            log.warning("closing connection to %s: undecodable data from peer: %s", self.addr, exc)
            self.abort(f"undecodable data from peer: {exc}")
            return
        pending = self.pending
        for cmd in commands:
            if cmd.flag & 1:
                entry = pending.pop(cmd.opaque, None)
                if entry is not None:
                    fut = entry[0]
                    if not fut.done():
                        fut.set_result(cmd)
                # else: late response to a timed-out request; dropped like the Java client does.
            else:
                self._handle_request(cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.close_reason is None:
            self.close_reason = f"connection lost: {exc}" if exc else "connection closed by peer"
        self._out.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        pending, self.pending = self.pending, {}
        for fut, _deadline, code in pending.values():
            if not fut.done():
                fut.set_exception(
                    RemotingClosedError(
                        f"connection to {self.addr} closed ({self.close_reason}) while waiting for the response "
                        f"to request code {code}"
                    )
                )
        self.owner._forget(self)

    # ----------------------------------------------------------------- sending
    def _write(self, frame: bytes) -> None:
        out = self._out
        out.append(frame)
        n = len(out)
        if n == 1:
            if len(self.pending) <= 1:  # the only request in flight: nothing to join it with, so no loop turn
                self._flush()
            else:
                self.loop.call_soon(self._flush)
        elif n >= self.owner.write_batch_frames:
            # Hand a chunk to the peer now, so it works while we keep encoding (overlap instead of lock-step).
            self._flush()

    def _flush(self) -> None:
        out = self._out
        if not out or self.transport is None or self.closed:
            out.clear()
            return
        if len(out) == 1:
            self.transport.write(out[0])
        else:
            self.transport.write(b"".join(out))
        out.clear()

    def request_frame(self, opaque: int, frame: bytes, timeout: float, code: int = 0) -> asyncio.Future:
        """Send a pre-encoded request frame carrying `opaque` (as it is: never signed); the future resolves to the
        response command."""
        if self.closed:
            raise RemotingClosedError(f"connection to {self.addr} is closed ({self.close_reason})")
        fut = self.loop.create_future()
        self.pending[opaque] = (fut, self.loop.time() + timeout, code)
        if self._sweeper is None:
            self._sweeper = self.loop.call_later(_SWEEP_INTERVAL, self._sweep)
        self._write(frame)
        return fut

    def request(self, cmd: RemotingCommand, timeout: float) -> asyncio.Future:
        """Send a two-way request (opaque assigned here); returns the response future."""
        cmd.opaque = opaque = self.owner.next_opaque()
        cmd.serialize_type = self.serialize_type
        credentials = self.owner.credentials
        if credentials is not None:
            credentials.sign(cmd)
        return self.request_frame(opaque, encode_command(cmd), timeout, cmd.code)

    def oneway_frame(self, frame: bytes) -> None:
        """Send a pre-encoded one-way frame (flag bit 1 already set by the caller; never signed)."""
        if self.closed:
            raise RemotingClosedError(f"connection to {self.addr} is closed ({self.close_reason})")
        self._write(frame)

    def oneway(self, cmd: RemotingCommand) -> None:
        if self.closed:
            raise RemotingClosedError(f"connection to {self.addr} is closed ({self.close_reason})")
        cmd.opaque = self.owner.next_opaque()
        cmd.flag |= 2
        cmd.serialize_type = self.serialize_type
        credentials = self.owner.credentials
        if credentials is not None:
            credentials.sign(cmd)
        self._write(encode_command(cmd))

    def cancel(self, opaque: int) -> None:
        """Forget a pending request (its awaiting coroutine was cancelled)."""
        self.pending.pop(opaque, None)

    def _sweep(self) -> None:
        self._sweeper = None
        pending = self.pending
        if not pending:
            return
        now = self.loop.time()
        expired = [opaque for opaque, entry in pending.items() if entry[1] <= now]
        for opaque in expired:
            fut, _deadline, code = pending.pop(opaque)
            if not fut.done():
                fut.set_exception(
                    RemotingTimeoutError(f"request code {code} to {self.addr} timed out (opaque {opaque})")
                )
        if pending and not self.closed:
            self._sweeper = self.loop.call_later(_SWEEP_INTERVAL, self._sweep)

    # ----------------------------------------------------------------- broker -> client requests
    def _handle_request(self, cmd: RemotingCommand) -> None:
        handler = self.owner.request_handler
        try:
            result = handler(self, cmd) if handler is not None else None
        except Exception as exc:  # a handler bug must not kill the connection
            log.exception("handler for broker request code %s failed", cmd.code)
            result = cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        if inspect.isawaitable(result):
            task = self.loop.create_task(self._finish_request(cmd, result))
            self.owner._tasks.add(task)
            task.add_done_callback(self.owner._tasks.discard)
            return
        self._reply(cmd, result)

    async def _finish_request(self, cmd: RemotingCommand, awaitable: Awaitable) -> None:
        try:
            result = await awaitable
        except Exception as exc:
            log.exception("handler for broker request code %s failed", cmd.code)
            result = cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        self._reply(cmd, result)

    def _reply(self, cmd: RemotingCommand, result: RemotingCommand | None) -> None:
        if cmd.flag & 2 or self.closed:
            return  # one-way requests never get a reply
        if result is None:
            if self.owner.request_handler is not None and cmd.code in self.owner.silent_codes:
                return
            result = cmd.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f" request type {cmd.code} not supported"
            )
        result.opaque = cmd.opaque
        result.flag |= 1
        self._write(encode_command(result))

    # ----------------------------------------------------------------- closing
    def abort(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def close(self, reason: str = "closed by client") -> None:
        if self.close_reason is None:
            self.close_reason = reason
        if self.transport is not None and not self.closed:
            self._flush()
            self.transport.close()


def tls_context(
    tls: bool | ssl.SSLContext | None = True,
    ca_path: str | None = None,
    cert_path: str | None = None,
    key_path: str | None = None,
    verify_hostname: bool = False,
) -> ssl.SSLContext | None:
    """Client TLS: None when ``tls`` is false, the context itself when one is given, else a context that verifies
    brokers and name servers against ``ca_path`` (the system store when None) and presents
    ``cert_path``/``key_path`` for mutual TLS. Host names are not checked by default: clients reach brokers by
    the IP the name server hands out, which certificates rarely list; the CA check still applies."""
    if not tls:
        return None
    if isinstance(tls, ssl.SSLContext):
        return tls
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_path)
    ctx.check_hostname = verify_hostname
    if cert_path:
        ctx.load_cert_chain(cert_path, key_path)
    return ctx


class RemotingClient:
    """Pool of connections keyed by 'host:port'.

    heartbeat_body: when given (broker pools), a callable returning the HEART_BEAT body sent first on every new
    connection; the reply decides msgpack and records the broker version. allow_msgpack=False forces JSON.
    request_handler(conn, cmd): answers broker->client requests (NOTIFY_CONSUMER_IDS_CHANGED, ...).
    credentials: when given, every request sent by `request` / `oneway` is signed (plain ACL).
    """

    def __init__(
        self,
        *,
        request_handler: RequestHandler | None = None,
        heartbeat_body: Callable[[], bytes] | None = None,
        allow_msgpack: bool = True,
        connect_timeout: float = 3.0,
        max_frame_size: int = _MAX_FRAME,
        write_batch_frames: int = 1 << 30,
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.request_handler = request_handler
        self.credentials = credentials
        self.ssl_context = ssl_context  # TLS from the first byte on every connection when set
        self.heartbeat_body = heartbeat_body
        self.allow_msgpack = allow_msgpack
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        # Request codes the handler may leave unanswered without a "not supported" reply.
        self.silent_codes: set[int] = set()
        # Flush early once this many frames are queued (default: one write per loop iteration; measured faster
        # than chunking for 1,000-deep pipelines, where chunking only adds wake-ups on both sides).
        self.write_batch_frames = write_batch_frames
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future] = {}
        self._opaque = itertools.count(1)
        self._tasks: set[asyncio.Task] = set()
        self._closed = False

    def next_opaque(self) -> int:
        return next(self._opaque) & 0x7FFFFFFF

    def connected(self, addr: str) -> Connection | None:
        """The live, ready connection for addr, or None (no await: the hot path's fast check)."""
        conn = self._connections.get(addr)
        if conn is not None and not conn.closed:
            return conn
        return None

    @property
    def connections(self) -> dict[str, Connection]:
        return dict(self._connections)

    async def connection(self, addr: str) -> Connection:
        """Ready connection to addr, opening (and handshaking) one if needed; concurrent callers share one attempt."""
        conn = self._connections.get(addr)
        if conn is not None and not conn.closed:
            return conn
        if self._closed:
            raise RemotingError("remoting client is closed")
        waiting = self._connecting.get(addr)
        if waiting is None:
            waiting = asyncio.get_running_loop().create_future()
            self._connecting[addr] = waiting
            try:
                conn = await self._open(addr)
            except BaseException as exc:
                self._connecting.pop(addr, None)
                if not waiting.done():
                    if not isinstance(exc, Exception):
                        exc = RemotingConnectError(f"connection attempt to {addr} was cancelled")
                    waiting.set_exception(exc)
                    waiting.exception()  # mark retrieved
                raise
            self._connecting.pop(addr, None)
            self._connections[addr] = conn
            waiting.set_result(conn)
            return conn
        return await asyncio.shield(waiting)

    async def _open(self, addr: str) -> Connection:
        host, port = split_addr(addr)
        loop = asyncio.get_running_loop()
        try:
            _transport, conn = await asyncio.wait_for(
                loop.create_connection(lambda: Connection(addr, self), host, port, ssl=self.ssl_context,
                                       server_hostname=self._server_hostname(host)),
                self.connect_timeout,
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise RemotingConnectError(f"cannot connect to {addr}: {exc or 'timed out'}") from exc
        if self.heartbeat_body is not None:
            try:
                await self._handshake(conn)
            except BaseException:
                conn.abort("handshake failed")
                raise
        return conn

    def _server_hostname(self, host: str) -> str | None:
        """The name checked against the certificate: the host when hostname checking is on; "" (no SNI, no
        check, as the Java client) otherwise."""
        ctx = self.ssl_context
        if ctx is None:
            return None
        return host if ctx.check_hostname else ""

    async def _handshake(self, conn: Connection) -> None:
        cmd = RemotingCommand(code=RequestCode.HEART_BEAT, ext_fields={}, body=self.heartbeat_body())
        reply = await conn.request(cmd, self.connect_timeout)
        if reply.code != ResponseCode.SUCCESS:
            log.warning("heartbeat to %s answered %s: %s", conn.addr, reply.code, reply.remark)
        conn.broker_version = reply.version
        if self.allow_msgpack and announces_msgpack(reply):
            conn.serialize_type = SerializeType.MSGPACK

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response (RemotingTimeoutError / RemotingClosedError on failure)."""
        conn = self._connections.get(addr)
        if conn is None or conn.closed:
            conn = await self.connection(addr)
        fut = conn.request(cmd, timeout)
        try:
            return await fut
        except asyncio.CancelledError:
            conn.cancel(cmd.opaque)
            raise

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """Send a one-way request (flag bit 1); no response is expected."""
        conn = self._connections.get(addr)
        if conn is None or conn.closed:
            conn = await self.connection(addr)
        conn.oneway(cmd)

    async def send_to_all(self, cmd_factory: Callable[[], RemotingCommand], timeout: float) -> dict[str, object]:
        """Send a request to every open connection; returns addr -> response or exception."""
        addrs = [a for a, c in self._connections.items() if not c.closed]
        results = await asyncio.gather(
            *(self.invoke(a, cmd_factory(), timeout) for a in addrs), return_exceptions=True
        )
        return dict(zip(addrs, results))

    def close_connection(self, addr: str, reason: str = "closed by client") -> None:
        conn = self._connections.pop(addr, None)
        if conn is not None:
            conn.close(reason)

    def _forget(self, conn: Connection) -> None:
        if self._connections.get(conn.addr) is conn:
            del self._connections[conn.addr]

    async def close(self) -> None:
        """Close every connection (pending requests fail with RemotingClosedError)."""
        self._closed = True
        for conn in list(self._connections.values()):
            conn.close("remoting client closed")
        self._connections.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.sleep(0)

