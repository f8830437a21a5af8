"""What each group has done with each queue it pops, kept across restarts.

Per (group, topic, queue): the committed frontier (every offset below it is finished: acked, re-queued to the retry
topic, dead-lettered or filtered out), the pop cursor, the deliveries in flight and the offsets finished out of
order. The frontier is also written to the consumer-offset table, so progress, lag and offset resets are shared with
remoting consumers of the group.

Durability: every change is one journal line (`ChangeJournal`: an os.write, in the page cache at once, so an
acknowledged ack survives kill -9); now and then the whole state is saved as ``popState.json`` and the journal
segments it covers are dropped. Loading reads the snapshot and replays the journal on top.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any

from broker.managers.persistence import ChangeJournal, open_json_file

log = logging.getLogger(__name__)

FILE_NAME = "popState.json"
SNAPSHOT_EVERY_RECORDS = 20_000

QueueKey = tuple[str, str, int]  # (group, topic, queue id)


class Inflight:
    """One message handed out and not finished yet."""

    __slots__ = ("phys", "pop_time_ms", "invisible_ms", "attempt", "renew_client", "first_pop_ms", "ready", "handle")

    def __init__(self, phys: int, pop_time_ms: int, invisible_ms: int, attempt: int, renew_client: str = "",
                 first_pop_ms: int = 0, ready: bool = False) -> None:
        self.phys = phys
        self.pop_time_ms = pop_time_ms
        self.invisible_ms = invisible_ms
        self.attempt = attempt  # delivery attempt of the current delivery (1 = first)
        self.renew_client = renew_client  # client id whose auto_renew receive holds it ("" = none)
        self.first_pop_ms = first_pop_ms or pop_time_ms
        self.ready = ready  # FIFO: lapsed, to be delivered again in its place
        # the receipt handle's text as handed out, while the delivery is as that handle says ("": unknown, e.g.
        # replayed, or changed since): an ack naming exactly it needs no other check than the expiry
        self.handle = ""

    def restart(self, pop_time_ms: int, invisible_ms: int) -> None:
        """Invisible ``invisible_ms`` from ``pop_time_ms`` on (the handle handed out no longer says so)."""
        self.pop_time_ms, self.invisible_ms = pop_time_ms, invisible_ms
        self.handle = ""

    @property
    def expiry_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms

    def encode(self, offset: int) -> list[Any]:
        return [offset, self.phys, self.attempt, self.pop_time_ms, self.invisible_ms, self.renew_client,
                self.first_pop_ms, int(self.ready)]

    @classmethod
    def decode(cls, row: list[Any]) -> tuple[int, "Inflight"]:
        offset, phys, attempt, pop_ms, invisible_ms, client, first, ready = row
        return int(offset), cls(int(phys), int(pop_ms), int(invisible_ms), int(attempt), str(client), int(first),
                                bool(ready))


class QueueProgress:
    """One group's progress on one queue."""

    __slots__ = ("committed", "next_offset", "inflight", "done", "written", "attempt_id")

    def __init__(self, start: int) -> None:
        self.committed = start  # every offset below is finished
        self.next_offset = start  # the next offset never popped
        self.inflight: dict[int, Inflight] = {}
        self.done: set[int] = set()  # finished offsets at or above `committed`
        self.written = start  # the frontier last written to the consumer-offset table
        self.attempt_id = ""  # FIFO: the receive attempt that took the batch in flight

    def reset(self, offset: int) -> None:
        self.committed = self.next_offset = self.written = offset
        self.inflight.clear()
        self.done.clear()
        self.attempt_id = ""

    def finish(self, offsets: Iterable[int]) -> None:
        for offset in offsets:
            self.inflight.pop(offset, None)
            if offset >= self.committed:
                self.done.add(offset)
        self._advance()

    def skip_to(self, start: int, end: int, delivered: Iterable[int]) -> None:
        """The pop cursor moved from `start` to `end`; offsets not in `delivered` were filtered out or gone."""
        delivered = set(delivered)
        if self.committed == start == self.next_offset and not self.inflight and not self.done and not delivered:
            self.committed = self.next_offset = max(end, start)
            return
        self.next_offset = max(self.next_offset, end)
        self.done.update(o for o in range(start, end) if o not in delivered and o >= self.committed)
        self._advance()

    def _advance(self) -> None:
        done = self.done
        while self.committed < self.next_offset and self.committed in done:
            done.discard(self.committed)
            self.committed += 1
        if not self.inflight and not done and self.committed < self.next_offset:
            self.committed = self.next_offset  # nothing pending in between (e.g. offsets gone with their file)

    def encode(self, key: QueueKey) -> dict[str, Any]:
        group, topic, queue_id = key
        return {"g": group, "t": topic, "q": queue_id, "c": self.committed, "n": self.next_offset,
                "w": self.written, "a": self.attempt_id, "d": sorted(self.done),
                "f": [entry.encode(offset) for offset, entry in sorted(self.inflight.items())]}

    @classmethod
    def decode(cls, obj: dict[str, Any]) -> tuple[QueueKey, "QueueProgress"]:
        progress = cls(int(obj["c"]))
        progress.next_offset = max(int(obj["n"]), progress.committed)
        progress.written = int(obj.get("w", progress.committed))
        progress.attempt_id = str(obj.get("a") or "")
        progress.done = {int(o) for o in obj.get("d") or () if int(o) >= progress.committed}
        for row in obj.get("f") or ():
            offset, entry = Inflight.decode(row)
            progress.inflight[offset] = entry
        return (str(obj["g"]), str(obj["t"]), int(obj["q"])), progress


