"""Which ``Host`` headers the console answers: its own addresses only, so a page of another site whose name was
re-pointed at this machine (DNS rebinding) cannot read or drive the console through the visitor's browser.

A browser puts the name of the page's URL in ``Host``; an attacker's page can only send the attacker's name. The
console's own names are: the address the connection arrived on, the bind address (``dashboardHost``, unless it is a
wildcard), ``localhost`` / ``127.0.0.1`` / ``[::1]`` when the console listens on loopback or on every address,
``brokerIP1``, and the ``dashboardAllowedHosts`` entries (``name`` for any port, ``name:port`` for that port,
``*`` for any Host at all). A built-in name matches without a port or with the console's port."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

__all__ = ["HostCheck", "split_host"]

_WILDCARDS = ("", "0.0.0.0", "::", "*")
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def split_host(value: str) -> tuple[str, int | None] | None:
    """``name[:port]`` or ``[v6][:port]`` -> (lower-case name without brackets, port or None); None when malformed."""
    value = value.strip().lower()
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    elif value.count(":") == 1:
        name, port_text = value.split(":")
    elif ":" in value:  # a bare IPv6 address (not a valid Host, but a conf entry may be written so)
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            return None
        name, port_text = value, None
    else:
        name, port_text = value, None
    if not name:
        return None
    if port_text is None:
        return name.rstrip("."), None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return name.rstrip("."), int(port_text)


def _normal(name: str) -> str:
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def _is_loopback(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return name == "localhost"


class HostCheck:
    """The console's names, fixed at start-up from its bind address and port and the conf."""

    def __init__(self, bind_host: str, port: int, broker_ip: str | None, allowed: Iterable[str] = ()) -> None:
        self.port = port
        self.any_host = False
        own = set()
        bind = (bind_host or "").strip().strip("[]").lower()
        if bind not in _WILDCARDS:
            own.add(_normal(bind))
        if bind in _WILDCARDS or _is_loopback(bind):
            own.update(_LOOPBACK_NAMES)
        if broker_ip:
            own.add(_normal(broker_ip.strip().strip("[]").lower()))
        self.own = frozenset(own)
        extra: set[tuple[str, int | None]] = set()
        for entry in allowed:
            entry = entry.strip()
            if not entry:
                continue
            if entry == "*":
                self.any_host = True
                continue
            parsed = split_host(entry)
            if parsed is None:
                raise ValueError(f"not a host name or name:port: {entry!r}")
            extra.add((_normal(parsed[0]), parsed[1]))
        self.extra = frozenset(extra)

    def allows(self, host_header: str | None, local_ip: str | None) -> bool:
        """May a request with ``Host: host_header`` that arrived on ``local_ip`` be answered?"""
        if self.any_host:
            return True
        if not host_header:
            return False
        parsed = split_host(host_header)
        if parsed is None:
            return False
        name, port = _normal(parsed[0]), parsed[1]
        if (name, port) in self.extra or (name, None) in self.extra:
            return True
        if port is not None and port != self.port:
            return False
        if name in self.own:
            return True
        return local_ip is not None and name == _normal(local_ip.strip("[]").lower().removeprefix("::ffff:"))

    def describe(self) -> str:
        names = sorted(self.own) + sorted(f"{n}:{p}" if p else n for n, p in self.extra)
        return ", ".join(names)
