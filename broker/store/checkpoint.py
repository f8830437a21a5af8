"""The 4096-byte ``checkpoint`` file (§6.6).

Fields: physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp (4.x), then
masterFlushedOffset and confirmPhyOffset (5.x). We store the commit-log offset that
was flushed at a clean shutdown in confirmPhyOffset, which lets a clean restart skip
scanning the commit log.
"""

from __future__ import annotations

import logging
import os
import struct

from .mapped_file import StoreFileError

log = logging.getLogger(__name__)

CHECKPOINT_SIZE = 4096
_FIELDS = struct.Struct(">qqqqq")


class StoreCheckpoint:
    """In-memory values + atomic-enough rewrite of the single page on ``save``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.master_flushed_offset = 0
        self.confirm_phy_offset = 0

    def load(self) -> bool:
        """Read the file; False (all zero) when absent or short. StoreFileError if it cannot be read."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(CHECKPOINT_SIZE)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreFileError("cannot read the checkpoint file %s: %s; move it away to start without it (the "
                                 "commit log is then verified)" % (self.path, exc.strerror or exc)) from exc
        if len(data) < _FIELDS.size:
            log.warning("checkpoint %s is %d bytes, expected %d: ignoring it", self.path, len(data), CHECKPOINT_SIZE)
            return False
        (self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
         self.master_flushed_offset, self.confirm_phy_offset) = _FIELDS.unpack_from(data, 0)
        return True

    def to_bytes(self) -> bytes:
        page = bytearray(CHECKPOINT_SIZE)
        _FIELDS.pack_into(page, 0, self.physic_msg_timestamp, self.logics_msg_timestamp,
                          self.index_msg_timestamp, self.master_flushed_offset, self.confirm_phy_offset)
        return bytes(page)

    def save(self) -> None:
        """Write the whole page in place and fdatasync (blocking; run it in an executor)."""
        data = self.to_bytes()
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def min_timestamp(self, include_index: bool) -> int:
        """Oldest of the flushed timestamps: records stored before it are in every file kind."""
        values = [self.physic_msg_timestamp, self.logics_msg_timestamp]
        if include_index:
            values.append(self.index_msg_timestamp)
        return min(values)
