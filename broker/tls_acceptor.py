"""Accepting connections on a TLS-capable remoting port (tlsMode permissive or enforcing).

The loop's own server cannot decide per connection whether to speak TLS, so this accepts the sockets itself,
waits (bounded by serverChannelMaxIdleTimeSeconds) until the first byte is readable, peeks it with MSG_PEEK and
hands the socket to ``loop.connect_accepted_socket`` with the TLS context (0x16, a TLS handshake record) or
without (plaintext; closed without a reply in enforcing mode). Works the same under uvloop and asyncio. A
connection counts against serverMaxConnections from accept on; its protocol takes the count over once connected.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.tls import HANDSHAKE_TIMEOUT_S, TLS_HANDSHAKE_RECORD

if TYPE_CHECKING:
    from broker.remoting_server import RemotingServer


def _format_peer(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


def _listening_socket(host: str, port: int) -> socket.socket:
    """A non-blocking listening socket like create_server's (SO_REUSEADDR, backlog 1024)."""
    family, kind, proto, _, addr = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(addr)
        sock.listen(1024)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _abort_socket(conn: socket.socket) -> None:
    try:
        conn.close()
    except OSError:
        pass


def _short_reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or str(exc) or type(exc).__name__


class FirstByteAcceptor:
    """The accept loop of one RemotingServer whose TLS mode is not disabled."""

    def __init__(self, server: "RemotingServer", protocol_factory: Callable[[], asyncio.Protocol]) -> None:
        self.server = server
        self.protocol_factory = protocol_factory  # a protocol that does not count the connection again
        self._listen_sock: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None
        self._first_byte_waits: set[asyncio.Task[None]] = set()

    def start(self, host: str, port: int) -> socket.socket:
        """Bind and listen; returns the listening socket (for its real address)."""
        loop = self.server.loop
        assert loop is not None
        sock = self._listen_sock = _listening_socket(host, port)
        self._task = loop.create_task(self._accept_forever(sock), name=f"{self.server.name}-accept")
        return sock

    async def _accept_forever(self, sock: socket.socket) -> None:
        loop = self.server.loop
        assert loop is not None
        while True:
            try:
                conn, addr = await loop.sock_accept(sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # e.g. EMFILE: back off instead of spinning
                self.server.guard.log.warning("accept-failed", "%s: accept failed: %s", self.server.name,
                                              exc.strerror or exc)
                await asyncio.sleep(0.1)
                continue
            peer = _format_peer(addr)
            if not self.server.guard.admit(peer, self.server.name):
                _abort_socket(conn)
                continue
            task = loop.create_task(self._classify(conn, peer))
            self._first_byte_waits.add(task)
            task.add_done_callback(self._first_byte_waits.discard)

    async def _classify(self, conn: socket.socket, peer: str) -> None:
        """Wait (bounded by serverChannelMaxIdleTimeSeconds) for the first byte, peek it and start the connection
        as TLS (0x16) or plaintext; enforcing closes plaintext without a reply. The connection counts against
        serverMaxConnections from accept on; its protocol takes the count over once it is connected."""
        loop = self.server.loop
        assert loop is not None
        handed_over = False
        try:
            conn.setblocking(False)
            first = await self._peek_first_byte(conn)
            if first is None:
                return
            if first == TLS_HANDSHAKE_RECORD:
                ctx = self.server.ssl_context
            elif self.server.tls.mode == "enforcing":
                self.server.guard.log.info("tls-plaintext", "%s: closing plaintext connection from %s "
                                           "(tlsMode=enforcing)", self.server.name, peer)
                return
            else:
                ctx = None
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            handed_over = True
            if ctx is None:
                await loop.connect_accepted_socket(self.protocol_factory, conn)
            else:
                await loop.connect_accepted_socket(self.protocol_factory, conn, ssl=ctx,
                                                   ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as exc:
            if not handed_over:
                return  # reset before its first byte: the finally clause closes it
            # A failed handshake (no client certificate, wrong CA, not TLS after all): the loop closed the
            # socket, the protocol never connected, so the count is still ours.
            self.server.guard.log.info("tls-handshake", "%s: TLS handshake with %s failed: %s", self.server.name,
                                       peer, _short_reason(exc))
            self.server.guard.release()
        except asyncio.CancelledError:
            if handed_over:  # the loop closes the half-open transport
                self.server.guard.release()
            raise
        finally:
            if not handed_over:
                self.server.guard.release()
                _abort_socket(conn)

    async def _peek_first_byte(self, conn: socket.socket) -> int | None:
        """The first byte without consuming it; None when the peer closed or stayed silent too long."""
        loop = self.server.loop
        assert loop is not None
        readable = loop.create_future()
        fd = conn.fileno()
        loop.add_reader(fd, lambda: readable.done() or readable.set_result(None))
        try:
            await asyncio.wait_for(readable, self.server.idle_timeout_s)
        except asyncio.TimeoutError:
            return None
        finally:
            loop.remove_reader(fd)
        try:
            data = conn.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return await self._peek_first_byte(conn)
        except OSError:
            return None
        return data[0] if data else None

    def stop(self) -> None:
        """Stop accepting (connections already accepted go on)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        sock, self._listen_sock = self._listen_sock, None
        if sock is not None:
            sock.close()

    def close(self) -> None:
        """Stop accepting and drop connections still waiting for their first byte or handshake."""
        self.stop()
        for task in list(self._first_byte_waits):
            task.cancel()
