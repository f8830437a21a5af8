"""The master/slave (HA) byte protocol of the reference broker, and this project's authentication handshake in front
of it, sans-I/O (replication.md §3).

Slave -> master: 8-byte big-endian offset reports (the slave's max physical offset; the first one on a connection is
where to start, every later one an acknowledgement). Master -> slave: data frames of an 8-byte physical offset, a
4-byte size N and N bytes copied verbatim from the commit log (N = 0: a heartbeat). No remoting frames.

Authentication (this project; brokers with ``aclEnable=true`` on both sides). Before the first report, both peers
prove they know the secret key of one *admin* account of the ACL file, with fresh nonces from both sides, so neither
a replayed nor a reflected message passes::

    slave  -> master  HELLO      version, nonce_s (32 random bytes), accessKey
    master -> slave   CHALLENGE  nonce_m (32 random bytes), HMAC(secret, "master", accessKey, nonce_s, nonce_m)
    slave  -> master  PROOF      HMAC(secret, "slave", accessKey, nonce_s, nonce_m)
    master -> slave   ACCEPT     (then the usual reports and frames)

HMAC is HMAC-SHA256 keyed with the secret key's UTF-8 bytes over ``"rocketmq-ha-1" 0 role 0 accessKey 0 nonce_s
nonce_m``. Either side answers a failure with REFUSE (a short reason) and closes. Each message is ``0xFF 'R' 'H' 'A'``,
a type byte, a 2-byte length and the payload: read as an offset report its first 8 bytes are negative, which no
report can be, so a master tells a HELLO from a plain report by its first byte. The handshake authenticates the
peers, not the bytes that follow: only TLS (``tlsMode=enforcing``) keeps the stream secret and unaltered.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Callable

__all__ = ["REPORT_SIZE", "FRAME_HEADER_SIZE", "MAX_TRANSFER_BATCH", "HAProtocolError", "encode_report",
           "ReportReader", "encode_frame_header", "FrameReader", "HANDSHAKE_MAGIC", "NONCE_SIZE",
           "HandshakeError", "MasterHandshake", "SlaveHandshake", "encode_refuse", "looks_like_handshake"]

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


# --- authentication handshake -------------------------------------------------------------------------------------
HANDSHAKE_MAGIC = b"\xffRHA"
HANDSHAKE_VERSION = 1
NONCE_SIZE = 32
_MAC_SIZE = 32
_LABEL = b"rocketmq-ha-1"
_MSG_HEADER = struct.Struct(">4sBH")  # magic, type, payload length
_MAX_PAYLOAD = 1024
HELLO, CHALLENGE, PROOF, ACCEPT, REFUSE = 1, 2, 3, 4, 5
_NAMES = {HELLO: "HELLO", CHALLENGE: "CHALLENGE", PROOF: "PROOF", ACCEPT: "ACCEPT", REFUSE: "REFUSE"}


class HandshakeError(HAProtocolError):
    """The handshake failed; the message says why (for the log). Anything queued (a REFUSE) is still to be sent."""


def looks_like_handshake(data: bytes) -> bool:
    """Whether the first bytes of a connection start a handshake message rather than an offset report."""
    return bool(data) and data[0] == HANDSHAKE_MAGIC[0]


def _message(kind: int, payload: bytes = b"") -> bytes:
    return _MSG_HEADER.pack(HANDSHAKE_MAGIC, kind, len(payload)) + payload


def encode_refuse(reason: str) -> bytes:
    """A REFUSE message (the reason is cut to what fits)."""
    return _message(REFUSE, reason.encode("utf-8", "replace")[:_MAX_PAYLOAD])


def _mac(secret: str, role: bytes, access_key: str, nonce_s: bytes, nonce_m: bytes) -> bytes:
    text = b"\0".join((_LABEL, role, access_key.encode("utf-8"), nonce_s + nonce_m))
    return hmac.digest(secret.encode("utf-8"), text, hashlib.sha256)


class _Messages:
    """Handshake messages out of a byte stream; what follows the last one expected stays in ``rest``."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next(self) -> tuple[int, bytes] | None:
        buf = self._buf
        if len(buf) < _MSG_HEADER.size:
            if buf and not HANDSHAKE_MAGIC.startswith(buf[:4]):
                raise HandshakeError("the peer did not send a handshake message (no authentication)")
            return None
        magic, kind, size = _MSG_HEADER.unpack_from(buf)
        if magic != HANDSHAKE_MAGIC:
            raise HandshakeError("the peer did not send a handshake message (no authentication)")
        if kind not in _NAMES or size > _MAX_PAYLOAD:
            raise HandshakeError(f"bad handshake message (type {kind}, {size} bytes)")
        end = _MSG_HEADER.size + size
        if len(buf) < end:
            return None
        self._buf = buf[end:]
        return kind, buf[_MSG_HEADER.size:end]

    def take_rest(self) -> bytes:
        rest, self._buf = self._buf, b""
        return rest


