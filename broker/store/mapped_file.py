"""Pre-allocated, memory-mapped store files named by their 20-digit start offset.

A pre-allocated file (commit log) is created at full size with ``os.posix_fallocate`` so
that a full disk is reported when the file is created (``StoreDiskFullError``) instead of
a SIGBUS on a later write into a sparse mapping. A lazily allocated file (consume queue:
most queues hold a few units of a multi-MB file) is created sparse and its writer calls
``ensure_allocated`` before writing, which fallocates growing chunks ahead of the write
position, so the disk-full error stays clean. Writes go straight into the mapping;
durability is obtained with ``fdatasync`` on a short-lived descriptor (it releases
the GIL, unlike ``mmap.flush``) and is meant to run in an executor.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import weakref

log = logging.getLogger(__name__)

PAGE_SIZE = mmap.PAGESIZE
_ZERO_CHUNK_SIZE = 1 << 20
_ZERO_CHUNK = bytes(_ZERO_CHUNK_SIZE)
_ZERO_VIEW = memoryview(_ZERO_CHUNK)


class StoreDiskFullError(OSError):
    """A store file could not be created because the disk is full."""


class StoreFileError(ValueError):
    """A store file cannot be used as it is; the one-line message names it and says what to do."""


def file_name_for(offset: int) -> str:
    return "%020d" % offset


_ALLOCATE_STEP_MAX = 1 << 20


def _disk_full(exc: OSError, size: int, path: str) -> OSError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreDiskFullError(exc.errno, "disk full: cannot allocate %d bytes for %s" % (size, path))
    return exc


def _allocate(path: str, size: int, preallocate: bool = True) -> None:
    """Create ``path`` with ``size`` zero bytes of real disk space (sparse unless ``preallocate``), or fail."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        if not preallocate:
            os.ftruncate(fd, size)
            os.close(fd)
            return
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                # File systems without fallocate: fall back to a plain (sparse) size.
                os.ftruncate(fd, size)
            else:
                raise
    except OSError as exc:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
        raise _disk_full(exc, size, path) from exc
    os.close(fd)


def extend_file(path: str, size: int, align: int = 1) -> int:
    """Grow a file cut short to ``size`` zero-filled bytes; a partial ``align``-sized entry at the cut is zeroed.
    Returns the old size."""
    old = os.path.getsize(path)
    fd = os.open(path, os.O_RDWR)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            os.ftruncate(fd, size)
        partial = old % align
        if partial:
            os.pwrite(fd, bytes(partial), old - partial)
    finally:
        os.close(fd)
    return old


def data_ranges(path: str, start: int, stop: int):
    """File-relative [a, b) ranges within [start, stop) that may hold data. Holes (never written parts of a
    pre-allocated file; they read as zeros) are skipped with SEEK_DATA/SEEK_HOLE, so looking through the empty
    remainder of a 1 GiB file costs nothing; without that support the whole range is yielded."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        yield start, stop
        return
    try:
        pos = start
        while pos < stop:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: only a hole from here on
                    yield pos, stop
                return
            if data >= stop:
                return
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            yield data, min(stop, hole)
            pos = hole
    finally:
        os.close(fd)


def unmap(mm: mmap.mmap | memoryview) -> None:
    """Close a mapping. Slices still referenced (e.g. a pull response being written) keep it alive: it goes away
    with the last of them."""
    try:
        if isinstance(mm, memoryview):
            mm.release()
        else:
            mm.close()
    except (BufferError, ValueError):
        pass


class _Libc:
    """mmap/munmap/madvise of the C library, for mappings that keep no descriptor (see ``map_detached``)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.mmap = libc.mmap
        self.mmap.restype = ctypes.c_void_p
        self.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int64]
        self.munmap = libc.munmap
        self.munmap.restype = ctypes.c_int
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.madvise = libc.madvise
        self.madvise.restype = ctypes.c_int
        self.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


_libc: _Libc | None = None
_MAP_FAILED = ctypes.c_void_p(-1).value
_array_types: dict[int, type] = {}


