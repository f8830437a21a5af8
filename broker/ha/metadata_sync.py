"""A slave copies its master's metadata (replication.md §6): topics and subscription groups (replaced when the
master's data version differs), consumer offsets (merged: the master's entries win), delay offsets (kept in the
slave's delayOffset.json). Every 10 s, first 3 s after start, while the master's remoting address is known."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

from broker.background import BackgroundService
from protocol.acl_signature import ACCESS_KEY, SIGNATURE, sign
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.json_body import as_int
from protocol.jsonlenient import loads_lenient

log = logging.getLogger(__name__)

__all__ = ["MetadataSync"]

FIRST_DELAY_S = 3.0
INTERVAL_S = 10.0
REQUEST_TIMEOUT_S = 3.0


class MetadataSync(BackgroundService):
    task_name = "slave-metadata-sync"

    def __init__(self, *, topics: Any, groups: Any, offsets: Any, delay_offset_path: str, own_addr: str,
                 connect: Any, interval_s: float = INTERVAL_S, credentials: tuple[str, str] | None = None) -> None:
        self.credentials = credentials  # (accessKey, secretKey): requests signed for a master with ACL on
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.delay_offset_path = delay_offset_path
        self.own_addr = own_addr
        self.connect = connect  # addr -> an object with async invoke(cmd, timeout) and close()
        self.interval_s = interval_s
        self.master_addr: str | None = None
        self.last_sync_ok = False
        self._conn: Any = None
        self._conn_addr: str | None = None

    def learn_master(self, master_addr: str | None) -> None:
        if master_addr and master_addr != self.own_addr:
            self.master_addr = master_addr

    async def stop(self) -> None:
        await super().stop()
        if self._conn is not None:
            self._conn.close()

    async def run(self) -> None:
        await asyncio.sleep(FIRST_DELAY_S)
        while True:
            if self.master_addr:
                try:
                    await self.sync_once(self.master_addr)
                    self.last_sync_ok = True
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the master may be down: try again next time
                    if self.last_sync_ok:
                        log.warning("copying metadata from master %s failed: %s", self.master_addr, exc)
                    self.last_sync_ok = False
                    if self._conn is not None:
                        self._conn.close()
                        self._conn = None
            await asyncio.sleep(self.interval_s)

    async def _ask(self, addr: str, code: int) -> Any:
        if self._conn is None or self._conn_addr != addr:
            if self._conn is not None:
                self._conn.close()
            self._conn, self._conn_addr = self.connect(addr), addr
        fields: dict[str, Any] = {}
        if self.credentials is not None:
            fields[ACCESS_KEY] = self.credentials[0]
            fields[SIGNATURE] = sign(self.credentials[1], fields)
        reply = await self._conn.invoke(RemotingCommand.request(code, fields, opaque=0), REQUEST_TIMEOUT_S)
        if reply.code != ResponseCode.SUCCESS:
            return None
        return loads_lenient(reply.body) if reply.body else None

    async def sync_once(self, addr: str) -> None:
        topics = await self._ask(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        if isinstance(topics, dict) and topics.get("dataVersion") != self.topics.data_version.to_json():
            self.topics.topics.clear()
            self.topics.decode(topics)
            self.topics._changed()
        offsets = await self._ask(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        table = offsets.get("offsetTable") if isinstance(offsets, dict) else None
        if isinstance(table, dict) and table:
            for key, queues in table.items():
                if "@" in str(key) and isinstance(queues, dict):
                    self.offsets.offset_table[str(key)] = {as_int(q, -1): as_int(o, 0) for q, o in queues.items()
                                                           if as_int(q, -1) >= 0}
            self.offsets._changed()
        delay = await self._ask(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        if isinstance(delay, dict):
            await asyncio.to_thread(self._write_delay_offsets, delay)
        groups = await self._ask(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if isinstance(groups, dict) and groups.get("dataVersion") != self.groups.data_version.to_json():
            self.groups.groups.clear()
            self.groups.decode(groups)
            self.groups._changed()

    def _write_delay_offsets(self, delay: dict) -> None:
        os.makedirs(os.path.dirname(self.delay_offset_path) or ".", exist_ok=True)
        tmp = self.delay_offset_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(delay, f)
        os.replace(tmp, self.delay_offset_path)
