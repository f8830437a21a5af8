"""One connection of the remoting server (broker/remoting_server.py): the ``Channel`` processors write to and
the ``ServerProtocol`` that reads it.

The protocol decodes frames and hands requests to the server's dispatch, all of one read together so their responses
go out in one write. It stops reading while the peer does not read its responses (write backpressure: the
transport's high mark) or while its unfinished frame waits for the process's frame budget (ConnectionGuard).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.connection_guard import ACCOUNTED_FRAME_BYTES
from protocol.command import ProtocolError, RemotingCommand, encode_command, encode_head
from protocol.frame import REQUEST_MAX_HEADER_SIZE, FrameDecoder

if TYPE_CHECKING:
    from broker.remoting_server import RemotingServer

log = logging.getLogger("broker.remoting_server")  # the server's logger, as before the split

__all__ = ["Channel", "ServerProtocol", "format_peer"]

_SEPARATE_BODY_THRESHOLD = 16 * 1024  # bodies at least this big are written without joining them to the header
_PAUSED_BY_WRITES = 1  # reasons reading from a connection is paused (bit mask)
_PAUSED_BY_BUDGET = 2
MAX_RUN = 256  # requests handed to one run handler call at most


def format_peer(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


class Channel:
    """One client connection as seen by processors."""

    __slots__ = (
        "transport", "remote_addr", "local_addr", "last_activity", "closed", "_server",
        "_close_listeners", "_pending_frames", "_pending_large", "_flush_scheduled", "_opaque", "_waiters",
        "tasks", "attrs", "__weakref__",
    )

    def __init__(self, transport: asyncio.Transport, server: "RemotingServer") -> None:
        self.transport = transport
        self._server = server
        self.remote_addr = format_peer(transport.get_extra_info("peername"))
        self.local_addr = format_peer(transport.get_extra_info("sockname"))
        self.last_activity = time.monotonic()
        self.closed = False
        self._close_listeners: list[Callable[[Channel], None]] = []
        self._pending_frames: list[bytes] = []
        self._pending_large = 0  # bytes of large bodies in _pending_frames (flushed early past the high mark)
        self._flush_scheduled = False
        self._opaque = itertools.count(1)
        self._waiters: dict[int, asyncio.Future] = {}
        self.tasks: set[asyncio.Task] = set()  # answering its requests: cancelled when it closes
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
        for task in list(self.tasks):
            task.cancel()
        listeners, self._close_listeners = self._close_listeners, []
        for listener in listeners:
            try:
                listener(self)
            except Exception:
                log.exception("close listener failed for %s", self.remote_addr)


class ServerProtocol(asyncio.Protocol):
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
        self.peer = format_peer(transport.get_extra_info("peername"))
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
                    limit = min(count, done - 1 + MAX_RUN)
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
