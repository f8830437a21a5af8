"""The master side of replication: the HA listener streaming the commit log to slaves (replication.md §3, §4).

Each slave connection reads 8-byte offset reports (the first: where to start; 0 = the newest file's first byte; later
ones: acknowledgements) and is sent the commit log from there in frames of at most 32 KiB that never span two files,
byte for byte (BLANK markers and padding included), with an empty frame as heartbeat when nothing new was written.
SYNC_MASTER sends wait on `wait_for_slave(end_offset)`: True once any slave acknowledged that far.

Who may connect, and what a connection may cost:
* ``aclEnable=true``: the peer must pass the handshake of protocol/ha.py (proving an admin account of the ACL file,
  the master proving itself too) within ``HANDSHAKE_TIMEOUT_S`` before it is sent one byte of the log or counts as a
  slave; without ACL the reference's plain protocol (a peer that sends a HELLO is told ACL is off here);
* ``tlsMode=enforcing``: TLS only (the remoting ports' server certificate and client-auth setting);
* ``haMaxConnections``: connections past it are closed at accept, before any TLS or handshake work;
* memory: at most ``WRITE_BUDGET_BYTES`` unsent plus one frame per connection (a peer that does not read is not
  written to, and is closed after ``HOUSEKEEPING_INTERVAL_S``), and at most twice ``READ_LIMIT_BYTES`` unread.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from broker.log_limit import RateLimitedLog
from broker.tls import HANDSHAKE_TIMEOUT_S as TLS_HANDSHAKE_TIMEOUT_S
from broker.tls_acceptor import _format_peer, _listening_socket
from protocol.ha import (
    MAX_TRANSFER_BATCH,
    HandshakeError,
    HAProtocolError,
    MasterHandshake,
    ReportReader,
    encode_frame_header,
    encode_refuse,
    looks_like_handshake,
)

log = logging.getLogger(__name__)
_limited = RateLimitedLog(log)

__all__ = ["HAMaster", "admin_secret_lookup"]

HEARTBEAT_INTERVAL_S = 5.0  # haSendHeartbeatInterval
HOUSEKEEPING_INTERVAL_S = 20.0  # haHousekeepingInterval: a slave silent (or not reading) this long is dropped
FALL_BEHIND_MAX = 256 * 1024 * 1024  # haSlaveFallbehindMax
HANDSHAKE_TIMEOUT_S = 10.0  # TLS and authentication together, from accept
WRITE_BUDGET_BYTES = 128 * 1024  # unsent bytes per connection before the stream waits for the slave to read
READ_LIMIT_BYTES = 16 * 1024  # a connection's unread input pauses reading at twice this


def _host(peer: str) -> str:
    """The log-limiting key of a peer: its address without the port (one line per source, not per connection)."""
    return peer.rpartition(":")[0] or peer


def admin_secret_lookup(validator: Any) -> Callable[[str], str | None]:
    """``access_key -> secret`` of the admin accounts of the ACL file (read at each handshake: reloads apply)."""
    def admin_secret(access_key: str) -> str | None:
        account = validator.config.accounts.get(access_key)
        return account.secret_key if account is not None and account.admin else None
    return admin_secret


class _SlaveConnection:
    def __init__(self, master: "HAMaster", reader: asyncio.StreamReader, writer: asyncio.StreamWriter, addr: str,
                 first_data: bytes = b"") -> None:
        self.master = master
        self.reader = reader
        self.writer = writer
        self.addr = addr
        self.first_data = first_data  # read during the handshake: the first reports
        self.requested: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.acked = -1
        self.last_read = time.monotonic()
        self.sent_until = -1

    async def run(self) -> None:
        tasks = [asyncio.create_task(self._read_reports()), asyncio.create_task(self._stream())]
        try:
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    exc = task.exception()
                    level = logging.WARNING if isinstance(exc, HAProtocolError) else logging.INFO
                    _limited.log(level, ("disconnected", _host(self.addr)), "slave %s disconnected: %s", self.addr, exc)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.master.slaves.discard(self)

    def _report_reader(self) -> Any:
        """The reader of this link's offset reports (``feed_all(data) -> [offset, ...]``)."""
        return ReportReader()

    async def _read_reports(self) -> None:
        """Every offset the slave reports: the first says where to start streaming, the others acknowledge."""
        reports = self._report_reader()
        data = self.first_data
        while True:
            if not data:
                try:
                    data = await asyncio.wait_for(self.reader.read(4096), HOUSEKEEPING_INTERVAL_S)
                except asyncio.TimeoutError:
                    raise ConnectionError(f"no report for {HOUSEKEEPING_INTERVAL_S:.0f} s") from None
                if not data:
                    raise ConnectionError("closed by the slave")
            self.last_read = time.monotonic()
            offsets = reports.feed_all(data)
            data = b""
            for offset in offsets:
                if not self.requested.done():
                    self.requested.set_result(offset)
                    self._started(offset)
                    continue
                self._acknowledged(offset)

    def _started(self, offset: int) -> None:
        self.master.slaves.add(self)  # a slave (SYNC_MASTER counts it) once it said where to start
        _limited.info(("connected", _host(self.addr)), "slave %s connected, replicating from offset %d",
                      self.addr, offset)

    def _acknowledged(self, offset: int) -> None:
        own = self.master.max_offset()
        if offset > own:
            raise HAProtocolError(
                f"the slave reports offset {offset}, beyond this master's end {own}: its log is ahead "
                "(this master lost data it had replicated); rebuild the slave's store or let this "
                "master's log grow past it")
        self.acked = offset
        self.master.acknowledged(offset)

    async def _drain(self) -> None:
        try:
            await asyncio.wait_for(self.writer.drain(), HOUSEKEEPING_INTERVAL_S)
        except asyncio.TimeoutError:
            raise ConnectionError(f"the slave read nothing for {HOUSEKEEPING_INTERVAL_S:.0f} s with "
                                  f"{self.writer.transport.get_write_buffer_size()} bytes unsent") from None

    async def _stream(self) -> None:
        master = self.master
        start = await self.requested
        own = master.max_offset()
        if start > own:
            raise HAProtocolError(f"the slave asks for offset {start}, beyond this master's end {own}: its log is "
                                  "ahead (this master lost data it had replicated); rebuild the slave's store")
        if start == 0:  # an empty slave gets the newest file onwards, as the reference does
            start = max(0, own - own % master.file_size)
            start = max(start, master.min_offset())
        position = start
        last_write = time.monotonic()
        while True:
            chunk = master.read(position, MAX_TRANSFER_BATCH)
            if chunk:
                self.writer.write(encode_frame_header(position, len(chunk)))
                self.writer.write(chunk)
                position += len(chunk)
                self.sent_until = position
                last_write = time.monotonic()
                await self._drain()
                continue
            now = time.monotonic()
            if now - last_write >= HEARTBEAT_INTERVAL_S:
                self.writer.write(encode_frame_header(position, 0))
                await self._drain()
                last_write = now
            await master.wait_for_data(position, HEARTBEAT_INTERVAL_S)


