"""asyncio remoting server: framing, dispatch by request code, broker->client requests.

One `asyncio.Protocol` per connection (no streams: fewer copies and no per-frame task).
Requests are dispatched from one table ``{code: handler}``. A handler is called as
``handler(channel, cmd)`` and returns a response, ``None`` (no answer) or an awaitable. A response
may also be a pre-encoded frame (``bytes``, e.g. from ``ResponseTemplate``) that is written as is.
Coroutines are started eagerly: when they finish without suspending (the common case for
an ASYNC_FLUSH send or a pull) no task is created and the response joins the batch of
responses written for the current read.

What a connection may cost is bounded by the process's ``ConnectionGuard`` (broker/connection_guard.py):
a connection limit, a shared budget for unfinished frames, write backpressure (a peer that does not
read its responses is not read from) and an idle sweep run by each server.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Union

from broker.connection_guard import ACCOUNTED_FRAME_BYTES, ConnectionGuard
from broker.log_limit import RateLimitedLog
from broker.tls import TlsSettings
from broker.tls_acceptor import FirstByteAcceptor
from protocol.codes import ResponseCode
from protocol.command import ProtocolError, RemotingCommand, encode_command, encode_head
from protocol.frame import REQUEST_MAX_HEADER_SIZE, FrameDecoder

try:  # HeaderError lives in protocol.headers (H1); tolerate its absence during bring-up
    from protocol.headers import HeaderError
except Exception:  # pragma: no cover - only while protocol/headers.py is missing
    class HeaderError(Exception):  # type: ignore[no-redef]
        pass

log = logging.getLogger(__name__)
_request_errors = RateLimitedLog(log)  # bad headers and failing handlers: per request code, one line per 10 s

HandlerResult = Union[RemotingCommand, bytes, None, Awaitable[Union[RemotingCommand, bytes, None]]]
Handler = Callable[["Channel", RemotingCommand], HandlerResult]
RunHandler = Callable[["Channel", list[RemotingCommand]], list[Any]]  # one result per request
# None admits the request, an error response refuses it, an awaitable of either decides later (a large body is read
# off the event loop first).
RequestGuard = Callable[["Channel", RemotingCommand], Any]
# Told once per request of its code, when its answer is known: (channel, request, response or frame, seconds taken).
# Metrics observe sends this way (broker/metrics); never called per message.
RequestObserver = Callable[["Channel", RemotingCommand, Any, float], None]

DEFAULT_MAX_FRAME = 16 * 1024 * 1024
_SEPARATE_BODY_THRESHOLD = 16 * 1024  # bodies at least this big are written without joining them to the header
_PAUSED_BY_WRITES = 1  # reasons reading from a connection is paused (bit mask)
_PAUSED_BY_BUDGET = 2
_SWEEP_INTERVAL_S = 1.0
_MAX_RUN = 256  # requests handed to one run handler call at most


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


def _observed(observer: RequestObserver, channel: "Channel", cmd: RemotingCommand, result: Any,
              started: float) -> Any:
    """Tell `observer` the request's answer and duration: now when known, else once the pending answer is."""
    kind = type(result)
    if kind is RemotingCommand or kind is bytes:
        observer(channel, cmd, result, time.perf_counter() - started)
        return result
    if result is None or isinstance(result, BaseException):
        return result
    return _observe_later(observer, channel, cmd, result, started)


async def _observe_later(observer: RequestObserver, channel: "Channel", cmd: RemotingCommand, pending: Any,
                         started: float) -> Any:
    result = await pending
    observer(channel, cmd, result, time.perf_counter() - started)
    return result


async def _finish(coro: Coroutine, first: Any) -> Any:
    return await _Resume(coro, first)


