"""The slave side of replication: the HA client pulling the master's commit log (replication.md §3.3, §5).

It connects to the master's HA address (haMasterAddress, or what the name server's registration answer names),
reports its own log end, appends every frame at the same offset (the store dispatches consume queues and index from
it) and acknowledges each append, with a keep-alive report at least every 5 s. A frame that does not start at its
log's end drops the connection (the next one asks again from its true end); a master whose log ends before the
slave's is reported once, clearly, and retried: nothing is overwritten.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from broker.background import BackgroundService
from protocol.ha import FrameReader, HAProtocolError, encode_report

log = logging.getLogger(__name__)

__all__ = ["HASlave"]

RECONNECT_INTERVAL_S = 5.0
REPORT_INTERVAL_S = 5.0


class HASlave(BackgroundService):
    """Owned and started by the broker object of a SLAVE."""

    task_name = "ha-slave"

    def __init__(self, store: Any, master_address: str | None = None) -> None:
        self.store = store
        self.master_address = master_address  # host:port of the master's HA listener
        self.fixed = master_address is not None  # haMasterAddress: never replaced by the name server's answer
        self.connected = False
        self.last_frame_time = 0.0
        self.master_max_seen = -1
        self._address_known = asyncio.Event()
        if master_address:
            self._address_known.set()
        self._reported_ahead = False

    def learn_master(self, ha_address: str | None) -> None:
        """From a registration answer: the master's HA address (None: no master registered now)."""
        if self.fixed or not ha_address or ha_address == self.master_address:
            return
        log.info("replicating from master HA address %s (from the name server)", ha_address)
        self.master_address = ha_address
        self._address_known.set()

    async def run(self) -> None:
        while True:
            await self._address_known.wait()
            address = self.master_address
            try:
                await self._replicate(address)
            except asyncio.CancelledError:
                raise
            except HAProtocolError as exc:
                log.error("replication from %s stopped: %s", address, exc)
            except (OSError, ConnectionError, ValueError, asyncio.TimeoutError) as exc:
                log.info("replication connection to %s lost: %s; reconnecting in %.0f s", address, exc,
                         RECONNECT_INTERVAL_S)
            finally:
                self.connected = False
            await asyncio.sleep(RECONNECT_INTERVAL_S)

    async def _replicate(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5.0)
        try:
            store = self.store
            own = store.commit_log.max_offset if store.commit_log.mfq.files else 0
            writer.write(encode_report(own))
            await writer.drain()
            self.connected = True
            connected_at = time.monotonic()
            log.info("replicating from master %s, from offset %d", address, own)
            frames = FrameReader()
            reported = own
            last_report = time.monotonic()
            while True:
                try:
                    data = await asyncio.wait_for(reader.read(1 << 16), REPORT_INTERVAL_S)
                except asyncio.TimeoutError:
                    data = None
                if data == b"":
                    if self.last_frame_time < connected_at and not self._reported_ahead:
                        self._reported_ahead = True
                        log.error("master %s closed the replication connection without sending anything after this "
                                  "slave reported its log end %d: if the master lost data, this slave is ahead of "
                                  "it and is left as it is (see the master's log; rebuild one of them)", address, own)
                    raise ConnectionError("closed by the master (an offset it could not serve? see its log)")
                if data:
                    for offset, chunk in frames.feed(data):
                        self.last_frame_time = time.monotonic()
                        end = offset + len(chunk)
                        self.master_max_seen = max(self.master_max_seen, end)
                        if not chunk:
                            continue  # heartbeat
                        has_log = bool(store.commit_log.mfq.files)
                        if has_log and offset != store.commit_log.max_offset:
                            raise ConnectionError(f"frame at offset {offset}, but this log ends at "
                                                  f"{store.commit_log.max_offset}")
                        store.append_replicated(offset, chunk)
                own = store.commit_log.max_offset
                now = time.monotonic()
                if own != reported or now - last_report >= REPORT_INTERVAL_S:
                    writer.write(encode_report(own))
                    await writer.drain()
                    reported, last_report = own, now
        finally:
            writer.close()