class PopState:
    """Every QueueProgress of the broker, with its journal and snapshot under the config directory."""

    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, FILE_NAME)
        self._file = open_json_file(self.path)
        self._journal = ChangeJournal(self.path)
        self.queues: dict[QueueKey, QueueProgress] = {}
        self._records_since_snapshot = 0
        self._saving: asyncio.Task | None = None

    def __iter__(self) -> Iterator[tuple[QueueKey, QueueProgress]]:
        return iter(list(self.queues.items()))

    def get(self, key: QueueKey) -> QueueProgress | None:
        return self.queues.get(key)

    def add(self, key: QueueKey, start: int) -> QueueProgress:
        progress = self.queues[key] = QueueProgress(start)
        self.log_reset(key, start)
        return progress

    # ---- journal records: one line per change ----------------------------------------------------------------
    def log_reset(self, key: QueueKey, offset: int) -> None:
        self._append({"r": list(key), "o": offset})

    def log_pop(self, key: QueueKey, start: int, end: int, delivered: list[tuple[int, Inflight]],
                attempt_id: str = "") -> None:
        """Popped from `start` to `end` (offsets in between not delivered are finished), plus re-deliveries."""
        self._append({"p": list(key), "s": start, "e": end, "a": attempt_id,
                      "d": [entry.encode(offset) for offset, entry in delivered]})

    def log_popped(self, key: QueueKey, start: int, end: int, offsets: list[int], phys_offsets: list[int],
                   attempts: list[int], pop_time_ms: int, invisible_ms: int, renew_client: str = "",
                   attempt_id: str = "") -> None:
        """``log_pop`` of one pass's new deliveries, which share their pop time, invisible time and client: as
        columns (offsets, commit-log offsets, attempts), half the encoding work of one row per delivery."""
        self._append({"p": list(key), "s": start, "e": end, "a": attempt_id, "t": pop_time_ms, "i": invisible_ms,
                      "c": renew_client, "o": offsets, "x": phys_offsets, "n": attempts})

    def log_finish(self, key: QueueKey, offsets: list[int]) -> None:
        self._append({"f": list(key), "o": offsets})

    def log_update(self, key: QueueKey, offset: int, entry: Inflight) -> None:
        self._append({"u": list(key), "d": entry.encode(offset)})

    def _append(self, record: dict[str, Any]) -> None:
        try:
            self._journal.append(record)
        except OSError as exc:  # disk full: the state in memory stays right, a restart may redeliver
            log.error("cannot write the POP journal %s: %s", self.path, exc)
        self._records_since_snapshot += 1

    # ---- loading -----------------------------------------------------------------------------------------------
    def load(self) -> None:
        document = self._file.load()
        if isinstance(document, dict):
            for obj in document.get("queues") or ():
                try:
                    key, progress = QueueProgress.decode(obj)
                except (KeyError, TypeError, ValueError) as exc:
                    log.warning("skipping a bad entry of %s: %s", self.path, exc)
                    continue
                self.queues[key] = progress
        replayed = 0
        for record in self._journal.read():
            try:
                self._replay(record)
                replayed += 1
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("skipping a bad POP journal record: %s", exc)
        self._records_since_snapshot = replayed

    def _replay(self, record: dict[str, Any]) -> None:
        if "r" in record:
            key = _key(record["r"])
            progress = self.queues.get(key)
            if int(record["o"]) < 0:  # dropped with its topic
                self.queues.pop(key, None)
            elif progress is None:
                self.queues[key] = QueueProgress(int(record["o"]))
            else:
                progress.reset(int(record["o"]))
            return
        if "p" in record:
            progress = self._progress(record["p"])
            if "o" in record:  # columns (log_popped)
                pop_ms, invisible_ms, client = int(record["t"]), int(record["i"]), str(record["c"])
                delivered = [(int(offset), Inflight(int(phys), pop_ms, invisible_ms, int(attempt), client))
                             for offset, phys, attempt in zip(record["o"], record["x"], record["n"], strict=True)]
            else:
                delivered = [Inflight.decode(row) for row in record.get("d") or ()]
            for offset, entry in delivered:
                if offset >= progress.committed:
                    progress.inflight[offset] = entry
                    progress.done.discard(offset)
            start, end = int(record["s"]), int(record["e"])
            if end > start:
                progress.skip_to(start, end, [o for o, _ in delivered])
            if record.get("a"):
                progress.attempt_id = str(record["a"])
            return
        if "f" in record:
            self._progress(record["f"]).finish(int(o) for o in record["o"])
            return
        if "u" in record:
            progress = self._progress(record["u"])
            offset, entry = Inflight.decode(record["d"])
            if offset in progress.inflight:
                progress.inflight[offset] = entry

    def _progress(self, raw_key: list[Any]) -> QueueProgress:
        key = _key(raw_key)
        progress = self.queues.get(key)
        if progress is None:
            raise KeyError(f"no progress for {key}")
        return progress

    # ---- snapshots ---------------------------------------------------------------------------------------------
    def maybe_snapshot(self) -> None:
        """Save the whole state in the background once the journal has grown enough."""
        if self._records_since_snapshot >= SNAPSHOT_EVERY_RECORDS and (self._saving is None or self._saving.done()):
            self._saving = asyncio.get_running_loop().create_task(self._snapshot_async())

    async def _snapshot_async(self) -> None:
        segment, document = self._capture()
        try:
            await asyncio.to_thread(self._file.save, document)
        except OSError as exc:
            log.error("cannot save %s: %s", self.path, exc)
            return
        self._journal.drop_through(segment)

    def _capture(self) -> tuple[int, dict[str, Any]]:
        segment = self._journal.rotate()
        self._records_since_snapshot = 0
        return segment, {"version": 1, "queues": [progress.encode(key) for key, progress in self.queues.items()]}

    def close(self) -> None:
        """Clean shutdown: one snapshot, no journal left."""
        segment, document = self._capture()
        try:
            self._file.save(document)
        except OSError as exc:
            log.error("cannot save %s: %s", self.path, exc)
            return
        self._journal.drop_through(segment)
        self._journal.close()

    def drop_topic(self, topic: str) -> None:
        """Forget every group's progress on `topic` and on its pop retry topics (``%RETRY%<group>_<topic>``)."""
        for key in [k for k in self.queues if k[1] in (topic, f"%RETRY%{k[0]}_{topic}")]:
            del self.queues[key]
            self.log_reset(key, -1)


def _key(raw: list[Any]) -> QueueKey:
    group, topic, queue_id = raw
    return str(group), str(topic), int(queue_id)
