"""The slave side of replication in controller mode (controller.md §10): compare histories, cut, then copy.

After the optional authentication of protocol/ha.py the slave sends its controller id; the master answers with its
epoch list and max offset. The slave finds the last point both histories share (store/epoch_file.py's rule), cuts its
commit log, consume queues and index back to it and says so in one log line, then reports its end and appends the
transfers, recording a new (epoch, start) entry whenever the epoch of the data changes. A replica whose history shares
no epoch with the master's cannot be reconciled: it copies nothing, keeps retrying, and ``unreconcilable`` says why
(the broker then stays out of the routes).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from broker.ha.slave import HANDSHAKE_TIMEOUT_S, REPORT_INTERVAL_S, HASlave
from broker.store.epoch_file import EpochFile, truncation_point
from broker.store.truncate import truncate_store
from broker.store.types import IllegalRecordError
from protocol.ha import HAProtocolError, looks_like_handshake
from protocol.ha_epoch import (
    MasterHelloReader,
    SlaveHello,
    TransferReader,
    encode_report,
    encode_slave_hello,
)

log = logging.getLogger(__name__)

__all__ = ["EpochHASlave"]

FAST_RECONNECT_S = 0.2
FAST_RETRIES = 25


class EpochHASlave(HASlave):
    """HASlave of a controller-mode slave; ``broker_id`` is its controller id, ``epoch_file`` the store's."""

    def __init__(self, store: Any, master_address: str | None = None, *, epoch_file: EpochFile, broker_id: int,
                 async_learner: bool = False, on_unreconcilable: Callable[[str | None], None] | None = None,
                 on_confirm: Callable[[int], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(store, master_address, **kwargs)
        self.fixed = False  # the role change names the master
        self.epoch_file = epoch_file
        self.broker_id = broker_id
        self.async_learner = async_learner
        self.confirm_offset = -1  # min(the master's confirmOffset, own max): what consumers here may see
        self._on_confirm = on_confirm
        self.unreconcilable: str | None = None
        self._on_unreconcilable = on_unreconcilable
        self.last_truncation: tuple[int, int] | None = None  # (from, to) of the last cut, for tests and info
        self._fast_retries = 0

    def _reconnect_delay(self) -> float:
        """Just after a role change the new master may not listen yet: retry quickly for a few seconds."""
        if self._fast_retries > 0:
            self._fast_retries -= 1
            return FAST_RECONNECT_S
        return super()._reconnect_delay()

    def set_master(self, ha_address: str) -> None:
        """Replicate from this HA address (a role change): the current connection, if another, is dropped."""
        if ha_address == self.master_address:
            return
        self._fast_retries = FAST_RETRIES
        self.master_address = ha_address
        self._address_known.set()
        task = self._task
        if task is not None and not task.done():  # reconnect to the new master now (appends are synchronous:
            task.cancel()                          # the old task stops at its next wait, before any new data)
            self._task = None
            self.start()

    def _mark(self, reason: str | None) -> None:
        if reason != self.unreconcilable:
            self.unreconcilable = reason
            if self._on_unreconcilable is not None:
                self._on_unreconcilable(reason)

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bytes) -> bytes:
        writer.write(encode_slave_hello(SlaveHello(self.broker_id, False, self.async_learner)))
        await writer.drain()
        hello_reader = MasterHelloReader()
        data = first
        while True:
            if data:
                if looks_like_handshake(data) and self.credentials is None:
                    raise HAProtocolError("the master requires authentication (aclEnable=true there): set "
                                          "aclEnable=true and an admin account's accessKey/secretKey on this slave")
                hello = hello_reader.feed(data)
                if hello is not None:
                    break
            data = await reader.read(4096)
            if not data:
                raise HAProtocolError("the master closed the connection during the epoch handshake (is "
                                      "enableControllerMode=true on it? see its log)")
        self._reconcile(hello.epochs, hello.max_offset)
        return hello_reader.rest

    def _reconcile(self, master_epochs: list[tuple[int, int]], master_max: int) -> None:
        from broker.store.epoch_file import EpochRecord

        store = self.store
        cl = store.commit_log
        own_max = cl.max_offset if cl.mfq.files else 0
        own = self.epoch_file.entries
        if not own:
            if own_max > 0:
                reason = (f"its commit log holds {own_max} bytes but it has no epoch file "
                          f"({self.epoch_file.path}): its history cannot be compared with the master's")
                self._mark(reason)
                raise HAProtocolError(f"this replica refuses to replicate: {reason}; wipe its store to rejoin")
            self._mark(None)
            return
        master = [EpochRecord(e, s) for e, s in master_epochs]
        point = truncation_point(own, own_max, master, master_max)
        if point is None:
            reason = (f"no epoch in common with the master (own {[(e.epoch, e.start_offset) for e in own]}, "
                      f"master {master_epochs})")
            self._mark(reason)
            raise HAProtocolError(f"this replica refuses to replicate: {reason}; wipe its store to rejoin")
        self._mark(None)
        if point < own_max:
            result = truncate_store(store, point)
            self.epoch_file.truncate_from(point)
            self.last_truncation = (result.from_offset, result.to_offset)
            log.warning("replica history diverged from the master's: cut the commit log from %d to %d (%d bytes, "
                        "%d consume-queue units, %d index files re-built); epochs now %s", result.from_offset,
                        result.to_offset, result.bytes_cut, result.units_dropped, result.index_files_rebuilt,
                        [(e.epoch, e.start_offset) for e in self.epoch_file.entries])

    async def _replicate(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=self.ssl_context,
                                    ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self.ssl_context else None),
            HANDSHAKE_TIMEOUT_S)
        try:
            first = await asyncio.wait_for(self._authenticate(reader, writer), HANDSHAKE_TIMEOUT_S) \
                if self.credentials is not None else b""
            first = await asyncio.wait_for(self._handshake(reader, writer, first), HANDSHAKE_TIMEOUT_S)
            store = self.store
            own = store.commit_log.max_offset if store.commit_log.mfq.files else 0
            writer.write(encode_report(own))
            await writer.drain()
            self.connected = True
            log.info("replicating from master %s (controller mode), from offset %d", address, own)
            frames = TransferReader()
            reported = own
            last_report = time.monotonic()
            epoch_file = self.epoch_file
            confirmed = self.confirm_offset
            while True:
                if first:
                    data, first = first, b""
                else:
                    try:
                        data = await asyncio.wait_for(reader.read(1 << 16), REPORT_INTERVAL_S)
                    except asyncio.TimeoutError:
                        data = None
                if data == b"":
                    raise ConnectionError("closed by the master")
                if data:
                    for t in frames.feed(data):
                        self.last_frame_time = time.monotonic()
                        end = t.offset + len(t.data)
                        self.master_max_seen = max(self.master_max_seen, end)
                        has_log = bool(store.commit_log.mfq.files)
                        if t.data:
                            if has_log and t.offset != store.commit_log.max_offset:
                                raise ConnectionError(f"transfer at offset {t.offset}, but this log ends at "
                                                      f"{store.commit_log.max_offset}")
                            if epoch_file.last_epoch != t.epoch:
                                epoch_file.append(t.epoch, t.epoch_start)
                            try:
                                store.append_replicated(t.offset, t.data)
                            except IllegalRecordError as exc:
                                raise HAProtocolError(f"{exc}; this master's data is refused, the connection "
                                                      "dropped") from None
                        self.confirm_offset = min(t.confirm_offset, store.commit_log.max_offset)
                    if self._on_confirm is not None and self.confirm_offset != confirmed:
                        confirmed = self.confirm_offset
                        self._on_confirm(confirmed)
                own = store.commit_log.max_offset
                now = time.monotonic()
                if own != reported or now - last_report >= REPORT_INTERVAL_S:
                    writer.write(encode_report(own))
                    await writer.drain()
                    reported, last_report = own, now
        finally:
            writer.close()