class Channel:
    """One client connection as seen by processors."""

    __slots__ = (
        "transport", "remote_addr", "local_addr", "last_activity", "closed", "_server",
        "_close_listeners", "_pending_frames", "_pending_large", "_flush_scheduled", "_opaque", "_waiters",
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
        self._pending_large = 0  # bytes of large bodies in _pending_frames (flushed early past the high mark)
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
        self._pending_large = 0
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
            self._pending_large += len(body)
            if self._pending_large >= self._server.write_high_water:
                # Hand big responses to the transport now: past its high mark it pauses reading (see
                # _ServerProtocol.pause_writing) instead of a whole chunk of pipelined pulls piling up here.
                self._flush()
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
    """One connection: decode, dispatch, and pause reading while its responses are not read
    (write backpressure) or its unfinished frame waits for the process's frame budget."""

    __slots__ = ("_server", "_decoder", "channel", "peer", "_reserved", "_paused_by", "_write_blocked", "_backlog",
                 "_admitted")

    def __init__(self, server: "RemotingServer", admitted: bool = False) -> None:
        self._server = server
        self._admitted = admitted  # already counted by the TLS/first-byte acceptor
        self._decoder = FrameDecoder(server.max_frame_size, REQUEST_MAX_HEADER_SIZE)
        self.channel: Channel | None = None
        self.peer = "?"
        self._reserved = 0  # frame size asked of the budget (granted or waiting), 0 = none
        self._paused_by = 0
        self._write_blocked = False  # the transport's buffer is above its high mark
        self._backlog: list[RemotingCommand] = []  # decoded requests not dispatched while writes are blocked

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        server = self._server
        self.peer = _format_peer(transport.get_extra_info("peername"))
        if not self._admitted and not server.guard.admit(self.peer, server.name):
            transport.abort()
            return
        transport.set_write_buffer_limits(server.write_high_water, server.write_low_water)  # type: ignore[attr-defined]
        channel = Channel(transport, server)  # type: ignore[arg-type]
        self.channel = channel
        server.channels.add(channel)

    def connection_lost(self, exc: Exception | None) -> None:
        channel = self.channel
        if channel is not None:
            server = self._server
            server.guard.release()
            if self._reserved:
                self._reserved = 0
                server.guard.budget.release(self)
            self._backlog = []
            server.channels.discard(channel)
            channel._connection_lost()

    def data_received(self, data: bytes) -> None:
        channel = self.channel
        if channel is None or channel.closed:
            return
        decoder = self._decoder
        try:
            commands = decoder.feed(data)
        except ProtocolError as exc:
            self._server.guard.log.warning("malformed-frame", "%s: closing connection from %s: %s",
                                           self._server.name, channel.remote_addr, exc)
            channel.transport.abort()
            return
        if self._reserved or decoder.pending_frame_size >= ACCOUNTED_FRAME_BYTES:
            self._account(decoder.pending_frame_size)
        if not commands:
            return
        channel.last_activity = time.monotonic()
        self._dispatch_all(channel, commands)

    def _dispatch_all(self, channel: Channel, commands: list[RemotingCommand]) -> None:
        server = self._server
        dispatch = server.dispatch
        run_handlers = server.run_handlers
        count = len(commands)
        done = 0
        # Responses written while dispatching go out in the one write below: no flush callback per response.
        was_scheduled = channel._flush_scheduled
        channel._flush_scheduled = True
        try:
            while done < count:
                if self._write_blocked:  # the peer does not read: keep the rest for later
                    self._backlog = commands[done:]
                    break
                cmd = commands[done]
                done += 1
                if cmd.flag & 1:
                    channel._response_arrived(cmd)
                    continue
                run_handler = run_handlers.get(cmd.code) if run_handlers and done < count else None
                if run_handler is not None:
                    # Consecutive requests with the same run handler go to it together (pipelined sends).
                    end = done
                    limit = min(count, done - 1 + _MAX_RUN)
                    while end < limit and run_handlers.get(commands[end].code) is run_handler \
                            and not commands[end].flag & 1:
                        end += 1
                    if end > done:
                        server.dispatch_run(channel, commands[done - 1:end], run_handler)
                        done = end
                        continue
                dispatch(channel, cmd)
        finally:
            channel._flush_scheduled = was_scheduled
        if channel._pending_frames and not channel.closed:
            channel._flush()

    # ---- frame budget ----------------------------------------------------------------------
    def _account(self, pending: int) -> None:
        """Keep the budget reservation equal to the unfinished frame's announced size."""
        budget = self._server.guard.budget
        if pending < ACCOUNTED_FRAME_BYTES:
            self._reserved = 0
            budget.release(self)
        elif pending != self._reserved:
            self._reserved = pending
            if not budget.reserve(self, pending):
                self._pause_reading(_PAUSED_BY_BUDGET)

    @property
    def frame_bytes_held(self) -> int:
        return self._decoder.buffered

    def budget_granted(self) -> None:
        self._resume_reading(_PAUSED_BY_BUDGET)

    def close_for_budget(self) -> None:
        if self.channel is not None:
            self.channel.transport.abort()

    # ---- write backpressure ----------------------------------------------------------------
    def pause_writing(self) -> None:
        channel = self.channel
        if channel is not None:
            self._server.guard.log.info(
                "write-paused", "%s: not reading from %s while %d bytes of its responses wait to be read "
                "(writeBufferHighWaterMark=%d)", self._server.name, channel.remote_addr,
                channel.transport.get_write_buffer_size(), self._server.write_high_water)
        self._write_blocked = True
        self._pause_reading(_PAUSED_BY_WRITES)

    def resume_writing(self) -> None:
        self._write_blocked = False
        if self._backlog:  # requests read before the pause come first; dispatched outside the transport's callback
            self._server.loop.call_soon(self._drain_backlog)
        else:
            self._resume_reading(_PAUSED_BY_WRITES)

    def _drain_backlog(self) -> None:
        channel = self.channel
        if channel is None or channel.closed or self._write_blocked:
            return  # closed, or blocked again: resume_writing reschedules
        backlog, self._backlog = self._backlog, []
        if backlog:
            self._dispatch_all(channel, backlog)
        if not self._backlog:
            self._resume_reading(_PAUSED_BY_WRITES)

    # ---- reading on/off ----------------------------------------------------------------------
    def _pause_reading(self, reason: int) -> None:
        was = self._paused_by
        self._paused_by = was | reason
        if not was and self.channel is not None:
            try:
                self.channel.transport.pause_reading()  # type: ignore[attr-defined]
            except RuntimeError:  # closing transport
                pass

    def _resume_reading(self, reason: int) -> None:
        if not self._paused_by & reason:
            return
        self._paused_by &= ~reason
        if not self._paused_by and self.channel is not None and not self.channel.closed:
            try:
                self.channel.transport.resume_reading()  # type: ignore[attr-defined]
            except RuntimeError:
                pass


class RemotingServer:
    """TCP server speaking the RocketMQ remoting protocol.

    `guard` carries the limits and is shared by the servers of one process (a private one with default
    limits when omitted). The server runs its own sweep: idle connections and stalled frame-budget holders
    are closed there.
    """

    def __init__(
        self,
        handlers: dict[int, Handler],
        host: str,
        port: int,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME,
        name: str = "broker",
        guard: ConnectionGuard | None = None,
        request_guard: RequestGuard | None = None,
        tls: TlsSettings | None = None,
        ssl_context: ssl.SSLContext | None = None,
        run_handlers: dict[int, RunHandler] | None = None,
        observers: dict[int, RequestObserver] | None = None,
    ) -> None:
        self.handlers = handlers
        # Optional: codes whose requests are observed (their answer and duration), e.g. by metrics.
        self.observers = observers or {}
        # Optional: codes whose consecutive requests (one read, one connection) are handled in one call.
        self.run_handlers = run_handlers or {}
        # Checked before every handler when set (ACL); None costs nothing on the hot path.
        self.request_guard = request_guard
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.name = name
        self.channels: set[Channel] = set()
        self.guard = guard or ConnectionGuard()
        limits = self.guard.limits
        self.write_high_water = limits.write_buffer_high_water_mark
        self.write_low_water = limits.write_low_water
        self.idle_timeout_s = float(limits.server_channel_max_idle_time_seconds)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task[None] | None = None
        # TLS: disabled keeps the plain create_server path; otherwise connections are accepted here, told apart
        # by their first byte and handed to the loop as plaintext or TLS (broker/tls_acceptor.py).
        self.tls = tls if tls is not None else TlsSettings()
        self.ssl_context = ssl_context if ssl_context is not None or not self.tls.enabled \
            else self.tls.server_context()
        self.bind_addr = f"{host}:{port}"  # the real address once started (from the listening socket)
        self._acceptor: FirstByteAcceptor | None = None

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        if self.tls.enabled:
            self._acceptor = FirstByteAcceptor(self, lambda: _ServerProtocol(self, admitted=True))
            sock = self._acceptor.start(self.host, self.port)
        else:
            self._server = await self.loop.create_server(
                lambda: _ServerProtocol(self), self.host, self.port, reuse_address=True, backlog=1024,
            )
            sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self.bind_addr = _format_peer(sock.getsockname())
        self.guard.check_fd_limit()
        self._sweeper = self.loop.create_task(self._sweep_forever(), name=f"{self.name}-connection-sweep")

    async def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._acceptor is not None:
            self._acceptor.stop()

    def describe(self) -> str:
        """``host:port`` actually bound, with the TLS mode: ``0.0.0.0:10911 (tls permissive)``."""
        tls = self.tls.describe()
        return f"{self.bind_addr} ({tls})" if tls else self.bind_addr

    # ---- housekeeping ------------------------------------------------------------------------
    async def _sweep_forever(self) -> None:
        interval = max(0.05, min(_SWEEP_INTERVAL_S, self.idle_timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                self.sweep(time.monotonic())
            except Exception:
                self.guard.log.warning("sweep-failed", "%s: connection sweep failed", self.name, exc_info=True)

    def sweep(self, now: float) -> None:
        """Close connections without a complete request for serverChannelMaxIdleTimeSeconds, and frame-budget
        holders that stalled while others wait."""
        idle_limit = now - self.idle_timeout_s
        for channel in list(self.channels):
            if channel.last_activity < idle_limit and not channel.closed:
                self.guard.log.info("idle", "%s: closing %s: nothing received for %.0f s "
                                    "(serverChannelMaxIdleTimeSeconds)", self.name, channel.remote_addr,
                                    now - channel.last_activity)
                if channel.transport.get_write_buffer_size():
                    channel.transport.abort()  # its peer does not read: a graceful close would wait forever
                else:
                    channel.close()
        self.guard.budget.close_stalled(now)

    async def close(self) -> None:
        """Stop accepting, close every connection and wait for the listener to go away."""
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)
        server, self._server = self._server, None
        if server is not None:
            server.close()
        acceptor, self._acceptor = self._acceptor, None
        if acceptor is not None:
            acceptor.close()
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
        if self.request_guard is not None:
            refusal = self.request_guard(channel, cmd)
            if refusal is not None:
                if type(refusal) is not RemotingCommand:  # the guard reads a large body off the loop first
                    self._run_awaitable(channel, cmd, self._guard_then_dispatch(channel, cmd, refusal))
                elif not cmd.flag & 2:
                    channel.send_response(refusal)
                return
        self._dispatch_admitted(channel, cmd)

    async def _guard_then_dispatch(self, channel: Channel, cmd: RemotingCommand, pending: Any) -> Any:
        refusal = await pending
        if refusal is not None:
            return refusal
        if not channel.closed:
            self._dispatch_admitted(channel, cmd)
        return None

    def _dispatch_admitted(self, channel: Channel, cmd: RemotingCommand) -> None:
        handler = self.handlers.get(cmd.code)
        if handler is None:
            if not cmd.flag & 2:
                channel.write_frame(encode_command(cmd.make_response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")))
            return
        observer = self.observers.get(cmd.code) if self.observers else None
        started = time.perf_counter() if observer is not None else 0.0
        try:
            result = handler(channel, cmd)
        except Exception as exc:
            result = exc
        if observer is not None:
            result = _observed(observer, channel, cmd, result, started)
        self._deliver(channel, cmd, result)

    def dispatch_run(self, channel: Channel, cmds: list[RemotingCommand], handler: RunHandler) -> None:
        """Like dispatch for each of `cmds`, but the handler gets those the request guard lets through together."""
        guard = self.request_guard
        if guard is not None:
            admitted = []
            for cmd in cmds:
                refusal = guard(channel, cmd)
                if refusal is None:
                    admitted.append(cmd)
                elif type(refusal) is not RemotingCommand:  # checked later: then handled alone
                    self._run_awaitable(channel, cmd, self._guard_then_dispatch(channel, cmd, refusal))
                elif not cmd.flag & 2:
                    channel.send_response(refusal)
            cmds = admitted
            if not cmds:
                return
        observers = self.observers
        started = time.perf_counter()
        try:
            results = handler(channel, cmds)
        except Exception as exc:  # a bug in the run handler: every request of the run is answered with it
            results = [exc] * len(cmds)
        deliver = self._deliver
        for cmd, result in zip(cmds, results):
            observer = observers.get(cmd.code) if observers else None
            if observer is not None:  # each request of the run as if sent alone, timed from the run's start
                result = _observed(observer, channel, cmd, result, started)
            deliver(channel, cmd, result)

    def _deliver(self, channel: Channel, cmd: RemotingCommand, result: Any) -> None:
        """Write a handler's result: a frame, a response, an exception (as an error response) or an awaitable."""
        kind = type(result)
        if kind is bytes:  # a pre-encoded response frame
            if not cmd.flag & 2:
                channel.write_frame(result)
            return
        if result is None:
            return
        if kind is not RemotingCommand:
            if isinstance(result, BaseException):
                result = self._error_response(cmd, result)
            else:
                try:
                    result = self._run_awaitable(channel, cmd, result)
                except Exception as exc:
                    result = self._error_response(cmd, exc)
                if result is None:
                    return
        if not cmd.flag & 2:
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
