"""The store directory's ``lock`` file: one process owns a store at a time."""

from __future__ import annotations

import errno
import fcntl
import os

STORE_LOCK_FILE = "lock"


class StoreLockedError(RuntimeError):
    """Another running broker holds the store directory."""


class StoreDirectoryLock:
    """Exclusive ``flock`` on ``<storePathRootDir>/lock`` for the broker's whole life, taken before any
    file of the store or its config is read or written; the holder's pid is written into the file."""

    def __init__(self, root_dir: str) -> None:
        self.root_dir = root_dir
        self.path = os.path.join(root_dir, STORE_LOCK_FILE)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        os.makedirs(self.root_dir, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            try:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            except OSError:
                holder = ""
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                who = f"pid {holder}" if holder.isdigit() else "another process"
                raise StoreLockedError(f"store directory {self.root_dir} is locked by another running broker "
                                       f"({who}); refusing to start") from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
            os.close(fd)
