"""The epoch file of a replica in controller mode (controller.md §9) and the truncation rule of §10.

Each master epoch (a number the controller raises at every election) starts at a commit-log offset; the file lists
``(epoch, startOffset)`` entries, each ending where the next starts, the last one open. Replicas compare these lists
before copying anything so that a returning old master cuts the tail only it had.

Text format, as the reference writes it: line 1 the number of entries, line 2 the CRC32 of all entry lines (each with
its ``\\n``, UTF-8) masked with 0x7FFFFFFF in decimal (0: not checked), then one ``<epoch>-<startOffset>`` line per
entry. Every change first copies the current file to ``<file>.bak``; a file that is missing, empty, short or fails its
checksum is read from the ``.bak`` instead.
"""

from __future__ import annotations

import logging
import os
import shutil
import zlib
from dataclasses import dataclass

log = logging.getLogger(__name__)

__all__ = ["EpochFile", "EpochRecord", "EpochFileError", "truncation_point", "encode_epoch_file",
           "decode_epoch_file"]

OPEN_END = (1 << 63) - 1  # the last entry's end, as the reference writes it (Long.MAX_VALUE)


class EpochFileError(ValueError):
    """The file (and its .bak) cannot be read as an epoch file."""


@dataclass(frozen=True, slots=True)
class EpochRecord:
    epoch: int
    start_offset: int


def encode_epoch_file(entries: list[EpochRecord]) -> bytes:
    """The file's bytes for ``entries``."""
    lines = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries).encode("utf-8")
    crc = zlib.crc32(lines) & 0x7FFFFFFF
    return f"{len(entries)}\n{crc}\n".encode("ascii") + lines


