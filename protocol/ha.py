"""The master/slave (HA) byte protocol of the reference broker, sans-I/O (replication.md §3).

Slave -> master: 8-byte big-endian offset reports (the slave's max physical offset; the first one on a connection is
where to start, every later one an acknowledgement). Master -> slave: data frames of an 8-byte physical offset, a
4-byte size N and N bytes copied verbatim from the commit log (N = 0: a heartbeat). No remoting frames.
"""

from __future__ import annotations

import struct

__all__ = ["REPORT_SIZE", "FRAME_HEADER_SIZE", "MAX_TRANSFER_BATCH", "HAProtocolError", "encode_report",
           "ReportReader", "encode_frame_header", "FrameReader"]

REPORT_SIZE = 8
FRAME_HEADER_SIZE = 12
MAX_TRANSFER_BATCH = 32768  # haTransferBatchSize: the reference master never sends more per frame
_FRAME_LIMIT = 64 * 1024 * 1024  # a larger announced size is a corrupt stream, not data

_REPORT = struct.Struct(">q")
_HEADER = struct.Struct(">qi")


class HAProtocolError(ValueError):
    """The peer sent something the HA protocol does not allow; the connection must be dropped."""


def encode_report(offset: int) -> bytes:
    return _REPORT.pack(offset)


class ReportReader:
    """Slave reports out of a byte stream: feed() returns the newest complete report (or None)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> int | None:
        buf = self._buf + data
        whole = len(buf) - len(buf) % REPORT_SIZE
        self._buf = buf[whole:]
        if not whole:
            return None
        offset = _REPORT.unpack_from(buf, whole - REPORT_SIZE)[0]
        if offset < 0:
            raise HAProtocolError(f"negative offset report {offset}")
        return offset

    def feed_all(self, data: bytes) -> list[int]:
        """Every complete report in order (the first report of a connection matters on its own)."""
        buf = self._buf + data
        whole = len(buf) - len(buf) % REPORT_SIZE
        self._buf = buf[whole:]
        reports = [_REPORT.unpack_from(buf, i)[0] for i in range(0, whole, REPORT_SIZE)]
        if any(r < 0 for r in reports):
            raise HAProtocolError("negative offset report")
        return reports


def encode_frame_header(offset: int, size: int) -> bytes:
    return _HEADER.pack(offset, size)


class FrameReader:
    """Master data frames out of a byte stream: feed() returns [(offset, bytes), ...] of the complete frames."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buf = self._buf
        buf += data
        frames: list[tuple[int, bytes]] = []
        pos = 0
        while len(buf) - pos >= FRAME_HEADER_SIZE:
            offset, size = _HEADER.unpack_from(buf, pos)
            if offset < 0 or size < 0 or size > _FRAME_LIMIT:
                raise HAProtocolError(f"bad frame header: offset {offset}, size {size}")
            end = pos + FRAME_HEADER_SIZE + size
            if len(buf) < end:
                break
            frames.append((offset, bytes(buf[pos + FRAME_HEADER_SIZE:end])))
            pos = end
        if pos:
            del buf[:pos]
        return frames
