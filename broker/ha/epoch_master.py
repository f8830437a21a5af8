"""The master side of replication in controller mode (controller.md §7, §8, §10): the HA listener of ha/master.py
with the epoch handshake, transfers that never cross an epoch boundary and carry (epoch, epoch start,
confirmOffset), and the master's SyncStateSet bookkeeping.

A slave first sends its controller id (and whether it is an asyncLearner); the master answers with its epoch list and
max offset, so the slave can cut whatever only it had before asking for data. Per slave the master tracks the
acknowledged offset and the last time it was caught up; ``check_sync_state_set`` gives the set the master should
propose (grown by caught-up slaves at once through ``on_expand``, shrunk by those behind for longer than
``haMaxTimeSlaveNotCatchup`` or disconnected). ``wait_for_in_sync`` is the ack rule of allAckInSyncStateSet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from broker.ha.master import HEARTBEAT_INTERVAL_S, HOUSEKEEPING_INTERVAL_S, HAMaster, _host, _limited, _SlaveConnection
from broker.store.epoch_file import EpochFile
from protocol.ha import MAX_TRANSFER_BATCH, HAProtocolError
from protocol.ha_epoch import (
    SLAVE_HANDSHAKE_SIZE,
    MasterHello,
    ReportReader,
    decode_slave_hello,
    encode_master_hello,
    encode_transfer_header,
)

log = logging.getLogger(__name__)

__all__ = ["EpochHAMaster"]


class _EpochSlaveConnection(_SlaveConnection):
    """One controller-mode slave: handshake (its id), then reports and epoch-tagged transfers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slave_id = -1
        self.async_learner = False
        self.caught_up_at = 0.0  # monotonic time it last had everything the master had
        self._transfer_max = -1  # the master's max offset at the last transfer, and when
        self._transfer_time = 0.0

    async def run(self) -> None:
        master: EpochHAMaster = self.master  # type: ignore[assignment]
        data = self.first_data
        while len(data) < SLAVE_HANDSHAKE_SIZE:
            more = await asyncio.wait_for(self.reader.read(4096), HOUSEKEEPING_INTERVAL_S)
            if not more:
                raise ConnectionError("closed by the slave before its handshake")
            data += more
        try:
            hello = decode_slave_hello(data)
        except HAProtocolError as exc:
            _limited.warning(("hello", _host(self.addr)), "HA port: %s: %s", self.addr, exc)
            return
        self.slave_id, self.async_learner = hello.broker_id, hello.async_learner
        self.first_data = data[SLAVE_HANDSHAKE_SIZE:]
        epochs = master.epoch_file.entries
        self.writer.write(encode_master_hello(MasterHello(master.max_offset(), master.epoch_file.last_epoch,
                                                          [(e.epoch, e.start_offset) for e in epochs])))
        await self._drain()
        try:
            await super().run()
        finally:
            master.slave_gone(self)

    def _report_reader(self) -> Any:
        return ReportReader()  # controller mode's 12-byte reports (state, offset)

    def _started(self, offset: int) -> None:
        master: EpochHAMaster = self.master  # type: ignore[assignment]
        master.slaves.add(self)
        _limited.info(("connected", _host(self.addr)), "slave %s (broker id %d%s) connected, replicating from "
                      "offset %d", self.addr, self.slave_id, ", asyncLearner" if self.async_learner else "", offset)
        self.acked = offset
        master.slave_acked(self, offset)

    def _acknowledged(self, offset: int) -> None:
        master: EpochHAMaster = self.master  # type: ignore[assignment]
        own = master.max_offset()
        if offset > own:
            raise HAProtocolError(f"slave {self.slave_id} reports offset {offset}, beyond this master's end {own}")
        self.acked = offset
        master.slave_acked(self, offset)

    def note_caught_up(self, ack: int) -> None:
        own = self.master.max_offset()
        if ack >= own:
            self.caught_up_at = time.monotonic()
        elif ack >= self._transfer_max >= 0:
            self.caught_up_at = max(self.caught_up_at, self._transfer_time)

    async def _stream(self) -> None:
        master: EpochHAMaster = self.master  # type: ignore[assignment]
        start = await self.requested
        own = master.max_offset()
        if start > own:
            raise HAProtocolError(f"slave {self.slave_id} asks for offset {start}, beyond this master's end {own}")
        if start == 0:  # an empty slave: from the log's min offset
            start = master.min_offset()
        position = start
        last_write = time.monotonic()
        while True:
            found = master.epoch_file.entry_at(position)
            if found is None:
                raise HAProtocolError(f"offset {position} is before this master's first epoch: it cannot be served")
            entry, epoch_end = found
            limit = min(MAX_TRANSFER_BATCH, epoch_end - position)  # a frame never crosses an epoch boundary
            chunk = master.read(position, limit) if limit > 0 else b""
            if chunk:
                self._transfer_max, self._transfer_time = master.max_offset(), time.monotonic()
                self.writer.write(encode_transfer_header(position, len(chunk), entry.epoch, entry.start_offset,
                                                         master.confirm_offset()))
                self.writer.write(chunk)
                position += len(chunk)
                self.sent_until = position
                last_write = time.monotonic()
                await self._drain()
                continue
            if self.acked >= master.max_offset():
                self.caught_up_at = time.monotonic()  # nothing left to send
                master.slave_acked(self, self.acked)
            now = time.monotonic()
            if now - last_write >= HEARTBEAT_INTERVAL_S:
                self.writer.write(encode_transfer_header(position, 0, entry.epoch, entry.start_offset,
                                                         master.confirm_offset()))
                await self._drain()
                last_write = now
            await master.wait_for_data(position, 1.0)