def decode_epoch_file(data: bytes) -> list[EpochRecord]:
    """Parse the file's bytes; EpochFileError says what is wrong."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise EpochFileError("not UTF-8 text") from None
    lines = text.split("\n")
    if len(lines) < 2 or not lines[0].strip():
        raise EpochFileError("empty")
    try:
        count = int(lines[0].strip())
        crc = int(lines[1].strip())
    except ValueError:
        raise EpochFileError(f"bad header lines {lines[0]!r}, {lines[1]!r}") from None
    body = [line for line in lines[2:2 + count]]
    if count < 0 or len(body) < count or any(not line.strip() for line in body):
        raise EpochFileError(f"{count} entries announced, fewer present")
    raw = "".join(line + "\n" for line in body).encode("utf-8")
    if crc != 0 and (zlib.crc32(raw) & 0x7FFFFFFF) != crc:
        raise EpochFileError("checksum mismatch")
    entries = []
    for line in body:
        epoch, sep, start = line.strip().partition("-")
        try:
            entries.append(EpochRecord(int(epoch), int(start)))
        except ValueError:
            raise EpochFileError(f"bad entry {line!r}") from None
        if not sep:
            raise EpochFileError(f"bad entry {line!r}")
    return entries


class EpochFile:
    """The entries in memory and their file; every change is written at once (with the .bak copy first)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: list[EpochRecord] = []

    def load(self) -> None:
        """Read the file (or its .bak); none: no entries. EpochFileError when both exist and are unreadable."""
        problems = []
        for path in (self.path, self.path + ".bak"):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            try:
                self.entries = decode_epoch_file(data)
            except EpochFileError as exc:
                problems.append(f"{path}: {exc}")
                continue
            if problems:
                log.warning("epoch file %s unreadable (%s): read its backup %s", self.path, problems[0], path)
            return
        if problems:
            raise EpochFileError("; ".join(problems))
        self.entries = []

    def _save(self) -> None:
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        if os.path.exists(self.path):
            shutil.copyfile(self.path, self.path + ".bak")
        with open(self.path, "wb") as f:
            f.write(encode_epoch_file(self.entries))
            f.flush()
            os.fsync(f.fileno())

    # ---- reads --------------------------------------------------------------------------------------------------
    @property
    def last_epoch(self) -> int:
        """The newest epoch, -1 when there is none (the heartbeat's ``epoch``)."""
        return self.entries[-1].epoch if self.entries else -1

    def last(self) -> EpochRecord | None:
        return self.entries[-1] if self.entries else None

    def find(self, epoch: int) -> EpochRecord | None:
        for e in self.entries:
            if e.epoch == epoch:
                return e
        return None

    def end_of(self, epoch: int, max_offset: int) -> int:
        """Where ``epoch`` ends: the next entry's start, or ``max_offset`` for the last."""
        for i, e in enumerate(self.entries):
            if e.epoch == epoch:
                return self.entries[i + 1].start_offset if i + 1 < len(self.entries) else max_offset
        return -1

    def entry_at(self, offset: int) -> tuple[EpochRecord, int] | None:
        """The entry whose range holds ``offset`` and that range's end (OPEN_END for the last entry)."""
        found = None
        for i, e in enumerate(self.entries):
            if e.start_offset <= offset:
                end = self.entries[i + 1].start_offset if i + 1 < len(self.entries) else OPEN_END
                found = (e, end)
            else:
                break
        return found

    def with_ends(self, max_offset: int) -> list[tuple[int, int, int]]:
        """``(epoch, start, end)`` of each entry; the last ends at ``max_offset`` (GET_BROKER_EPOCH_CACHE)."""
        out = []
        for i, e in enumerate(self.entries):
            end = self.entries[i + 1].start_offset if i + 1 < len(self.entries) else max_offset
            out.append((e.epoch, e.start_offset, end))
        return out

    # ---- changes ------------------------------------------------------------------------------------------------
    def append(self, epoch: int, start_offset: int) -> bool:
        """Add an entry; it needs a greater epoch and start offset than the last (an epoch in which nothing was
        written leaves the older entry in place). False (logged) when refused."""
        last = self.last()
        if last is not None and (epoch <= last.epoch or start_offset <= last.start_offset):
            if epoch != last.epoch:
                log.info("epoch %d at offset %d not recorded: the last entry is epoch %d at %d", epoch, start_offset,
                         last.epoch, last.start_offset)
            return False
        self.entries.append(EpochRecord(epoch, start_offset))
        self._save()
        return True

    def set_last_epoch(self, epoch: int, start_offset: int) -> None:
        """A new master's entry: drop entries starting at/after ``start_offset`` or with epoch >= ``epoch`` (an
        epoch that never held data), then append ``(epoch, start_offset)``."""
        self.entries = [e for e in self.entries if e.start_offset < start_offset and e.epoch < epoch]
        self.entries.append(EpochRecord(epoch, start_offset))
        self._save()

    def truncate_from(self, offset: int) -> None:
        """Drop the entries starting at or after ``offset`` (the log was cut there)."""
        kept = [e for e in self.entries if e.start_offset < offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def truncate_below(self, min_offset: int) -> None:
        """Drop entries that end at or before ``min_offset`` (old commit-log files were deleted)."""
        kept = [e for i, e in enumerate(self.entries)
                if i + 1 >= len(self.entries) or self.entries[i + 1].start_offset > min_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._save()


def truncation_point(own: list[EpochRecord], own_max: int, master: list[EpochRecord],
                     master_max: int) -> int | None:
    """Where a replica must cut its log before copying from ``master`` (controller.md §10); None when the two
    histories share no epoch (the replica cannot be reconciled). An empty ``own`` list means a fresh replica: the
    caller does not truncate (this returns ``own_max``).

    Walk own epochs from newest to oldest; the first that the master also has *with the same start offset* ends at the
    smaller of the two ends (own: next own start or ``own_max``; master's: next master start or ``master_max``).
    With no such epoch, two histories that begin at the same offset share exactly what lies before it."""
    if not own:
        return own_max
    master_ends = {}
    for i, e in enumerate(master):
        master_ends[(e.epoch, e.start_offset)] = master[i + 1].start_offset if i + 1 < len(master) else master_max
    for i in range(len(own) - 1, -1, -1):
        e = own[i]
        master_end = master_ends.get((e.epoch, e.start_offset))
        if master_end is None:
            continue
        own_end = own[i + 1].start_offset if i + 1 < len(own) else own_max
        return min(own_end, master_end)
    if master and own[0].start_offset == master[0].start_offset:
        # no epoch in common, but both histories begin at the same offset: they diverge right there (e.g. a master
        # elected before it had copied anything); the reference stops here and wants the replica wiped
        return own[0].start_offset
    return None
