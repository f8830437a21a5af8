"""Minimal outbound remoting connection for broker -> name server requests.

One persistent connection per address (the name server forgets a broker when its registration
connection closes), request/response matching by opaque, reconnect on the next request after a failure.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl

from protocol.command import RemotingCommand, encode_command
from protocol.frame import FrameDecoder

log = logging.getLogger(__name__)

_opaque_counter = itertools.count(1)


def next_opaque() -> int:
    return next(_opaque_counter) & 0x7FFFFFFF


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bad address {addr!r}, expected host:port")
    return host.strip("[]"), int(port)


class _Protocol(asyncio.Protocol):
    def __init__(self, connection: "OutboundConnection") -> None:
        self._connection = connection
        self._decoder = FrameDecoder(connection.max_frame_size)
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            commands = self._decoder.feed(data)
        except Exception as exc:  # protocol error: drop the connection, waiters fail
            log.warning("bad frame from %s: %s", self._connection.addr, exc)
            self._connection.abort(exc)
            return
        for cmd in commands:
            self._connection.arrived(cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection.lost(self._transport, exc)


class OutboundConnection:
    """A lazily (re)connected client connection to one ``host:port``."""

    def __init__(self, addr: str, *, connect_timeout: float = 3.0, max_frame_size: int = 16 * 1024 * 1024,
                 ssl_context: "ssl.SSLContext | None" = None) -> None:
        self.addr = addr
        self.ssl_context = ssl_context  # TLS from the first byte when set (tlsEnable)
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self._transport: asyncio.Transport | None = None
        self._waiters: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._connect_lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def _ensure_connected(self) -> asyncio.Transport:
        async with self._connect_lock:
            if self.connected:
                assert self._transport is not None
                return self._transport
            host, port = split_addr(self.addr)
            loop = asyncio.get_running_loop()
            transport, _ = await asyncio.wait_for(
                loop.create_connection(lambda: _Protocol(self), host, port, ssl=self.ssl_context,
                                       server_hostname="" if self.ssl_context is not None else None),
                self.connect_timeout
            )
            self._transport = transport  # type: ignore[assignment]
            return self._transport

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``cmd`` (its opaque must be unique) and wait for the response."""
        transport = await self._ensure_connected()
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._waiters[cmd.opaque] = future
        try:
            transport.write(encode_command(cmd))
            return await asyncio.wait_for(future, timeout)
        finally:
            self._waiters.pop(cmd.opaque, None)

    async def invoke_oneway(self, cmd: RemotingCommand) -> None:
        transport = await self._ensure_connected()
        transport.write(encode_command(cmd))

    def arrived(self, cmd: RemotingCommand) -> None:
        if not cmd.is_response:
            return  # the name server never sends requests to brokers we care about
        future = self._waiters.pop(cmd.opaque, None)
        if future is not None and not future.done():
            future.set_result(cmd)

    def lost(self, transport: asyncio.BaseTransport | None, exc: Exception | None) -> None:
        if transport is not self._transport:
            return  # an older connection going away after a reconnect
        self._transport = None
        error = ConnectionError(f"connection to {self.addr} closed" + (f": {exc}" if exc else ""))
        for future in self._waiters.values():
            if not future.done():
                future.set_exception(error)
        self._waiters.clear()

    def abort(self, exc: Exception) -> None:
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