class EpochHAMaster(HAMaster):
    """HAMaster of a controller-mode master. ``epoch_file``: the store's epoch file; ``local_id``: this broker's
    controller id; ``on_expand(new_set)``: propose a grown SyncStateSet (ALTER_SYNC_STATE_SET, done by the caller);
    ``max_not_catchup_ms``: haMaxTimeSlaveNotCatchup; ``all_ack``: allAckInSyncStateSet (confirmOffset waits for
    every set member)."""

    connection_class = _EpochSlaveConnection

    def __init__(self, commit_log: Any, host: str, port: int, *, epoch_file: EpochFile, local_id: int,
                 max_not_catchup_ms: int = 15000, all_ack: bool = False,
                 on_expand: Callable[[set[int]], None] | None = None,
                 on_confirm: Callable[[int], None] | None = None, **kwargs: Any) -> None:
        super().__init__(commit_log, host, port, **kwargs)
        self.epoch_file = epoch_file
        self.local_id = local_id
        self.max_not_catchup_s = max_not_catchup_ms / 1000.0
        self.all_ack = all_ack
        self.on_expand = on_expand
        self.on_confirm = on_confirm  # confirmOffset moved (acks, set changes): consumers may see more
        self.sync_state_set: set[int] = {local_id}
        self.sync_state_set_epoch = 0
        self.pending_set: set[int] | None = None  # proposed, not yet answered: acks are awaited from the union
        self._confirm = -1
        self._set_waiters: list[tuple[int, asyncio.Future]] = []

    # ---- the set ------------------------------------------------------------------------------------------------
    def set_sync_state_set(self, members: set[int], epoch: int) -> None:
        """The controller's answer (or a role-change notice) decides the set."""
        self.sync_state_set = set(members) | {self.local_id}
        self.sync_state_set_epoch = epoch
        self.pending_set = None
        self._wake_set_waiters()
        self._confirm_moved()

    def _confirm_moved(self) -> None:
        if self.on_confirm is not None:
            self.on_confirm(self.confirm_offset())

    def _connections(self) -> dict[int, _EpochSlaveConnection]:
        return {c.slave_id: c for c in self.slaves if isinstance(c, _EpochSlaveConnection)}

    def awaited_members(self) -> set[int]:
        """The members acks are awaited from: the set, united with a pending proposal."""
        members = set(self.sync_state_set)
        if self.pending_set is not None:
            members |= self.pending_set
        members.discard(self.local_id)
        return members

    def check_sync_state_set(self) -> set[int] | None:
        """A shrunk set to propose (members behind for longer than haMaxTimeSlaveNotCatchup, or without a live
        connection), or None when the set is right."""
        conns = self._connections()
        now = time.monotonic()
        own = self.max_offset()
        keep = {self.local_id}
        for member in self.sync_state_set:
            conn = conns.get(member)
            if conn is not None and conn.acked >= own:
                conn.caught_up_at = now  # nothing left to send it
            if member == self.local_id or (conn is not None and now - conn.caught_up_at <= self.max_not_catchup_s):
                keep.add(member)
        return keep if keep != self.sync_state_set else None

    def slave_acked(self, conn: _EpochSlaveConnection, offset: int) -> None:
        conn.note_caught_up(offset)
        self.acknowledged(offset)
        if (not conn.async_learner and conn.slave_id not in self.sync_state_set and self.pending_set is None
                and conn.caught_up_at and offset >= self.confirm_offset()
                and offset >= (self.epoch_file.last().start_offset if self.epoch_file.last() else 0)):
            proposal = self.sync_state_set | {conn.slave_id}
            if self.on_expand is not None:
                self.pending_set = proposal
                self.on_expand(proposal)
        self._wake_set_waiters()
        self._confirm_moved()

    def slave_gone(self, conn: _EpochSlaveConnection) -> None:
        """A closed connection removes its member at once."""
        if conn.slave_id in self.sync_state_set and conn.slave_id != self.local_id and self.on_expand is not None \
                and conn.slave_id not in self._connections():
            if self.pending_set is None:
                self.pending_set = self.sync_state_set - {conn.slave_id}
                self.on_expand(self.pending_set)
        self._wake_set_waiters()

    def proposal_failed(self) -> None:
        self.pending_set = None

    # ---- confirmOffset and acks ---------------------------------------------------------------------------------
    def confirm_offset(self) -> int:
        """min over connected set members' acks (capped by the max offset); the max offset itself when the set is
        this master alone or allAckInSyncStateSet=false. A set member without a connection keeps the last value."""
        own = self.max_offset()
        if not self.all_ack or self.sync_state_set == {self.local_id}:
            self._confirm = own
            return own
        conns = self._connections()
        acks = []
        for member in self.sync_state_set - {self.local_id}:
            conn = conns.get(member)
            if conn is None:
                return max(self._confirm, 0)
            if conn.acked > 0:
                acks.append(conn.acked)
        value = min(acks + [own]) if acks else max(self._confirm, 0)
        self._confirm = value
        return value

    def in_sync_count(self) -> int:
        """Set size incl. this master; with a pending proposal the larger of the two sets."""
        if self.pending_set is not None:
            return max(len(self.sync_state_set), len(self.pending_set))
        return len(self.sync_state_set)

    def _members_reached(self, end_offset: int) -> bool:
        conns = self._connections()
        for member in self.awaited_members():
            conn = conns.get(member)
            if conn is None or conn.acked < end_offset:
                return False
        return True

    def _wake_set_waiters(self) -> None:
        if not self._set_waiters:
            return
        still = []
        for end, fut in self._set_waiters:
            if fut.done():
                continue
            if self._members_reached(end):
                fut.set_result(True)
            else:
                still.append((end, fut))
        self._set_waiters = still

    async def wait_for_in_sync(self, end_offset: int, timeout: float) -> bool:
        """True once every SyncStateSet member acknowledged ``end_offset`` (a set of one: at once)."""
        if self._members_reached(end_offset):
            return True
        fut = asyncio.get_running_loop().create_future()
        self._set_waiters.append((end_offset, fut))
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            return False

    async def wait_for_acks(self, end_offset: int, count: int, timeout: float) -> bool:
        """inSyncReplicas = N without allAck: N - 1 acks from any connected slaves."""
        deadline = time.monotonic() + timeout
        while True:
            if sum(1 for c in self.slaves if c.acked >= end_offset) >= count:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await self.wait_for_slave(end_offset, left)  # wakes on any ack past end_offset
            if sum(1 for c in self.slaves if c.acked >= end_offset) >= count:
                return True
            await asyncio.sleep(min(0.005, max(0.0, deadline - time.monotonic())))

    async def stop(self) -> None:
        await super().stop()
        for _, fut in self._set_waiters:
            if not fut.done():
                fut.set_result(False)
        self._set_waiters.clear()
