"""A slave copies its master's metadata (replication.md §6): topics and subscription groups (replaced when the
master's data version differs), consumer offsets (merged: the master's entries win), delay offsets (kept in the
slave's delayOffset.json). Every 10 s, first 3 s after start, while the master's remoting address is known.

Offsets that consumers committed to this slave (they do while the master is away, replication.md §7.3) and that are
newer than the master's are first handed to the master (UPDATE_CONSUMER_OFFSET), so a master that returns does not
serve the older ones, and the copy does not overwrite them here (the reference loses them: §7.3, pitfall 8)."""

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
        if getattr(offsets, "client_commits", False) is None:
            offsets.client_commits = {}  # record what clients commit here, for the master
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

    async def _request(self, addr: str, code: int, fields: dict[str, Any] | None = None) -> RemotingCommand:
        if self._conn is None or self._conn_addr != addr:
            if self._conn is not None:
                self._conn.close()
            self._conn, self._conn_addr = self.connect(addr), addr
        fields = dict(fields or {})
        if self.credentials is not None:
            fields[ACCESS_KEY] = self.credentials[0]
            fields[SIGNATURE] = sign(self.credentials[1], fields)
        return await self._conn.invoke(RemotingCommand.request(code, fields, opaque=0), REQUEST_TIMEOUT_S)

    async def _ask(self, addr: str, code: int) -> Any:
        reply = await self._request(addr, code)
        if reply.code != ResponseCode.SUCCESS:
            return None
        return loads_lenient(reply.body) if reply.body else None

    async def _hand_over_client_commits(self, addr: str, table: dict) -> None:
        """Commit to the master the offsets clients committed here that are newer than its own (``table``, its
        offsetTable as just read, is updated with them so the merge keeps them). Older ones are dropped: the master
        moved on. An entry is forgotten once handed over, unless a client committed it again meanwhile."""
        pending = self.offsets.client_commits
        if not pending:
            return
        handed, refused = 0, None
        for key, queues in list(pending.items()):
            if refused is not None:
                break
            topic, _, group = key.partition("@")
            master_queues = table.get(key)
            master_queues = master_queues if isinstance(master_queues, dict) else {}
            master_at = {as_int(q, -1): as_int(o, -1) for q, o in master_queues.items()}
            for queue_id, offset in list(queues.items()):
                if offset > master_at.get(queue_id, -1):
                    reply = await self._request(addr, RequestCode.UPDATE_CONSUMER_OFFSET, {
                        "consumerGroup": group, "topic": topic, "queueId": str(queue_id),
                        "commitOffset": str(offset)})
                    if reply.code != ResponseCode.SUCCESS:
                        refused = f"{reply.code} {reply.remark or ''}".strip()
                        break  # all kept: tried again at the next copy
                    for q in [q for q in master_queues if as_int(q, -1) == queue_id]:
                        del master_queues[q]
                    master_queues[str(queue_id)] = offset
                    handed += 1
                if queues.get(queue_id) == offset:
                    del queues[queue_id]
            if not queues:
                pending.pop(key, None)
            if master_queues and key not in table:
                table[key] = master_queues
        if handed:
            log.info("handed %d consumer offset(s) committed to this slave to master %s", handed, addr)
        if refused is not None:
            log.warning("master %s refused the consumer offsets committed to this slave (%s); they are kept here and "
                        "offered again at the next copy", addr, refused)

    async def sync_once(self, addr: str) -> None:
        topics = await self._ask(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        if isinstance(topics, dict) and topics.get("dataVersion") != self.topics.data_version.to_json():
            self.topics.topics.clear()
            self.topics.decode(topics)
            self.topics.mark_changed()
        offsets = await self._ask(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        table = offsets.get("offsetTable") if isinstance(offsets, dict) else None
        if self.offsets.client_commits and (isinstance(table, dict) or offsets is None):
            table = {} if table is None else table  # None: the master has no offsets at all yet
            await self._hand_over_client_commits(addr, table)
        if isinstance(table, dict) and table:
            for key, queues in table.items():
                if "@" in str(key) and isinstance(queues, dict):
                    self.offsets.offset_table[str(key)] = {as_int(q, -1): as_int(o, 0) for q, o in queues.items()
                                                           if as_int(q, -1) >= 0}
            for key, queues in (self.offsets.client_commits or {}).items():  # not handed over yet: still newest
                self.offsets.offset_table.setdefault(key, {}).update(queues)
            self.offsets.mark_changed()
        delay = await self._ask(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        if isinstance(delay, dict):
            await asyncio.to_thread(self._write_delay_offsets, delay)
        groups = await self._ask(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if isinstance(groups, dict) and groups.get("dataVersion") != self.groups.data_version.to_json():
            self.groups.groups.clear()
            self.groups.decode(groups)
            self.groups.mark_changed()

    def _write_delay_offsets(self, delay: dict) -> None:
        os.makedirs(os.path.dirname(self.delay_offset_path) or ".", exist_ok=True)
        tmp = self.delay_offset_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(delay, f)
        os.replace(tmp, self.delay_offset_path)
