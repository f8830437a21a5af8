"""Checks run before the broker writes anything: store paths usable, store not locked, every required port free.

A start that fails on a busy port or a bad path must leave the store directory as it found it (absent, or
byte-identical), so these run first and only look: nothing is created, a port is bound for a moment and closed.
The real start still handles the same failures (a port taken between check and bind); the checks make the
common mistakes fail early and cleanly.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from dataclasses import dataclass
from typing import Iterable

from broker.errors import ConfigError
from broker.store.lock import STORE_LOCK_FILE, StoreLockedError

__all__ = ["PortCheck", "bind_problem", "store_path_problem", "path_problem", "check_paths", "check_store_lock",
           "check_ports"]


@dataclass(frozen=True)
class PortCheck:
    """One listener that must be able to bind: its broker.conf key, host and port."""

    key: str
    host: str
    port: int


def bind_problem(key: str, host: str, port: int, exc: OSError) -> str:
    """One line for a listener that cannot bind: which key, which address, what to do."""
    where = f"{host or '0.0.0.0'}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (f"{key} {port} is already in use ({where}): stop the program listening there "
                f"(another broker?) or set another {key}")
    if exc.errno == errno.EACCES:
        return f"{key} {port}: permission denied to listen on {where}: use a port above 1023 or run with the right"\
               " privileges"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{key} {port}: {host} is not an address of this machine (check listenHost)"
    return f"{key} {port}: cannot listen on {where}: {exc.strerror or exc}"


def path_problem(path: str) -> str | None:
    """Why directory ``path`` cannot be used or created, naming the component at fault; None when it can.

    Walks up to the nearest existing component: a file there means "is a file, not a directory"; a directory
    the broker cannot write into (or search) means "not writable". Nothing is created."""
    path = os.path.abspath(path)
    probe = path
    while True:
        try:
            if os.path.isdir(probe):
                break
            if os.path.lexists(probe):
                return f"{probe} is a file, not a directory"
        except OSError as exc:  # pragma: no cover - e.g. a name too long
            return f"{probe}: {exc.strerror or exc}"
        parent = os.path.dirname(probe)
        if parent == probe:  # pragma: no cover - the root always exists
            break
        probe = parent
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable (Permission denied)"
    return None


def store_path_problem(root: str, exc_or_why: OSError | str) -> str:
    """One line for a store directory that cannot be used (from an OSError met while creating it, or a reason
    found by ``path_problem``), naming the path component at fault."""
    if isinstance(exc_or_why, str):
        why = exc_or_why
    else:
        exc = exc_or_why
        found = path_problem(exc.filename or root) if exc.errno in (errno.EEXIST, errno.ENOTDIR, errno.EACCES,
                                                                     errno.EPERM, errno.EROFS) else None
        if found is not None:
            why = found
        elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            why = f"{exc.filename or root} is not writable ({exc.strerror})"
        else:
            why = f"{exc.filename or root}: {exc.strerror or exc}"
    return f"storePathRootDir {root}: {why}: point storePathRootDir at a writable directory"


def check_paths(paths: Iterable[tuple[str, str]], root: str) -> None:
    """ConfigError for the first ``(key, directory)`` that cannot be used; the store root's problems read as
    before (``storePathRootDir <root>: <why>: ...``), other keys name themselves."""
    for key, path in paths:
        why = path_problem(path)
        if why is None:
            continue
        if key == "storePathRootDir":
            raise ConfigError(store_path_problem(root, why), key)
        raise ConfigError(f"{key} {path}: {why}: point {key} at a writable directory", key)


def check_store_lock(root: str) -> None:
    """StoreLockedError when another process holds ``<root>/lock``; an absent lock file is not created."""
    path = os.path.join(root, STORE_LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # no lock file (a new store) or unreadable: the real acquire reports it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            who = f"pid {holder}" if holder.isdigit() else "another process"
            raise StoreLockedError(f"store directory {root} is locked by another running broker ({who}); "
                                   f"refusing to start") from None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def check_ports(checks: Iterable[PortCheck]) -> None:
    """ConfigError (``bind_problem``'s line) for the first listener that cannot bind its address, or for two keys
    given the same address. Each address is bound (SO_REUSEADDR, as the listeners do) and closed again."""
    seen: dict[tuple[str, int], str] = {}
    for check in checks:
        same = seen.get((check.host, check.port))
        if same is not None:
            raise ConfigError(f"{check.key} {check.port} is also {same} ({check.host or '0.0.0.0'}:{check.port}): "
                              f"give each listener its own port", check.key)
        seen[(check.host, check.port)] = check.key
        _try_bind(check)


def _try_bind(check: PortCheck) -> None:
    try:
        infos = socket.getaddrinfo(check.host or None, check.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"{check.key} {check.port}: cannot resolve {check.host!r}: {exc.strerror or exc}",
                          check.key) from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise ConfigError(bind_problem(check.key, check.host, check.port, exc), check.key) from None