def _munmap(address: int, size: int) -> None:
    assert _libc is not None
    _libc.munmap(address, size)


def map_detached(path: str, size: int, *, random_access: bool = False) -> memoryview:
    """Map ``path`` shared read/write and keep no descriptor open: a writable byte memoryview of ``size`` bytes.

    Python's ``mmap.mmap`` keeps a duplicate of the descriptor for as long as the mapping lives (``trackfd``
    only arrived in 3.13), so a store with a consume-queue file per topic held a descriptor per topic and a
    flood of new topics ran the broker out of them. The kernel needs no descriptor to keep a mapping, so this
    maps through the C library and closes the file at once. The mapping goes away (munmap) when the last view
    of it is released: slices handed to callers keep it alive, as they do an ``mmap.mmap``.

    ``random_access``: no read-ahead on page faults (MADV_RANDOM). A consume queue is read and written a few
    units at a time; with the default read-ahead (8 MiB here) the first touch of a fresh sparse 6 MB file
    zero-filled all of it in the page cache: about 20 ms of system time on the writer's thread and 6 MB of
    memory per new queue (measured)."""
    global _libc
    if _libc is None:
        _libc = _Libc()
    fd = os.open(path, os.O_RDWR)
    try:
        address = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        if address is None or address == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, "cannot map %s: %s" % (path, os.strerror(err)), path)
    finally:
        os.close(fd)
    if random_access:
        _libc.madvise(address, size, mmap.MADV_RANDOM)  # advice only: a failure changes nothing that matters
    array_type = _array_types.get(size)
    if array_type is None:
        array_type = _array_types[size] = ctypes.c_ubyte * size
    region = array_type.from_address(address)
    # Unmapped once nothing refers to the region any more; never at interpreter exit, where a thread may still
    # be reading it.
    weakref.finalize(region, _munmap, address, size).atexit = False
    return memoryview(region).cast("B")


def remove_file(path: str) -> None:
    """Unlink ``path``; one that is already gone is fine."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def fdatasync_path(path: str) -> None:
    """fdatasync ``path`` through a short-lived descriptor (blocking); a vanished file is ignored."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


