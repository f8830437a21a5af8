"""The master side of replication: the HA listener streaming the commit log to slaves (replication.md §3, §4).

Each slave connection reads 8-byte offset reports (the first: where to start; 0 = the newest file's first byte; later
ones: acknowledgements) and is sent the commit log from there in frames of at most 32 KiB that never span two files,
byte for byte (BLANK markers and padding included), with an empty frame as heartbeat when nothing new was written.
SYNC_MASTER sends wait on `wait_for_slave(end_offset)`: True once any slave acknowledged that far.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from typing import Any

from protocol.ha import MAX_TRANSFER_BATCH, HAProtocolError, ReportReader, encode_frame_header

log = logging.getLogger(__name__)

__all__ = ["HAMaster"]

HEARTBEAT_INTERVAL_S = 5.0  # haSendHeartbeatInterval
HOUSEKEEPING_INTERVAL_S = 20.0  # haHousekeepingInterval: a slave silent this long is dropped
FALL_BEHIND_MAX = 256 * 1024 * 1024  # haSlaveFallbehindMax


class _SlaveConnection:
    def __init__(self, master: "HAMaster", reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.master = master
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.addr = f"{peer[0]}:{peer[1]}" if peer else "?"
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
                    log.log(level, "slave %s disconnected: %s", self.addr, exc)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.writer.close()

    async def _read_reports(self) -> None:
        reports = ReportReader()
        master = self.master
        while True:
            try:
                data = await asyncio.wait_for(self.reader.read(4096), HOUSEKEEPING_INTERVAL_S)
            except asyncio.TimeoutError:
                raise ConnectionError(f"no report for {HOUSEKEEPING_INTERVAL_S:.0f} s") from None
            if not data:
                raise ConnectionError("closed by the slave")
            self.last_read = time.monotonic()
            for offset in reports.feed_all(data):
                if not self.requested.done():
                    self.requested.set_result(offset)
                    log.info("slave %s connected, replicating from offset %d", self.addr, offset)
                    continue
                own = master.max_offset()
                if offset > own:
                    raise HAProtocolError(
                        f"the slave reports offset {offset}, beyond this master's end {own}: its log is ahead "
                        "(this master lost data it had replicated); rebuild the slave's store or let this "
                        "master's log grow past it")
                self.acked = offset
                master.acknowledged(offset)

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
                await self.writer.drain()
                continue
            now = time.monotonic()
            if now - last_write >= HEARTBEAT_INTERVAL_S:
                self.writer.write(encode_frame_header(position, 0))
                await self.writer.drain()
                last_write = now
            await master.wait_for_data(position, HEARTBEAT_INTERVAL_S)


class HAMaster:
    """The HA listener of a master; owned and started by the broker object."""

    def __init__(self, commit_log: Any, host: str, port: int) -> None:
        self.commit_log = commit_log
        self.file_size: int = commit_log.file_size
        self.host = host
        self.port = port
        self.server: asyncio.AbstractServer | None = None
        self.slaves: set[_SlaveConnection] = set()
        self.push_max_offset = -1  # highest acknowledgement of any slave
        self._tasks: set[asyncio.Task] = set()
        self._data = asyncio.Event()
        self._waiters: list[tuple[int, int, asyncio.Future]] = []  # (end offset, seq, future), sorted
        self._seq = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, self.host, self.port)
        sockets = self.server.sockets or []
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _SlaveConnection(self, reader, writer)
        self.slaves.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await conn.run()
        finally:
            self.slaves.discard(conn)
            if task is not None:
                self._tasks.discard(task)

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
