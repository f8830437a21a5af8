"""Host-derived defaults and small helpers shared by the key tables, the validator and the model.

Kept apart from the tables so a key module can name a default factory without importing the validator.
"""

from __future__ import annotations

import functools
import os
import socket

__all__ = ["default_broker_ip", "default_broker_name", "env_namesrv_addr", "expand_path", "pack_store_host"]


@functools.lru_cache(maxsize=1)
def default_broker_ip() -> str:
    """First non-loopback IPv4 address of this host; 127.0.0.1 when there is none.

    Tries the host name's addresses first, then asks the kernel which source address it would use for
    an outbound UDP "connection" (no packet is sent by connect() on a datagram socket).
    """
    candidates: list[str] = []
    try:
        candidates.extend(socket.gethostbyname_ex(socket.gethostname())[2])
    except OSError:
        pass
    for ip in candidates:
        if not ip.startswith("127.") and ip != "0.0.0.0":
            return ip
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))
            ip = probe.getsockname()[0]
            if ip and not ip.startswith("127.") and ip != "0.0.0.0":
                return ip
    except OSError:
        pass
    return "127.0.0.1"


def default_broker_name() -> str:
    """RocketMQ's default brokerName is the local host name."""
    try:
        return socket.gethostname() or "DEFAULT_BROKER"
    except OSError:
        return "DEFAULT_BROKER"


def env_namesrv_addr() -> str | None:
    """RocketMQ reads the name server list from NAMESRV_ADDR when broker.conf has none."""
    return os.environ.get("NAMESRV_ADDR") or None


def expand_path(path: str) -> str:
    """``~``, ``${user.home}``, ``${user.dir}`` and ``${ENV}`` expanded; relative paths are made absolute
    against the current working directory (where the broker was started)."""
    path = path.replace("${user.home}", os.path.expanduser("~")).replace("${user.dir}", os.getcwd())
    path = os.path.expandvars(os.path.expanduser(path))
    return os.path.abspath(path)


def pack_store_host(ip: str, port: int) -> bytes:
    """The 8/20-byte store-host field of stored messages (ip + port)."""
    try:
        from protocol.ids import pack_host
    except ImportError:  # protocol.ids not available yet: same 8/20-byte layout
        pack_host = None
    if pack_host is not None:
        return pack_host(ip, port)
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    return socket.inet_pton(family, ip) + port.to_bytes(4, "big")