class MasterHandshake:
    """The master's side: ``feed`` what the connection reads, send ``outbound()`` after each feed. ``done`` once the
    slave proved itself (``access_key`` names the account; ``rest`` holds the bytes after its PROOF: the first
    reports). A failure queues a REFUSE and raises HandshakeError.

    ``admin_secret(access_key)`` gives the secret key of that admin account of the ACL file, None when there is no
    such admin account."""

    def __init__(self, admin_secret: Callable[[str], str | None], nonce: bytes | None = None) -> None:
        self._admin_secret = admin_secret
        self._nonce = nonce if nonce is not None else os.urandom(NONCE_SIZE)
        self._messages = _Messages()
        self._out = bytearray()
        self._expected: bytes | None = None  # the slave's proof, once the challenge is out
        self.access_key: str | None = None
        self.done = False
        self.rest = b""

    def outbound(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def _refuse(self, reason: str, log_reason: str | None = None) -> HandshakeError:
        self._out += encode_refuse(reason)
        return HandshakeError(log_reason or reason)

    def feed(self, data: bytes) -> None:
        if self.done:
            raise HandshakeError("handshake already finished")
        self._messages.feed(data)
        while not self.done:
            try:
                message = self._messages.next()
            except HandshakeError as exc:
                raise self._refuse("authentication required (aclEnable=true): send a HELLO with an admin "
                                   "accessKey first", str(exc)) from None
            if message is None:
                return
            kind, payload = message
            if self._expected is None:
                self._on_hello(kind, payload)
            else:
                self._on_proof(kind, payload)

    def _on_hello(self, kind: int, payload: bytes) -> None:
        if kind != HELLO:
            raise self._refuse(f"expected HELLO, got {_NAMES[kind]}")
        if len(payload) < 2 + NONCE_SIZE or payload[0] != HANDSHAKE_VERSION:
            raise self._refuse(f"unsupported HELLO (version {payload[:1].hex() or 'none'}, {len(payload)} bytes)")
        nonce_s = payload[1:1 + NONCE_SIZE]
        key_len = payload[1 + NONCE_SIZE]
        raw_key = payload[2 + NONCE_SIZE:]
        if len(raw_key) != key_len:
            raise self._refuse("malformed HELLO (accessKey length)")
        try:
            access_key = raw_key.decode("utf-8")
        except UnicodeDecodeError:
            raise self._refuse("malformed HELLO (accessKey is not UTF-8)") from None
        secret = self._admin_secret(access_key)
        if secret is None:
            raise self._refuse(f"accessKey {access_key!r} is no admin account of this master's ACL file")
        if nonce_s == self._nonce:
            raise self._refuse("the slave's nonce equals the master's")
        self.access_key = access_key
        self._expected = _mac(secret, b"slave", access_key, nonce_s, self._nonce)
        self._out += _message(CHALLENGE, self._nonce + _mac(secret, b"master", access_key, nonce_s, self._nonce))

    def _on_proof(self, kind: int, payload: bytes) -> None:
        if kind != PROOF or len(payload) != _MAC_SIZE:
            raise self._refuse(f"expected PROOF, got {_NAMES[kind]} of {len(payload)} bytes")
        if not hmac.compare_digest(payload, self._expected or b""):
            raise self._refuse(f"wrong proof for accessKey {self.access_key!r} (not its secret key)")
        self._out += _message(ACCEPT)
        self.done = True
        self.rest = self._messages.take_rest()


class SlaveHandshake:
    """The slave's side: send ``hello()``, then ``feed`` what the connection reads and send ``outbound()`` after each
    feed. ``done`` once the master proved itself and accepted this slave (``rest``: the bytes after ACCEPT, the first
    frames). A failure raises HandshakeError (a REFUSE from the master carries its reason)."""

    def __init__(self, access_key: str, secret_key: str, nonce: bytes | None = None) -> None:
        raw_key = access_key.encode("utf-8")
        if not raw_key or len(raw_key) > 255:
            raise ValueError("an accessKey of 1..255 bytes is needed")
        self.access_key = access_key
        self._secret = secret_key
        self._nonce = nonce if nonce is not None else os.urandom(NONCE_SIZE)
        self._messages = _Messages()
        self._out = bytearray()
        self._challenged = False
        self.done = False
        self.rest = b""

    def hello(self) -> bytes:
        raw_key = self.access_key.encode("utf-8")
        return _message(HELLO, bytes([HANDSHAKE_VERSION]) + self._nonce + bytes([len(raw_key)]) + raw_key)

    def outbound(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def feed(self, data: bytes) -> None:
        if self.done:
            raise HandshakeError("handshake already finished")
        self._messages.feed(data)
        while not self.done:
            try:
                message = self._messages.next()
            except HandshakeError:
                raise HandshakeError("the master answered without authenticating (is aclEnable=true on the master, "
                                     "and does it run this version?)") from None
            if message is None:
                return
            kind, payload = message
            if kind == REFUSE:
                raise HandshakeError(f"the master refused: {payload.decode('utf-8', 'replace')}")
            if not self._challenged:
                self._on_challenge(kind, payload)
            elif kind == ACCEPT:
                self.done = True
                self.rest = self._messages.take_rest()
            else:
                raise HandshakeError(f"expected ACCEPT, got {_NAMES[kind]}")

    def _on_challenge(self, kind: int, payload: bytes) -> None:
        if kind != CHALLENGE or len(payload) != NONCE_SIZE + _MAC_SIZE:
            raise HandshakeError(f"expected CHALLENGE, got {_NAMES[kind]} of {len(payload)} bytes")
        nonce_m, proof = payload[:NONCE_SIZE], payload[NONCE_SIZE:]
        if nonce_m == self._nonce:
            raise HandshakeError("the master's nonce equals this slave's (a reflected HELLO)")
        expected = _mac(self._secret, b"master", self.access_key, self._nonce, nonce_m)
        if not hmac.compare_digest(proof, expected):
            raise HandshakeError(f"the master could not prove it knows accessKey {self.access_key!r}'s secret key "
                                 "(a broker without this ACL file, or another program on the master's HA port)")
        self._challenged = True
        self._out += _message(PROOF, _mac(self._secret, b"slave", self.access_key, self._nonce, nonce_m))