class MappedFile:
    """One fixed-size file mapped read/write.

    ``wrote_position`` is the file-relative end of valid data, ``flushed_position`` the
    part known to be on disk.
    """

    __slots__ = ("path", "file_from_offset", "file_size", "mm", "view", "wrote_position",
                 "flushed_position", "warm_position", "allocated_position", "_closed")

    def __init__(self, path: str, file_from_offset: int, file_size: int, *, create: bool,
                 preallocate: bool = True, detached: bool = False) -> None:
        """``detached``: map with ``map_detached`` (no descriptor held, no read-ahead); ``mm`` is then a
        memoryview, whose slices are views rather than copies."""
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        # Bytes known to have disk blocks; writers of lazily allocated files call ensure_allocated first.
        self.allocated_position = file_size if preallocate else 0
        if create:
            _allocate(path, file_size, preallocate)
        else:
            actual = os.path.getsize(path)
            if actual != file_size:
                raise ValueError("store file %s has size %d, expected %d" % (path, actual, file_size))
        if detached:
            self.mm: mmap.mmap | memoryview = map_detached(path, file_size, random_access=True)
        else:
            fd = os.open(path, os.O_RDWR)
            try:
                self.mm = mmap.mmap(fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        self.view = memoryview(self.mm)
        self.wrote_position = 0
        self.flushed_position = 0
        self.warm_position = 0
        self._closed = False

    @property
    def end_offset(self) -> int:
        """Global offset just past the last byte of this file."""
        return self.file_from_offset + self.file_size

    @property
    def max_offset(self) -> int:
        """Global offset just past the written data."""
        return self.file_from_offset + self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def ensure_allocated(self, upto: int) -> None:
        """Give bytes [0, upto) real disk blocks (StoreDiskFullError if the disk is full).

        Allocates ahead in chunks that double up to 1 MiB, so a queue with a few units costs a page and a
        busy one an fallocate call per MiB."""
        if upto <= self.allocated_position:
            return
        start = self.allocated_position
        step = min(max(start, PAGE_SIZE), _ALLOCATE_STEP_MAX)
        end = min(self.file_size, -(-max(upto, start + step) // PAGE_SIZE) * PAGE_SIZE)
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, start, end - start)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise _disk_full(exc, end - start, self.path) from exc
            end = self.file_size  # no fallocate here: writes go sparse, as for pre-allocated files
        finally:
            os.close(fd)
        self.allocated_position = end

    def warm(self, upto: int) -> None:
        """Pre-write zeros (with pwrite) up to ``upto`` ahead of the writer.

        A first write through the mapping into a fresh (fallocated) page costs a page
        fault with block bookkeeping per 4 KiB; ``pwrite`` does the same work per call at
        a fraction of the CPU. Only bytes at or after the write position are touched, on
        the writer's own thread, so data is never overwritten.
        """
        upto = min(self.file_size, upto)
        pos = max(self.warm_position, self.wrote_position)
        if pos >= upto or self._closed:
            return
        if upto > self.allocated_position:
            try:
                self.ensure_allocated(upto)
            except StoreDiskFullError:
                upto = min(upto, self.allocated_position)  # warming is an optimisation: only what has blocks
                if pos >= upto:
                    return
        fd = os.open(self.path, os.O_RDWR)
        try:
            while pos < upto:
                n = min(_ZERO_CHUNK_SIZE, upto - pos)
                os.pwrite(fd, _ZERO_VIEW[:n], pos)
                pos += n
        finally:
            os.close(fd)
        self.warm_position = upto

    def flush_range(self) -> tuple[int, int] | None:
        """The dirty range ``(start, end)``; None when everything is flushed."""
        if self.flushed_position >= self.wrote_position or self._closed:
            return None
        return self.flushed_position, self.wrote_position

    def sync_to_disk(self) -> None:
        """fdatasync the file (blocking; run it in an executor)."""
        if not self._closed:
            fdatasync_path(self.path)

    def mtime(self) -> float:
        try:
            return os.stat(self.path).st_mtime
        except FileNotFoundError:
            return 0.0

    def touch(self) -> None:
        """Refresh the modification time (mmap writes do not always update it)."""
        try:
            os.utime(self.path, None)
        except OSError:
            pass

    def zero_from(self, position: int) -> None:
        """Zero the file from ``position`` to its end (used to cut a torn tail)."""
        mm = self.mm
        for pos, stop in data_ranges(self.path, position, self.file_size):  # holes read as zeros already
            while pos < stop:
                end = min(stop, (pos // _ZERO_CHUNK_SIZE + 1) * _ZERO_CHUNK_SIZE)
                if mm[pos:end] != _ZERO_CHUNK[:end - pos]:  # only touch pages that hold data
                    mm[pos:end] = _ZERO_CHUNK[:end - pos]
                pos = end
        self.wrote_position = min(self.wrote_position, position)
        self.flushed_position = min(self.flushed_position, position)

    def close(self) -> None:
        """Unmap. Outstanding memoryviews handed to callers keep the mapping alive."""
        if self._closed:
            return
        self._closed = True
        try:
            self.view.release()
        except BufferError:
            pass
        unmap(self.mm)

    def destroy(self) -> None:
        """Unmap and delete the file."""
        self.close()
        remove_file(self.path)


class MappedFileQueue:
    """The ordered sequence of equally-sized mapped files of one directory."""

    def __init__(self, directory: str, file_size: int, preallocate: bool = True, detached: bool = False) -> None:
        self.directory = directory
        self.file_size = file_size
        self.preallocate = preallocate
        self.detached = detached  # files mapped without a descriptor (see map_detached)
        self.files: list[MappedFile] = []

    # -- loading -----------------------------------------------------------------
    def list_files(self) -> list[tuple[int, str, int]]:
        """(start offset, path, size) of the store files in offset order; other names are reported and skipped."""
        if not os.path.isdir(self.directory):
            return []
        entries = []
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if len(name) != 20 or not name.isdigit():
                log.warning("ignoring %s: not a store file name (20 digits)", path)
                continue
            entries.append((int(name), path, os.path.getsize(path)))
        return entries

    def load(self, what: str = "store file", size_key: str = "", remedy: str = "", align: int = 1) -> int | None:
        """Map every existing file in offset order.

        Empty files are removed and a last file cut short is extended with zeros (recovery then finds where its
        valid data ends); it returns the global offset of that cut, None if there was none. Any other file of the
        wrong size raises StoreFileError: ``what`` names the kind of file, ``size_key`` the broker.conf key of
        the expected size and ``remedy`` what the operator can do. ``align``: entry size (a partial entry at the
        cut is zeroed)."""
        entries = self.list_files()
        sized = [e for e in entries if e[2] != 0]
        for i, (start, path, size) in enumerate(sized):
            if size == self.file_size or (i == len(sized) - 1 and size < self.file_size):
                continue
            sizes = {e[2] for e in sized}
            if len(sizes) == 1:
                advice = ("all %d files there are %d bytes: set %s=%d (the size they were written with)"
                          % (len(sized), size, size_key or "the file size", size))
                if remedy:
                    advice += ", or " + remedy
            else:
                advice = remedy or "restore it from a backup"
            raise StoreFileError("%s %s is %d bytes, expected %d%s: %s" % (
                what, path, size, self.file_size, " (%s)" % size_key if size_key else "", advice))
        cut_at = None
        for start, path, size in entries:
            if size == 0:
                log.warning("removing empty store file %s", path)
                os.unlink(path)
                cut_at = start if cut_at is None else min(cut_at, start)
                continue
            if size < self.file_size:
                log.warning("%s %s is %d bytes, expected %d: cut short (e.g. by an incomplete copy); extending it "
                            "with zeros and recovering what it holds", what, path, size, self.file_size)
                extend_file(path, self.file_size, align)
                cut_at = start + size if cut_at is None else min(cut_at, start + size)
            mf = MappedFile(path, start, self.file_size, create=False, preallocate=self.preallocate,
                            detached=self.detached)
            mf.wrote_position = self.file_size
            mf.flushed_position = self.file_size
            self.files.append(mf)
        return cut_at

    # -- lookup ------------------------------------------------------------------
    @property
    def first(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        return self.files[-1].max_offset if self.files else 0

    def find(self, offset: int) -> MappedFile | None:
        """The file holding global ``offset`` (None if deleted or not yet created)."""
        files = self.files
        if not files:
            return None
        idx = (offset - files[0].file_from_offset) // self.file_size
        if 0 <= idx < len(files):
            mf = files[idx]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        for mf in files:  # gaps after a manual deletion: linear fallback
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        return None

    def create_file(self, start_offset: int) -> MappedFile:
        """Create and append the file starting at ``start_offset``."""
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, file_name_for(start_offset))
        if os.path.exists(path):  # a stale leftover (e.g. truncated away earlier)
            os.unlink(path)
        mf = MappedFile(path, start_offset, self.file_size, create=True, preallocate=self.preallocate,
                        detached=self.detached)
        self.files.append(mf)
        return mf

    # -- truncation / deletion ---------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Drop everything at or after global ``offset``: zero the tail, delete later files."""
        keep: list[MappedFile] = []
        for mf in self.files:
            if mf.file_from_offset + self.file_size <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                mf.zero_from(offset - mf.file_from_offset)
                mf.wrote_position = offset - mf.file_from_offset
                keep.append(mf)
            else:
                log.warning("deleting store file %s beyond the valid end %d", mf.path, offset)
                mf.destroy()
        self.files = keep

    def remove_first(self, count: int) -> list[MappedFile]:
        """Detach the first ``count`` files (never the last one); the caller destroys them."""
        count = min(count, len(self.files) - 1)
        if count <= 0:
            return []
        removed = self.files[:count]
        del self.files[:count]
        return removed

    def destroy_all(self) -> None:
        for mf in self.files:
            mf.destroy()
        self.files = []
        try:
            os.rmdir(self.directory)
        except OSError:
            pass

    def close(self) -> None:
        for mf in self.files:
            mf.close()