class HAMaster:
    """The HA listener of a master; owned and started by the broker object.

    ``admin_secret`` (aclEnable=true): the handshake's account lookup, see ``admin_secret_lookup``; None: no
    authentication, as the reference. ``ssl_context``: TLS only (tlsMode=enforcing)."""

    connection_class: type = _SlaveConnection  # controller mode: ha/epoch_master.py's

    def __init__(self, commit_log: Any, host: str, port: int, *, max_connections: int = 32,
                 admin_secret: Callable[[str], str | None] | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.commit_log = commit_log
        self.file_size: int = commit_log.file_size
        self.host = host
        self.port = port
        self.max_connections = max_connections
        self.admin_secret = admin_secret
        self.ssl_context = ssl_context
        self.bind_addr = f"{host}:{port}"
        self.slaves: set[_SlaveConnection] = set()
        self.push_max_offset = -1  # highest acknowledgement of any slave
        self.refused = 0  # connections closed at accept (haMaxConnections), for tests and metrics
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()  # one per accepted connection, from accept to close
        self._data = asyncio.Event()
        self._waiters: list[tuple[int, int, asyncio.Future]] = []  # (end offset, seq, future), sorted
        self._seq = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        sock = self._sock = _listening_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        self.bind_addr = _format_peer(sock.getsockname())
        self._accept_task = asyncio.get_running_loop().create_task(self._accept_forever(sock), name="ha-accept")

    def describe(self) -> str:
        """For the boot line: ``0.0.0.0:10912 (tls enforcing, acl)``."""
        notes = [n for n in ("tls enforcing" if self.ssl_context is not None else "",
                             "acl" if self.admin_secret is not None else "") if n]
        return f"{self.bind_addr} ({', '.join(notes)})" if notes else self.bind_addr

    async def stop(self) -> None:
        task, self._accept_task = self._accept_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters.clear()

    async def _accept_forever(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, addr = await loop.sock_accept(sock)
            except OSError as exc:  # e.g. EMFILE: back off instead of spinning
                _limited.warning("accept", "HA port: accept failed: %s", exc.strerror or exc)
                await asyncio.sleep(0.1)
                continue
            peer = _format_peer(addr)
            if len(self._tasks) >= self.max_connections:
                self.refused += 1
                _limited.warning("cap", "HA port: closed the connection from %s: %d connections already "
                                 "(haMaxConnections)", peer, len(self._tasks))
                conn.close()
                continue
            task = loop.create_task(self._serve(conn, peer), name=f"ha-slave-{peer}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: socket.socket, peer: str) -> None:
        """One connection from accept to close: TLS, authentication, then replication."""
        loop = asyncio.get_running_loop()
        writer: asyncio.StreamWriter | None = None
        try:
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            reader = asyncio.StreamReader(limit=READ_LIMIT_BYTES)
            protocol = asyncio.StreamReaderProtocol(reader)
            # authentication must be quick; without it the reference's rule: a first report within housekeeping
            deadline = loop.time() + (HANDSHAKE_TIMEOUT_S if self.admin_secret is not None else HOUSEKEEPING_INTERVAL_S)
            try:
                if self.ssl_context is None:
                    transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn)
                else:
                    transport, _ = await loop.connect_accepted_socket(
                        lambda: protocol, conn, ssl=self.ssl_context,
                        ssl_handshake_timeout=min(TLS_HANDSHAKE_TIMEOUT_S, HANDSHAKE_TIMEOUT_S))
            except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError) as exc:
                _limited.info(("tls", _host(peer)), "HA port: TLS handshake with %s failed (tlsMode=enforcing): %s", peer,
                              getattr(exc, "reason", None) or exc or type(exc).__name__)
                return
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            transport.set_write_buffer_limits(high=WRITE_BUDGET_BYTES)
            first = await self._admit(reader, writer, peer, deadline)
            if first is None:
                return
            await self.connection_class(self, reader, writer, peer, first).run()
        except (OSError, ConnectionError) as exc:
            _limited.info(("ended", _host(peer)), "HA connection from %s ended: %s", peer, exc)
        finally:
            if writer is not None:
                writer.close()
            else:
                conn.close()

    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str,
                     deadline: float) -> bytes | None:
        """The bytes to start the replication with (after the handshake, under ACL), None when the peer is
        refused (told why, then closed)."""
        loop = asyncio.get_running_loop()
        handshake = MasterHandshake(self.admin_secret) if self.admin_secret is not None else None
        while True:
            try:
                data = await asyncio.wait_for(reader.read(4096), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                if handshake is None:
                    _limited.info(("silent", _host(peer)), "HA port: %s sent no report for %.0f s: closed", peer, HOUSEKEEPING_INTERVAL_S)
                    return None
                _limited.warning(("auth", _host(peer)), "HA port: %s did not authenticate within %.0f s (aclEnable=true): "
                                 "closed", peer, HANDSHAKE_TIMEOUT_S)
                return None
            if not data:
                return None
            if handshake is None:
                if looks_like_handshake(data):
                    _limited.warning(("no-acl", _host(peer)), "HA port: %s wants to authenticate, but aclEnable=false on "
                                     "this master: closed (turn ACL on on both brokers, or off on both)", peer)
                    await self._send_and_close(writer, encode_refuse(
                        "aclEnable=false on this master: it does not authenticate slaves"))
                    return None
                return data
            try:
                handshake.feed(data)
            except HandshakeError as exc:
                _limited.warning(("auth", _host(peer)), "HA port: refused %s: %s", peer, exc)
                await self._send_and_close(writer, handshake.outbound())
                return None
            out = handshake.outbound()
            if out:
                writer.write(out)
            if handshake.done:
                _limited.info(("authenticated", _host(peer)), "HA port: %s authenticated as admin account %s", peer,
                              handshake.access_key)
                return handshake.rest or await self._first_read(reader)

    @staticmethod
    async def _first_read(reader: asyncio.StreamReader) -> bytes:
        data = await asyncio.wait_for(reader.read(4096), HOUSEKEEPING_INTERVAL_S)
        if not data:
            raise ConnectionError("closed by the slave after authenticating")
        return data

    @staticmethod
    async def _send_and_close(writer: asyncio.StreamWriter, data: bytes) -> None:
        try:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), 1.0)
        except (OSError, ConnectionError, asyncio.TimeoutError):
            pass

    # ------------------------------------------------------------------ the log
    def max_offset(self) -> int:
        return self.commit_log.max_offset

    def min_offset(self) -> int:
        return self.commit_log.min_offset

    def read(self, position: int, limit: int) -> bytes:
        """Up to limit bytes of the log from position, within one file; the rest of a full file (BLANK marker and
        padding) counts as data."""
        cl = self.commit_log
        mf = cl.mfq.find(position)
        if mf is None:
            return b""
        pos = position - mf.file_from_offset
        end = mf.wrote_position
        if mf is not cl.mfq.last and cl.max_offset > mf.file_from_offset + self.file_size - 1:
            end = self.file_size  # a file the log has moved past: everything up to its end
        size = min(limit, end - pos)
        return bytes(mf.mm[pos:pos + size]) if size > 0 else b""

    def on_append(self, *_args: object) -> None:
        """Store arrival listener: wake the streams."""
        self._data.set()

    async def wait_for_data(self, position: int, timeout: float) -> None:
        if self.max_offset() > position:
            return
        self._data.clear()
        try:
            await asyncio.wait_for(self._data.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    # ------------------------------------------------------------------ SYNC_MASTER
    def slave_available(self, end_offset: int) -> bool:
        """At least one slave connected and not more than haSlaveFallbehindMax behind."""
        if not self.slaves:
            return False
        return end_offset - max(self.push_max_offset, 0) < FALL_BEHIND_MAX

    def acknowledged(self, offset: int) -> None:
        if offset > self.push_max_offset:
            self.push_max_offset = offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            _, _, fut = waiters.pop(0)
            if not fut.done():
                fut.set_result(True)

    async def wait_for_slave(self, end_offset: int, timeout: float) -> bool:
        """True once some slave acknowledged end_offset, False after timeout."""
        if self.push_max_offset >= end_offset:
            return True
        fut = asyncio.get_running_loop().create_future()
        self._seq += 1
        entry = (end_offset, self._seq, fut)
        bisect.insort(self._waiters, entry)
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            return False
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    def replication_lag(self) -> int:
        """Bytes the furthest slave is behind (the whole log's length when none is connected)."""
        if not self.slaves:
            return max(0, self.max_offset() - self.min_offset())
        return max(0, self.max_offset() - max(s.acked for s in self.slaves))
