"""Host packing, broker offset message ids (§5.3) and client UNIQ_KEY ids (§5.4)."""

from __future__ import annotations

import ipaddress
import os
import random
import struct
import time
from functools import lru_cache

__all__ = [
    "pack_host",
    "unpack_host",
    "offset_msg_id",
    "offset_msg_ids",
    "decode_offset_msg_id",
    "UniqKeyGenerator",
]

_PORT = struct.Struct(">i")
_OFFSET = struct.Struct(">q")


@lru_cache(maxsize=1024)
def pack_host(ip: str, port: int) -> bytes:
    """Pack ip:port as stored in records: 4-byte IPv4 + int32 port (8 bytes) or 16-byte IPv6 + int32 port (20).

    IPv4-mapped IPv6 addresses (``::ffff:a.b.c.d`` from dual-stack sockets) pack as IPv4, like Java's Inet4Address.
    """
    addr = ipaddress.ip_address(ip.split("%", 1)[0])  # drop an IPv6 zone id
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.packed + _PORT.pack(port)


@lru_cache(maxsize=1024)
def _unpack_cached(raw: bytes) -> tuple[str, int]:
    if len(raw) == 8:
        ip = str(ipaddress.IPv4Address(raw[:4]))
    else:
        ip = str(ipaddress.IPv6Address(raw[:16]))
    return ip, _PORT.unpack_from(raw, len(raw) - 4)[0]


def unpack_host(buf, pos: int, ipv6: bool) -> tuple[str, int]:
    """Read a packed host at buf[pos:] (20 bytes if ipv6 else 8) and return (ip, port)."""
    size = 20 if ipv6 else 8
    raw = bytes(buf[pos : pos + size])
    if len(raw) != size:
        raise ValueError(f"packed host needs {size} bytes at {pos}, only {len(raw)} available")
    return _unpack_cached(raw)


def offset_msg_id(store_host_packed: bytes, physical_offset: int) -> str:
    """Broker message id: uppercase hex of packed store host + int64 commit-log offset (32 or 56 chars)."""
    return (store_host_packed + _OFFSET.pack(physical_offset)).hex().upper()


def offset_msg_ids(store_host_packed: bytes, physical_offsets: list[int]) -> list[str]:
    """offset_msg_id for many offsets of one store host (a batch's response): the host part is formatted once."""
    prefix = store_host_packed.hex().upper()
    return [f"{prefix}{offset:016X}" if offset >= 0 else offset_msg_id(store_host_packed, offset)
            for offset in physical_offsets]


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """Split an offset message id into (store ip, store port, commit-log offset); ValueError if malformed."""
    if not isinstance(msg_id, str) or len(msg_id) not in (32, 56):
        raise ValueError(f"offset message id must be 32 or 56 hex characters, got {msg_id!r}")
    raw = bytes.fromhex(msg_id)
    host_len = 8 if len(raw) == 16 else 20
    ip, port = _unpack_cached(raw[:host_len])
    return ip, port, _OFFSET.unpack_from(raw, host_len)[0]


def _month_bounds_ms(now_s: float) -> tuple[int, int]:
    """Epoch ms of the start of the current and of the next month, in the local time zone."""
    local = time.localtime(now_s)
    year, month = local.tm_year, local.tm_mon
    next_year, next_month = (year + 1, 1) if month == 12 else (year, month + 1)
    start = time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1))
    end = time.mktime((next_year, next_month, 1, 0, 0, 0, 0, 0, -1))
    return int(start * 1000), int(end * 1000)


class UniqKeyGenerator:
    """Generates UNIQ_KEY ids laid out as Java's MessageClientIDSetter does (§5.4).

    ip (4/16 bytes) + pid low 16 bits + a per-process random int32 (Java: class-loader hash) + ms since the start of
    the current local month (int32, wraps like Java's int cast) + a 16-bit wrapping counter, as uppercase hex.
    """

    __slots__ = ("_prefix", "_counter", "_month_start_ms", "_next_month_ms", "_clock")

    def __init__(self, ip: str = "127.0.0.1", pid: int | None = None, *, salt: int | None = None, clock=time.time):
        address = pack_host(ip, 0)[:-4]
        pid16 = (os.getpid() if pid is None else pid) & 0xFFFF
        salt32 = (random.getrandbits(32) if salt is None else salt) & 0xFFFFFFFF
        self._prefix = (address + struct.pack(">HI", pid16, salt32)).hex().upper()
        self._counter = 0
        self._clock = clock
        self._month_start_ms, self._next_month_ms = _month_bounds_ms(clock())

    @property
    def prefix(self) -> str:
        """The fixed hex part (ip, pid, salt) shared by every id of this generator."""
        return self._prefix

    def next(self) -> str:
        """A new id; cheap (one clock read and one format)."""
        now_ms = int(self._clock() * 1000)
        if now_ms >= self._next_month_ms:
            self._month_start_ms, self._next_month_ms = _month_bounds_ms(now_ms / 1000)
        counter = self._counter
        self._counter = (counter + 1) & 0xFFFF
        return f"{self._prefix}{(now_ms - self._month_start_ms) & 0xFFFFFFFF:08X}{counter:04X}"

    __call__ = next
