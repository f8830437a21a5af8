"""asyncio remoting server: framing, dispatch by request code, broker->client requests.

One `asyncio.Protocol` per connection (no streams: fewer copies and no per-frame task).
Requests are dispatched from one table ``{code: handler}``. A handler is called as
``handler(channel, cmd)`` and returns a response, ``None`` (no answer) or an awaitable. A response
may also be a pre-encoded frame (``bytes``, e.g. from ``ResponseTemplate``) that is written as is.
Coroutines are started eagerly: when they finish without suspending (the common case for
an ASYNC_FLUSH send or a pull) no task is created and the response joins the batch of
responses written for the current read.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Optional, Union

from broker.log_limit import RateLimitedLog
from protocol.codes import ResponseCode
from protocol.command import ProtocolError, RemotingCommand, encode_command, encode_head
from protocol.frame import FrameDecoder

try:  # HeaderError lives in protocol.headers (H1); tolerate its absence during bring-up
    from protocol.headers import HeaderError
except Exception:  # pragma: no cover - only while protocol/headers.py is missing
    class HeaderError(Exception):  # type: ignore[no-redef]
        pass

log = logging.getLogger(__name__)
_request_errors = RateLimitedLog(log)  # bad headers and failing handlers: per request code, one line per 10 s

HandlerResult = Union[RemotingCommand, bytes, None, Awaitable[Union[RemotingCommand, bytes, None]]]
Handler = Callable[["Channel", RemotingCommand], HandlerResult]

DEFAULT_MAX_FRAME = 16 * 1024 * 1024
_SEPARATE_BODY_THRESHOLD = 16 * 1024  # bodies at least this big are written without joining them to the header


def _format_peer(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


def exception_remark(exc: BaseException) -> str:
    """Text put into a SYSTEM_ERROR remark (Java sends the exception's simple description)."""
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


class _Resume:
    """Awaitable continuing a coroutine that was already started and yielded `first`.

    Lets the server run a handler coroutine synchronously up to its first real suspension
    and only then hand the rest to a task (an "eager task" for Python 3.11).
    """

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine, first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self):
        coro = self._coro
        yielded = self._first
        try:
            while True:
                try:
                    yield yielded
                except GeneratorExit:
                    coro.close()
                    raise
                except BaseException as exc:  # propagate cancellation / errors into the handler
                    yielded = coro.throw(exc)
                else:
                    yielded = coro.send(None)
        except StopIteration as stop:
            return stop.value


async def _finish(coro: Coroutine, first: Any) -> Any:
    return await _Resume(coro, first)


class Channel:
    """One client connection as seen by processors."""

    __slots__ = (
        "transport", "remote_addr", "local_addr", "last_activity", "closed", "_server",
        "_close_listeners", "_pending_frames", "_flush_scheduled", "_opaque", "_waiters",
        "_tasks", "attrs", "__weakref__",
    )

    def __init__(self, transport: asyncio.Transport, server: "RemotingServer") -> None:
        self.transport = transport
        self._server = server
        self.remote_addr = _format_peer(transport.get_extra_info("peername"))
        self.local_addr = _format_peer(transport.get_extra_info("sockname"))
        self.last_activity = time.monotonic()
        self.closed = False
        self._close_listeners: list[Callable[[Channel], None]] = []
        self._pending_frames: list[bytes] = []
        self._flush_scheduled = False
        self._opaque = itertools.count(1)
        self._waiters: dict[int, asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self.attrs: dict[str, Any] = {}  # free slot for processors (e.g. client id)

    def __repr__(self) -> str:
        return f"Channel({self.remote_addr})"

    @property
    def remote_host(self) -> str:
        return self.remote_addr.rsplit(":", 1)[0]

    @property
    def remote_port(self) -> int:
        try:
            return int(self.remote_addr.rsplit(":", 1)[1])
        except (IndexError, ValueError):
            return 0

    # ---- writing -------------------------------------------------------------------------
    def write_frame(self, frame: bytes) -> None:
        """Queue an encoded frame; frames queued in one loop iteration go out in one write."""
        if self.closed:
            return
        self._pending_frames.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._server.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        frames = self._pending_frames
        if not frames or self.closed:
            frames.clear()
            return
        self._pending_frames = []
        if len(frames) == 1:
            self.transport.write(frames[0])
        else:
            self.transport.writelines(frames)

    def write_command(self, cmd: RemotingCommand) -> None:
        """Encode and queue `cmd`; a large body is queued as its own buffer (no copy into the frame)."""
        if self.closed:
            return
        body = cmd.body
        if len(body) >= _SEPARATE_BODY_THRESHOLD:
            self.write_frame(encode_head(cmd, len(body)))
            self._pending_frames.append(body)
        else:
            self.write_frame(encode_command(cmd))

    def send_response(self, response: RemotingCommand | bytes) -> None:
        """Write a response (used by deferred answers such as long-polled pulls); bytes are a whole frame."""
        if type(response) is bytes:
            self.write_frame(response)
        else:
            self.write_command(response)

    def send_oneway(self, cmd: RemotingCommand) -> bool:
        """Send a one-way broker->client request; returns False on a closed channel."""
        if self.closed:
            return False
        cmd.flag |= 2
        if not cmd.opaque:
            cmd.opaque = next(self._opaque)
        self.write_command(cmd)
        return True

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a broker->client request and wait for the client's response."""
        if self.closed:
            raise ConnectionError(f"channel {self.remote_addr} is closed")
        opaque = next(self._opaque)
        cmd.opaque = opaque
        cmd.flag &= ~3
        fut = self._server.loop.create_future()
        self._waiters[opaque] = fut
        try:
            self.write_frame(encode_command(cmd))
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._waiters.pop(opaque, None)

    def _response_arrived(self, cmd: RemotingCommand) -> None:
        fut = self._waiters.pop(cmd.opaque, None)
        if fut is not None and not fut.done():
            fut.set_result(cmd)

    # ---- lifecycle -----------------------------------------------------------------------
    def add_close_listener(self, listener: Callable[["Channel"], None]) -> None:
        if self.closed:
            listener(self)
        else:
            self._close_listeners.append(listener)

    def close(self) -> None:
        """Close the connection; listeners run from connection_lost."""
        if not self.closed:
            if self._pending_frames:
                self._flush()
            self.transport.close()

    def _connection_lost(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._pending_frames.clear()
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"channel {self.remote_addr} closed"))
        self._waiters.clear()
        for task in list(self._tasks):
            task.cancel()
        listeners, self._close_listeners = self._close_listeners, []
        for listener in listeners:
            try:
                listener(self)
            except Exception:
                log.exception("close listener failed for %s", self.remote_addr)


