"""Where a push consumer keeps its consume offsets.

CLUSTERING groups share offsets through the broker (RemoteOffsetStore: UPDATE_CONSUMER_OFFSET, one-way every few
seconds, two-way when a queue is dropped and at shutdown). BROADCASTING consumers each consume everything, so every
instance keeps its own offsets in a local file (LocalFileOffsetStore), by default
``~/.rocketmq_offsets/<client_id>/<group>/offsets.json``. The client id contains the instance name: give the consumer a
fixed `instance_name` for its offsets to survive a restart. Writes are atomic (temporary file, fsync, rename) and the
previous version is kept as ``offsets.json.bak`` in case the main file is found damaged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

from client.consumer_ops import ConsumerOps
from client.message import MessageQueue

log = logging.getLogger(__name__)

__all__ = ["OffsetStore", "RemoteOffsetStore", "LocalFileOffsetStore", "default_offset_store_dir"]


def default_offset_store_dir() -> Path:
    return Path(os.environ.get("ROCKETMQ_CLIENT_OFFSET_DIR") or Path.home() / ".rocketmq_offsets")


class OffsetStore:
    """In-memory offsets per queue plus a persistent home for them."""

    def __init__(self) -> None:
        self.offsets: dict[MessageQueue, int] = {}
        self._persisted: dict[MessageQueue, int] = {}

    def read(self, mq: MessageQueue) -> int:
        """The in-memory offset of mq, -1 if none."""
        return self.offsets.get(mq, -1)

    def update(self, mq: MessageQueue, offset: int) -> None:
        self.offsets[mq] = offset

    def remove(self, mq: MessageQueue) -> None:
        self.offsets.pop(mq, None)
        self._persisted.pop(mq, None)

    async def load(self) -> None:
        """Read persisted offsets (local store) before consuming starts."""

    async def fetch(self, mq: MessageQueue, zero_if_not_found: bool = True) -> int:
        """The persisted offset of mq, -1 when there is none (a new group / instance)."""
        raise NotImplementedError

    async def persist(self, mq: MessageQueue) -> None:
        """Persist one queue's offset now and wait for it (used when a queue is dropped)."""
        raise NotImplementedError

    async def persist_all(self, final: bool = False) -> None:
        """Persist changed offsets; final=True waits for every write to be acknowledged."""
        raise NotImplementedError


class RemoteOffsetStore(OffsetStore):
    """Offsets kept by the broker for the whole group."""

    def __init__(self, ops: ConsumerOps, final_timeout: float = 3.0) -> None:
        super().__init__()
        self.ops = ops
        self.final_timeout = final_timeout

    async def fetch(self, mq: MessageQueue, zero_if_not_found: bool = True) -> int:
        return await self.ops.query_consumer_offset(mq, zero_if_not_found=zero_if_not_found)

    async def persist(self, mq: MessageQueue) -> None:
        offset = self.offsets.get(mq, -1)
        if offset < 0:
            return
        await self.ops.update_consumer_offset(mq, offset, oneway=False, timeout=self.final_timeout)
        self._persisted[mq] = offset

    async def persist_all(self, final: bool = False) -> None:
        changed = [(mq, off) for mq, off in list(self.offsets.items()) if off >= 0 and self._persisted.get(mq) != off]
        if not changed:
            return
        if not final:
            for mq, offset in changed:
                try:
                    await self.ops.update_consumer_offset(mq, offset, oneway=True)
                    self._persisted[mq] = offset
                except Exception as exc:
                    log.debug("offset commit for %s failed: %s", mq, exc)
            return

        async def commit(mq: MessageQueue, offset: int) -> None:
            try:
                await self.ops.update_consumer_offset(mq, offset, oneway=False, timeout=self.final_timeout)
                self._persisted[mq] = offset
            except Exception as exc:
                log.warning("final offset commit of %s (offset %d) failed: %s", mq, offset, exc)

        await asyncio.gather(*(commit(mq, off) for mq, off in changed))


def _queue_key(mq: MessageQueue) -> str:
    return f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"


class LocalFileOffsetStore(OffsetStore):
    """Offsets of one broadcasting consumer instance in a JSON file."""

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__()
        self.path = Path(path)
        self._stored: dict[str, int] = {}
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        self._stored = await asyncio.to_thread(self._read_files)

    def _read_files(self) -> dict[str, int]:
        for candidate in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                data = json.loads(candidate.read_text(encoding="utf-8"))
                table = data["offsetTable"]
                return {
                    f"{e['topic']}@{e['brokerName']}@{int(e['queueId'])}": int(e["offset"]) for e in table
                }
            except FileNotFoundError:
                continue
            except (ValueError, KeyError, TypeError, OSError) as exc:
                log.warning("offset file %s is unreadable (%s); trying the backup", candidate, exc)
        return {}

    async def fetch(self, mq: MessageQueue, zero_if_not_found: bool = True) -> int:
        return self._stored.get(_queue_key(mq), -1)

    async def persist(self, mq: MessageQueue) -> None:
        await self.persist_all(final=True)

    async def persist_all(self, final: bool = False) -> None:
        if all(self._persisted.get(mq) == off for mq, off in self.offsets.items()):
            return
        async with self._lock:
            snapshot = dict(self.offsets)
            for mq, offset in snapshot.items():
                if offset >= 0:
                    self._stored[_queue_key(mq)] = offset
            table = []
            for key, offset in sorted(self._stored.items()):
                topic, broker_name, queue_id = key.rsplit("@", 2)
                table.append({"topic": topic, "brokerName": broker_name, "queueId": int(queue_id), "offset": offset})
            text = json.dumps({"offsetTable": table}, indent=1)
            try:
                await asyncio.to_thread(self._write_atomically, text)
            except OSError as exc:
                log.warning("cannot write offset file %s: %s", self.path, exc)
                return
            self._persisted.update(snapshot)

    def _write_atomically(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if self.path.exists():
            os.replace(self.path, self.path.with_name(self.path.name + ".bak"))
        os.replace(tmp, self.path)
        try:
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
