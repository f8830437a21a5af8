"""Incremental, sans-I/O frame decoder: bytes in, RemotingCommands out.

Linear in the input: complete frames are decoded straight from the caller's chunk (no copy into the
buffer); only the unfinished tail of one frame is ever buffered, so memory stays below
max_frame_size + 4 bytes whatever the peer sends.
"""

from __future__ import annotations

import struct

from protocol.command import MAX_HEADER_LENGTH, ProtocolError, RemotingCommand, decode_command

__all__ = ["FrameDecoder", "ProtocolError", "DEFAULT_MAX_FRAME_SIZE", "REQUEST_MAX_HEADER_SIZE"]

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
# The largest header a server parses. A real request's header is small fields plus at most 32 KiB of message
# properties (JSON escaping of \u0001/\u0002 can make them six times longer) or a selector (64 KiB at most, and a
# longer one still gets SUBSCRIPTION_PARSE_FAILED naming the limit). Anything longer is refused before it is parsed
# and its connection closed: a 16 MiB JSON header would hold the event loop for about 0.1 s, 2 MiB for ~15 ms.
REQUEST_MAX_HEADER_SIZE = 2 * 1024 * 1024

_LENGTH = struct.Struct(">i")
_unpack_length = _LENGTH.unpack_from


class FrameDecoder:
    """Feed received bytes; get back every command they complete. Raises ProtocolError on a bad frame,
    after which the decoder stays failed (the connection must be closed)."""

    __slots__ = ("max_frame_size", "max_header_size", "_buf", "_need", "_failed")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 max_header_size: int = MAX_HEADER_LENGTH) -> None:
        self.max_frame_size = max_frame_size
        self.max_header_size = max_header_size
        self._buf = bytearray()  # unfinished frame (length field included)
        self._need = 4  # total bytes (incl. length field) the buffered frame needs; 4 until length known
        self._failed: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes currently held for an incomplete frame."""
        return len(self._buf)

    @property
    def pending_frame_size(self) -> int:
        """Total size (length field included) of the frame being buffered, as its header announced; 0 when
        nothing is buffered, 4 while the length field itself is incomplete. Lets a server budget the memory a
        peer's unfinished frame will take before the bytes arrive."""
        return self._need if self._buf else 0

    def _check_length(self, length: int) -> None:
        if length < 4:
            self._fail(f"frame length {length} is smaller than the type word")
        if length > self.max_frame_size:
            self._fail(f"frame length {length} exceeds the maximum {self.max_frame_size}")

    def _fail(self, message: str) -> None:
        self._failed = ProtocolError(message)
        self._buf = bytearray()
        raise ProtocolError(message)

    def _decode(self, payload: memoryview) -> RemotingCommand:
        try:
            return decode_command(payload, self.max_header_size)
        except ProtocolError as exc:
            self._failed = exc
            self._buf = bytearray()
            raise

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        if self._failed is not None:
            raise ProtocolError(f"decoder already failed: {self._failed}")
        out: list[RemotingCommand] = []
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        size = len(view)
        pos = 0
        buf = self._buf
        if buf:
            # Complete the buffered frame first, appending no more than it needs.
            while pos < size:
                take = min(self._need - len(buf), size - pos)
                buf += view[pos : pos + take]
                pos += take
                if len(buf) < self._need:
                    break
                if self._need == 4:
                    (length,) = _unpack_length(buf, 0)
                    self._check_length(length)
                    self._need = 4 + length
                    continue
                with memoryview(buf) as frame_view:
                    out.append(self._decode(frame_view[4:]))
                buf.clear()
                self._need = 4
                break
            if buf:
                return out
        # Decode whole frames directly from the caller's chunk.
        max_size = self.max_frame_size
        while size - pos >= 4:
            (length,) = _unpack_length(view, pos)
            if length < 4 or length > max_size:
                self._check_length(length)
            end = pos + 4 + length
            if end > size:
                self._need = 4 + length
                break
            out.append(self._decode(view[pos + 4 : end]))
            pos = end
        if pos < size:
            if size - pos < 4:
                self._need = 4
            buf += view[pos:]
        return out