class _ServerProtocol(asyncio.Protocol):
    __slots__ = ("_server", "_decoder", "channel")

    def __init__(self, server: "RemotingServer") -> None:
        self._server = server
        self._decoder = FrameDecoder(server.max_frame_size)
        self.channel: Channel | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        channel = Channel(transport, self._server)  # type: ignore[arg-type]
        self.channel = channel
        self._server.channels.add(channel)

    def connection_lost(self, exc: Exception | None) -> None:
        channel = self.channel
        if channel is not None:
            self._server.channels.discard(channel)
            channel._connection_lost()

    def data_received(self, data: bytes) -> None:
        channel = self.channel
        if channel is None or channel.closed:
            return
        try:
            commands = self._decoder.feed(data)
        except ProtocolError as exc:
            log.warning("%s: closing connection from %s: %s", self._server.name, channel.remote_addr, exc)
            channel.transport.abort()
            return
        if not commands:
            return
        channel.last_activity = time.monotonic()
        dispatch = self._server.dispatch
        for cmd in commands:
            if cmd.flag & 1:
                channel._response_arrived(cmd)
            else:
                dispatch(channel, cmd)
        if channel._pending_frames and not channel.closed:
            channel._flush()


class RemotingServer:
    """TCP server speaking the RocketMQ remoting protocol."""

    def __init__(
        self,
        handlers: dict[int, Handler],
        host: str,
        port: int,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME,
        name: str = "broker",
    ) -> None:
        self.handlers = handlers
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.name = name
        self.channels: set[Channel] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._server = await self.loop.create_server(
            lambda: _ServerProtocol(self), self.host, self.port, reuse_address=True, backlog=1024,
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    async def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Stop accepting, close every connection and wait for the listener to go away."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for channel in list(self.channels):
            channel.close()
        if server is not None:
            try:
                await asyncio.wait_for(server.wait_closed(), 2.0)
            except (asyncio.TimeoutError, Exception):
                pass
        tasks = [t for ch in list(self.channels) for t in ch._tasks]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # ---- dispatch ------------------------------------------------------------------------
    def dispatch(self, channel: Channel, cmd: RemotingCommand) -> None:
        """Run the handler for `cmd`; queue the response (if any) on the channel."""
        handler = self.handlers.get(cmd.code)
        if handler is None:
            if not cmd.flag & 2:
                channel.write_frame(encode_command(cmd.make_response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")))
            return
        try:
            result = handler(channel, cmd)
            if type(result) is bytes:  # a pre-encoded response frame
                if not cmd.flag & 2:
                    channel.write_frame(result)
                return
            if result is not None and not isinstance(result, RemotingCommand):
                result = self._run_awaitable(channel, cmd, result)
                if result is None:
                    return
        except Exception as exc:
            result = self._error_response(cmd, exc)
        if result is not None and not cmd.flag & 2:
            channel.send_response(result)

    def _run_awaitable(self, channel: Channel, cmd: RemotingCommand, awaitable: Any) -> RemotingCommand | None:
        """Drive a coroutine eagerly; return its result or None when it continues in a task."""
        if asyncio.iscoroutine(awaitable):
            try:
                first = awaitable.send(None)
            except StopIteration as stop:
                return stop.value
            task = self.loop.create_task(_finish(awaitable, first))
        else:
            task = asyncio.ensure_future(awaitable)
        channel._tasks.add(task)
        task.add_done_callback(lambda t: self._task_done(channel, cmd, t))
        return None

    def _task_done(self, channel: Channel, cmd: RemotingCommand, task: asyncio.Task) -> None:
        channel._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        result = self._error_response(cmd, exc) if exc is not None else task.result()
        if result is not None and not cmd.flag & 2:
            channel.send_response(result)

    def _error_response(self, cmd: RemotingCommand, exc: BaseException) -> RemotingCommand:
        if isinstance(exc, HeaderError):  # the client's mistake: a remark for it, no traceback for us
            _request_errors.warning(("header", cmd.code), "%s: request code %s refused: %s", self.name, cmd.code, exc)
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, str(exc))
        # A bug: the traceback is logged, but a request that keeps failing does not flood the log.
        _request_errors.error(("failed", cmd.code, type(exc).__name__), "%s: request code %s failed: %s",
                              self.name, cmd.code, exc, exc_info=exc)
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, exception_remark(exc))
