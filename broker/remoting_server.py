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
read its responses is not read from) and an idle sweep run by each server. One connection (its ``Channel`` and
the protocol reading it) is broker/remoting_connection.py.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Union

from broker.connection_guard import ConnectionGuard
from broker.log_limit import RateLimitedLog
from broker.remoting_connection import Channel, ServerProtocol, format_peer
from broker.tls import TlsSettings
from broker.tls_acceptor import FirstByteAcceptor
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand, encode_command

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
_SWEEP_INTERVAL_S = 1.0


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
            self._acceptor = FirstByteAcceptor(self, lambda: ServerProtocol(self, admitted=True))
            sock = self._acceptor.start(self.host, self.port)
        else:
            self._server = await self.loop.create_server(
                lambda: ServerProtocol(self), self.host, self.port, reuse_address=True, backlog=1024,
            )
            sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self.bind_addr = format_peer(sock.getsockname())
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
        tasks = [t for ch in list(self.channels) for t in ch.tasks]
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
        channel.tasks.add(task)
        task.add_done_callback(lambda t: self._task_done(channel, cmd, t))
        return None

    def _task_done(self, channel: Channel, cmd: RemotingCommand, task: asyncio.Task) -> None:
        channel.tasks.discard(task)
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
