"""The slave side of replication: the HA client pulling the master's commit log (replication.md §3.3, §5).

It connects to the master's HA address (haMasterAddress, or what the name server's registration answer names),
reports its own log end, appends every frame at the same offset (the store dispatches consume queues and index from
it) and acknowledges each append, with a keep-alive report at least every 5 s. A frame that does not start at its
log's end drops the connection (the next one asks again from its true end); a master whose log ends before the
slave's is reported once, clearly, and retried: nothing is overwritten.

With ``aclEnable=true`` the slave first passes the handshake of protocol/ha.py with its ``accessKey``/``secretKey``
(an admin account of the ACL file) and replicates only from a master that proved it knows the same secret; with
``tlsEnable`` (default: ``tlsMode=enforcing``) it connects with TLS, verifying the master against
``tlsServerTrustCertPath``. A complete record whose topic or queue id could not be a queue of this store (a tampered
or foreign stream) is refused: the bytes from it on are cut, nothing of it becomes a path, the failure is logged and
the connection dropped (it is asked for again at the next connection, so a master that keeps sending it is refused
each time).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any

from broker.background import BackgroundService
from broker.log_limit import RateLimitedLog
from broker.store.types import IllegalRecordError
from protocol.ha import (
    FrameReader,
    HAProtocolError,
    SlaveHandshake,
    encode_report,
    looks_like_handshake,
)

log = logging.getLogger(__name__)
_limited = RateLimitedLog(log, interval_s=60.0)

__all__ = ["HASlave"]

RECONNECT_INTERVAL_S = 5.0
REPORT_INTERVAL_S = 5.0
HANDSHAKE_TIMEOUT_S = 10.0  # connect, TLS and authentication together


class HASlave(BackgroundService):
    """Owned and started by the broker object of a SLAVE."""

    task_name = "ha-slave"

    def __init__(self, store: Any, master_address: str | None = None, *,
                 credentials: tuple[str, str] | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self.store = store
        self.credentials = credentials  # (accessKey, secretKey) under aclEnable: authenticate both ways
        self.ssl_context = ssl_context
        self.master_address = master_address  # host:port of the master's HA listener
        self.fixed = master_address is not None  # haMasterAddress: never replaced by the name server's answer
        self.connected = False
        self.last_frame_time = 0.0
        self.master_max_seen = -1
        self._address_known = asyncio.Event()
        if master_address:
            self._address_known.set()
        self._reported_ahead = False

    def _reconnect_delay(self) -> float:
        return RECONNECT_INTERVAL_S

    def learn_master(self, ha_address: str | None) -> None:
        """From a registration answer: the master's HA address (None: no master registered now)."""
        if self.fixed or not ha_address or ha_address == self.master_address:
            return
        log.info("replicating from master HA address %s (from the name server)", ha_address)
        self.master_address = ha_address
        self._address_known.set()

    async def run(self) -> None:
        while True:
            if self._task is not asyncio.current_task():
                return  # stopped or replaced while a cancellation was lost: never two replication loops
            await self._address_known.wait()
            address = self.master_address
            delay = self._reconnect_delay()
            try:
                await self._replicate(address)
            except asyncio.CancelledError:
                raise
            except HAProtocolError as exc:
                _limited.error(("stopped", address, str(exc)[:60]), "replication from %s stopped: %s", address, exc)
            except ssl.SSLError as exc:
                _limited.error(("tls", address), "replication from %s: TLS failed: %s (tlsEnable / "
                               "tlsServerTrustCertPath)", address, getattr(exc, "reason", None) or exc)
            except (OSError, ConnectionError, ValueError, asyncio.TimeoutError) as exc:
                log.log(logging.INFO if delay >= RECONNECT_INTERVAL_S else logging.DEBUG,
                        "replication connection to %s lost: %s; reconnecting in %.1f s", address, exc, delay)
            finally:
                self.connected = False
            await asyncio.sleep(delay)

    async def _replicate(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=self.ssl_context,
                                    ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self.ssl_context else None),
            HANDSHAKE_TIMEOUT_S)
        try:
            first = await asyncio.wait_for(self._authenticate(reader, writer), HANDSHAKE_TIMEOUT_S) \
                if self.credentials is not None else b""
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
            first_chunk = True
            while True:
                if first:
                    data, first = first, b""
                else:
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
                    first_chunk, was_first = False, first_chunk
                    if was_first and self.credentials is None and looks_like_handshake(data):  # never a frame
                        raise HAProtocolError("the master requires authentication (aclEnable=true there): set "
                                              "aclEnable=true and an admin account's accessKey/secretKey on this slave")
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
                        try:
                            store.append_replicated(offset, chunk)
                        except IllegalRecordError as exc:
                            raise HAProtocolError(f"{exc}; this master's data is refused (a tampered or foreign "
                                                  "log), the connection dropped") from None
                own = store.commit_log.max_offset
                now = time.monotonic()
                if own != reported or now - last_report >= REPORT_INTERVAL_S:
                    writer.write(encode_report(own))
                    await writer.drain()
                    reported, last_report = own, now
        finally:
            writer.close()

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        """The handshake of protocol/ha.py; returns the bytes read after the master's ACCEPT (first frames)."""
        access_key, secret_key = self.credentials  # type: ignore[misc]
        handshake = SlaveHandshake(access_key, secret_key)
        writer.write(handshake.hello())
        while not handshake.done:
            data = await reader.read(4096)
            if not data:
                raise HAProtocolError("the master closed the connection during the authentication (is aclEnable=true "
                                      "on the master too? see its log)")
            handshake.feed(data)
            out = handshake.outbound()
            if out:
                writer.write(out)
                await writer.drain()
        return handshake.rest
