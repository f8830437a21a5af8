"""The controller-mode ("auto-switch") HA frames, sans-I/O (controller.md §10).

Same listener as classic HA (protocol/ha.py); under ``aclEnable`` the authentication handshake of protocol/ha.py
comes first. Then, big-endian, every message starts with an int32 state (HANDSHAKE 1, TRANSFER 2):

* slave -> master handshake, 16 bytes: state 1, int16 syncFromLastFile, int16 asyncLearner, int64 slave controller id;
* master -> slave handshake, 20 + 12n bytes: state 1, int32 body size 12n, int64 master max offset, int32 master last
  epoch, then n x (int32 epoch, int64 start offset): the master's history, compared by the slave before copying;
* slave -> master report, 12 bytes: state 2, int64 slave max offset (the first: where to start, then acks);
* master -> slave transfer, 36 + N bytes: state 2, int32 N, int64 offset of the first byte, int32 epoch of the data,
  int64 that epoch's start offset, int64 master confirmOffset, N bytes of commit log (N = 0: a heartbeat).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.ha import HAProtocolError

__all__ = ["STATE_HANDSHAKE", "STATE_TRANSFER", "SLAVE_HANDSHAKE_SIZE", "REPORT_SIZE", "TRANSFER_HEADER_SIZE",
           "SlaveHello", "MasterHello", "Transfer", "encode_slave_hello", "decode_slave_hello",
           "encode_master_hello", "MasterHelloReader", "encode_report", "ReportReader", "encode_transfer_header",
           "TransferReader"]

STATE_HANDSHAKE = 1
STATE_TRANSFER = 2
_SLAVE_HELLO = struct.Struct(">ihhq")
_MASTER_HELLO = struct.Struct(">iiqi")
_EPOCH = struct.Struct(">iq")
_REPORT = struct.Struct(">iq")
_TRANSFER = struct.Struct(">iiqiqq")
SLAVE_HANDSHAKE_SIZE = _SLAVE_HELLO.size
REPORT_SIZE = _REPORT.size
TRANSFER_HEADER_SIZE = _TRANSFER.size
_MAX_EPOCHS = 1 << 16  # a longer history is a corrupt stream
_FRAME_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SlaveHello:
    broker_id: int
    sync_from_last_file: bool = False
    async_learner: bool = False


@dataclass(frozen=True, slots=True)
class MasterHello:
    max_offset: int
    last_epoch: int
    epochs: list[tuple[int, int]]  # (epoch, start offset), oldest first


@dataclass(frozen=True, slots=True)
class Transfer:
    offset: int
    epoch: int
    epoch_start: int
    confirm_offset: int
    data: bytes


def encode_slave_hello(hello: SlaveHello) -> bytes:
    return _SLAVE_HELLO.pack(STATE_HANDSHAKE, int(hello.sync_from_last_file), int(hello.async_learner), hello.broker_id)


def decode_slave_hello(data: bytes) -> SlaveHello:
    """The first 16 bytes of a controller-mode slave's connection; HAProtocolError when they are not a handshake."""
    if len(data) < SLAVE_HANDSHAKE_SIZE:
        raise HAProtocolError(f"short handshake ({len(data)} bytes)")
    state, last_file, learner, broker_id = _SLAVE_HELLO.unpack_from(data)
    if state != STATE_HANDSHAKE or last_file not in (0, 1) or learner not in (0, 1) or broker_id <= 0:
        raise HAProtocolError("the slave did not send a controller-mode handshake (is enableControllerMode=true on "
                              "both brokers?)")
    return SlaveHello(broker_id, bool(last_file), bool(learner))


def encode_master_hello(hello: MasterHello) -> bytes:
    body = b"".join(_EPOCH.pack(e, s) for e, s in hello.epochs)
    return _MASTER_HELLO.pack(STATE_HANDSHAKE, len(body), hello.max_offset, hello.last_epoch) + body


class MasterHelloReader:
    """The master's handshake out of a byte stream: ``feed`` returns it once complete (``rest``: what followed)."""

    __slots__ = ("_buf", "rest")

    def __init__(self) -> None:
        self._buf = b""
        self.rest = b""

    def feed(self, data: bytes) -> MasterHello | None:
        buf = self._buf + data
        if len(buf) < _MASTER_HELLO.size:
            self._buf = buf
            return None
        state, size, max_offset, last_epoch = _MASTER_HELLO.unpack_from(buf)
        if state != STATE_HANDSHAKE or size < 0 or size % _EPOCH.size or size > _MAX_EPOCHS * _EPOCH.size \
                or max_offset < 0:
            raise HAProtocolError("the master did not answer with a controller-mode handshake (is "
                                  "enableControllerMode=true on the master?)")
        end = _MASTER_HELLO.size + size
        if len(buf) < end:
            self._buf = buf
            return None
        epochs = [_EPOCH.unpack_from(buf, pos) for pos in range(_MASTER_HELLO.size, end, _EPOCH.size)]
        self._buf, self.rest = b"", buf[end:]
        return MasterHello(max_offset, last_epoch, epochs)


def encode_report(offset: int) -> bytes:
    return _REPORT.pack(STATE_TRANSFER, offset)


class ReportReader:
    """Slave reports: ``feed`` returns every complete one in order."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed_all(self, data: bytes) -> list[int]:
        buf = self._buf + data
        whole = len(buf) - len(buf) % REPORT_SIZE
        self._buf = buf[whole:]
        out = []
        for pos in range(0, whole, REPORT_SIZE):
            state, offset = _REPORT.unpack_from(buf, pos)
            if state != STATE_TRANSFER or offset < 0:
                raise HAProtocolError(f"bad report (state {state}, offset {offset})")
            out.append(offset)
        return out


def encode_transfer_header(offset: int, size: int, epoch: int, epoch_start: int, confirm_offset: int) -> bytes:
    return _TRANSFER.pack(STATE_TRANSFER, size, offset, epoch, epoch_start, confirm_offset)


class TransferReader:
    """Master transfers out of a byte stream: ``feed`` returns the complete ones."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Transfer]:
        buf = self._buf
        buf += data
        out: list[Transfer] = []
        pos = 0
        while len(buf) - pos >= TRANSFER_HEADER_SIZE:
            state, size, offset, epoch, epoch_start, confirm = _TRANSFER.unpack_from(buf, pos)
            if state != STATE_TRANSFER or size < 0 or size > _FRAME_LIMIT or offset < 0 or epoch_start < 0 \
                    or epoch_start > offset:
                raise HAProtocolError(f"bad transfer header (state {state}, offset {offset}, size {size}, "
                                      f"epoch {epoch} from {epoch_start})")
            end = pos + TRANSFER_HEADER_SIZE + size
            if len(buf) < end:
                break
            out.append(Transfer(offset, epoch, epoch_start, confirm, bytes(buf[pos + TRANSFER_HEADER_SIZE:end])))
            pos = end
        if pos:
            del buf[:pos]
        return out
