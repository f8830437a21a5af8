"""The POP service: hand messages out to a group, keep them invisible, take acks, bring lapsed ones back.

Semantics (../shared/reference/grpc-proxy.md §9):
- a receive pops up to `batch` messages of a topic for a group, from all its readable queues (or one queue), and
  from the group's pop retry topic ``%RETRY%<group>_<topic>``: first with 20 % probability, and always when the
  normal queues did not fill the batch; each delivery gets a receipt handle and stays invisible for its duration;
- an ack finishes the message for that group; ChangeInvisibleDuration restarts its invisibility from now;
- a delivery that lapses is copied to the pop retry topic with reconsume times + 1 (same UNIQ_KEY, tag, keys) and
  delivered from there under its original topic, with delivery attempt = reconsume times + 1; a message that has
  been delivered `max_attempts` times goes to ``%DLQ%<group>`` instead;
- FIFO groups (consumeMessageOrderly): per queue, the next messages wait while any of the last batch is in flight;
  a lapsed batch is delivered again in the same order with its attempt + 1 (no retry topic);
- auto-renewed deliveries (push consumers) stay invisible while their client is alive, up to 3 hours.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from broker.background import BackgroundService
from broker.core.arrivals import ANY_QUEUE, WAKE_SHUTDOWN, Arrivals, Watch
from broker.core.outcome import Outcome
from broker.log_limit import RateLimitedLog
from broker.managers.derived_names import pop_retry_topic  # the name's one definition (checked there at receive)
from broker.managers.topic_config import dlq_topic
from broker.pop.handle import (TOPIC_KIND_NORMAL, TOPIC_KIND_RETRY, InvalidHandle, ReceiptHandle, handle_middle,
                              parse_handle)
from broker.pop.state import Inflight, PopState, QueueKey, QueueProgress
from broker.pop.types import (KIND_BUSY, KIND_HANDLE_EXPIRED, KIND_HANDLE_UNKNOWN, KIND_INTERNAL, KIND_NOT_FOUND,
                              MAX_BATCH, DeadLetter as _DeadLetter, Delivery, PopError, PopPass as _Pass, PopRequest,
                              RenewPolicy)
from broker.store.types import GetStatus, MessageToStore, message_from_record
from protocol.codes import PERM_READ
from protocol.json_body import as_int
from protocol.message import MessageRecord, RecordError, iter_records

log = logging.getLogger(__name__)

REVIVE_INTERVAL_S = 0.5
REVIVE_MAX_PER_PASS = 2_000
RETRY_FIRST_PROBABILITY = 0.2
MAX_POLLING = 10_000  # receives waiting at once; more are answered TOO_MANY_REQUESTS at once
PROP_RETRY_TOPIC = "RETRY_TOPIC"
PROP_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROP_ORIGIN_QUEUE_ID = "POP_ORIGIN_QUEUE_ID"
PROP_ORIGIN_QUEUE_OFFSET = "POP_ORIGIN_QUEUE_OFFSET"
PROP_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROP_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"


# a lapsed delivery that cannot go to its POP retry topic nor to the dead-letter topic waits this long before the next
# try (the revive loop runs every REVIVE_INTERVAL_S: it must not fail, and log, twice a second forever)
UNREQUEUEABLE_RETRY_MS = 60_000


class PopService(BackgroundService):
    """Owned by the broker: `load()` before start, `start()` runs the revive task, `stop()` saves the state.
    Receives wait for messages on the broker's one new-message notification (``arrivals``). The retries and dead
    letters it writes go through ``store_message`` (the send core's ``store_written``: stored as a send is, with its
    in-sync, flush and replication waits)."""

    task_name = "pop-revive"

    def __init__(self, store: Any, topics: Any, groups: Any, offsets: Any, config_dir: str, broker_name: str,
                 arrivals: Arrivals, store_message: Callable[[MessageToStore], Awaitable[Outcome]],
                 client_alive: Callable[[str], bool] = lambda _client: True,
                 renew: RenewPolicy = RenewPolicy()) -> None:
        self.store = store
        self.store_message = store_message
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.broker_name = broker_name
        self.client_alive = client_alive
        self.renew = renew
        self.state = PopState(config_dir)
        self.arrivals = arrivals
        self._watches: set[Watch] = set()  # the receives waiting now (woken when the service stops)
        self._rotation: dict[tuple[str, str], int] = {}
        self._warnings = RateLimitedLog(log, 60.0)
        self._random = random.Random()
        self._wake_revive = asyncio.Event()
        self._polling = 0
        topics.add_topic_listener(self._on_topic_change)

    # ---- lifecycle -----------------------------------------------------------------------------------------
    def load(self) -> None:
        self.state.load()
        for key, progress in self.state:
            group, topic, queue_id = key
            current = self.offsets.query_offset(group, topic, queue_id)
            if current > progress.committed:  # reset while the state was not looking
                progress.reset(current)
                self.state.log_reset(key, current)
            elif current < progress.committed:  # the offset file lagged behind the journal (crash)
                self.offsets.commit_offset(group, topic, queue_id, progress.committed)
            progress.written = progress.committed

    @property
    def running(self) -> bool:
        """Started (masters only: a slave's store is its master's copy)."""
        return self._task is not None

    async def stop(self) -> None:
        await super().stop()
        for watch in list(self._watches):
            watch.interrupt()
        self.state.close()

    def _wake(self, topic: str) -> None:
        """The receives of ``topic`` may find something now (a FIFO queue moved on, a lapsed batch is due)."""
        self.arrivals.poke(topic)

    def _on_topic_change(self, topic: str, config: Any) -> None:
        """A deleted topic takes every group's progress on it (and on its pop retry topics) along."""
        if config is None:
            self.state.drop_topic(topic)

    # ---- receive -------------------------------------------------------------------------------------------
    async def receive(self, request: PopRequest, poll_s: float) -> list[Delivery]:
        """Pop up to `request.batch` messages, waiting up to `poll_s` seconds for some to arrive."""
        if self._polling >= MAX_POLLING:
            raise PopError(KIND_BUSY, f"polling full: {self._polling} receives are waiting for messages")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, poll_s)
        deliveries = await self._pop(request)  # the usual case: there are messages (no registration for it)
        if deliveries or poll_s <= 0 or self._task is None:
            return deliveries
        keys = [(request.topic, ANY_QUEUE), (pop_retry_topic(request.group, request.topic), ANY_QUEUE)]
        self._polling += 1
        with self.arrivals.watch(keys) as watch:  # registered before the next try: no arrival falls between
            self._watches.add(watch)
            try:
                for _ in range(100_000):
                    watch.clear()
                    deliveries = await self._pop(request)
                    remaining = deadline - loop.time()
                    if deliveries or remaining <= 0 or self._task is None:
                        return deliveries
                    if await watch.wait(remaining) == WAKE_SHUTDOWN:
                        return []
                return []
            finally:
                self._polling -= 1
                self._watches.discard(watch)

    async def _pop(self, request: PopRequest) -> list[Delivery]:
        collected = _Pass()
        batch = max(1, min(request.batch, MAX_BATCH))
        now = _now_ms()
        config = self.topics.get(request.topic)
        if config is None or not config.perm & PERM_READ:
            raise PopError(KIND_NOT_FOUND, f"topic {request.topic} does not exist or is not readable")
        retry_topic = pop_retry_topic(request.group, request.topic)
        use_retry = not request.fifo and self.store.get_consume_queue(retry_topic, 0) is not None
        if use_retry and self._random.random() < RETRY_FIRST_PROBABILITY:
            self._pop_queue(request, retry_topic, 0, batch, now, collected)
        if request.queue_id >= 0:
            queue_ids = [request.queue_id] if request.queue_id < config.read_queue_nums else []
        else:
            count = config.read_queue_nums
            turn = self._rotation.get((request.group, request.topic), 0)
            self._rotation[(request.group, request.topic)] = turn + 1
            queue_ids = [(turn + i) % count for i in range(count)] if count > 0 else []
        for queue_id in queue_ids:
            if len(collected.deliveries) >= batch:
                break
            self._pop_queue(request, request.topic, queue_id, batch - len(collected.deliveries), now, collected)
        if use_retry and len(collected.deliveries) < batch:
            self._pop_queue(request, retry_topic, 0, batch - len(collected.deliveries), now, collected)
        self.state.maybe_snapshot()
        if collected.dead:
            try:
                await self._bury(collected.dead)
            except PopError as exc:  # they stay in flight and are tried again when their time lapses
                log.warning("dead-lettering while popping for %s failed: %s", request.group, exc)
        return collected.deliveries

    def _progress(self, group: str, topic: str, queue_id: int) -> tuple[QueueKey, QueueProgress]:
        key = (group, topic, queue_id)
        progress = self.state.get(key)
        current = self.offsets.query_offset(group, topic, queue_id)
        if progress is None:
            start = current if current >= 0 else self._start_offset(topic, queue_id)
            progress = self.state.add(key, start)
        elif current >= 0 and current != progress.written:  # reset (mqadmin, console) or a remoting consumer
            progress.reset(current)
            self.state.log_reset(key, current)
        return key, progress

    def _start_offset(self, topic: str, queue_id: int) -> int:
        """A group new to a queue starts at its first message while the queue still has it, else at the newest."""
        low = self.store.get_min_offset(topic, queue_id)
        if low <= 0 or topic.startswith("%RETRY%"):
            return max(low, 0)
        return max(low, self.store.get_max_offset(topic, queue_id) - 1)

    def _pop_queue(self, request: PopRequest, topic: str, queue_id: int, want: int, now: int,
                   collected: _Pass) -> None:
        key, progress = self._progress(request.group, topic, queue_id)
        if request.fifo and progress.inflight:
            self._pop_fifo_again(request, key, progress, now, collected)
            return
        start = progress.next_offset
        result = self.store.get_messages(topic, queue_id, start, want, tag_filter=_tag_filter(request),
                                         record_filter=_record_filter(request))
        status = result.status
        if status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
            return
        if status is GetStatus.OFFSET_OVERFLOW_BADLY:  # the queue is shorter than the cursor (truncated): follow it
            progress.reset(result.next_begin_offset)
            self.state.log_reset(key, result.next_begin_offset)
            self._commit(key, progress)
            return
        end = max(result.next_begin_offset, start)
        # the hot loop (one pass per message): locals only, the receipt handle's text from its shared middle, the
        # in-flight entry put in place at once
        offsets: list[int] = []  # what went in flight: the journal's columns
        phys_offsets: list[int] = []
        attempts: list[int] = []
        dead = False
        inflight = progress.inflight
        deliveries = collected.deliveries
        tag_names, max_attempts, original = request.tag_names, request.max_attempts, request.topic
        invisible_ms, renew_client = request.invisible_ms, request.renew_client
        is_retry = topic != original
        middle = handle_middle(now, invisible_ms, TOPIC_KIND_RETRY if is_retry else TOPIC_KIND_NORMAL,
                               self.broker_name, queue_id)
        for record in _records(result.buffers):
            offset = record.queue_offset
            if offset < start or offset >= end:
                continue
            if tag_names is not None and record.tags not in tag_names:
                continue  # a tag-hash collision: finished like any filtered-out message
            attempt = record.reconsume_times + 1
            phys = record.physical_offset
            entry = inflight[offset] = Inflight(phys, now, invisible_ms, attempt, renew_client)
            if attempt > max_attempts:
                entry.invisible_ms = 30_000  # being dead-lettered; back in flight if that fails
                collected.dead.append(_DeadLetter(key, offset, record, request.group, original))
                dead = True
            elif is_retry:
                deliveries.append(self._delivery(request, record, entry, offset, queue_id, True))
            else:
                entry.handle = text = f"{offset}{middle}{offset} {phys}"
                deliveries.append(Delivery(record, text, invisible_ms, attempt, original, queue_id, offset))
            offsets.append(offset)
            phys_offsets.append(phys)
            attempts.append(attempt)
        progress.skip_to(start, end, offsets)
        attempt_id = request.attempt_id if request.fifo else ""
        if request.fifo:
            progress.attempt_id = attempt_id
        if dead:  # entries differ (the dead letters' invisible time): one row each
            self.state.log_pop(key, start, end, [(offset, inflight[offset]) for offset in offsets], attempt_id)
        elif end > start or offsets:
            self.state.log_popped(key, start, end, offsets, phys_offsets, attempts, now, invisible_ms, renew_client,
                                  attempt_id)
        self._commit(key, progress)

    def _pop_fifo_again(self, request: PopRequest, key: QueueKey, progress: QueueProgress, now: int,
                        collected: _Pass) -> None:
        """A FIFO queue with messages in flight: blocked, unless the batch lapsed (deliver it again, in order) or
        this is a retried receive of the same attempt (deliver the same messages)."""
        entries = sorted(progress.inflight.items())
        same_attempt = bool(request.attempt_id) and request.attempt_id == progress.attempt_id
        if not same_attempt and any(not e.ready and e.expiry_ms > now for _, e in entries):
            return
        redelivered: list[tuple[int, Inflight]] = []
        for offset, entry in entries:
            record = self.store.look_record(entry.phys)
            if record is None:  # its file is gone
                progress.finish([offset])
                self.state.log_finish(key, [offset])
                continue
            attempt = entry.attempt if same_attempt and not entry.ready else entry.attempt + 1
            renewed = Inflight(entry.phys, now, request.invisible_ms, attempt, request.renew_client)
            if attempt > request.max_attempts:
                renewed.invisible_ms = 30_000
                collected.dead.append(_DeadLetter(key, offset, record, request.group, request.topic))
            else:
                collected.deliveries.append(self._delivery(request, record, renewed, offset, key[2], False))
            progress.inflight[offset] = renewed
            redelivered.append((offset, renewed))
        progress.attempt_id = request.attempt_id
        if redelivered:
            self.state.log_pop(key, progress.next_offset, progress.next_offset, redelivered, request.attempt_id)
        self._commit(key, progress)

    def _delivery(self, request: PopRequest, record: MessageRecord, entry: Inflight, offset: int, queue_id: int,
                  is_retry: bool) -> Delivery:
        middle = handle_middle(entry.pop_time_ms, entry.invisible_ms, TOPIC_KIND_RETRY if is_retry else
                               TOPIC_KIND_NORMAL, self.broker_name, queue_id)
        origin_queue, origin_offset = queue_id, offset
        if is_retry:
            props = record.properties
            origin_queue = as_int(props.get(PROP_ORIGIN_QUEUE_ID), queue_id)
            origin_offset = as_int(props.get(PROP_ORIGIN_QUEUE_OFFSET), offset)
        return Delivery(record, f"{offset}{middle}{offset} {record.physical_offset}", entry.invisible_ms,
                        entry.attempt, request.topic, origin_queue, origin_offset)

    def _commit(self, key: QueueKey, progress: QueueProgress) -> None:
        if progress.committed != progress.written:
            self.offsets.commit_offset(key[0], key[1], key[2], progress.committed)
            progress.written = progress.committed

    # ---- ack, change invisibility, dead letters ------------------------------------------------------------
    def _locate(self, group: str, topic: str, handle: ReceiptHandle) -> tuple[QueueKey, QueueProgress, Inflight]:
        """The delivery a handle names, still in flight; PopError otherwise (InvalidHandle for a handle that names
        another record)."""
        key = (group, pop_retry_topic(group, topic) if handle.retry else topic, handle.queue_id)
        progress, entry = self._in_flight(key, topic, handle.pop_time_ms, handle.invisible_ms, handle.queue_offset,
                                          handle.commit_log_offset, _now_ms())
        return key, progress, entry

    def _in_flight(self, key: QueueKey, topic: str, pop_time_ms: int, invisible_ms: int, offset: int, phys: int,
                   now: int) -> tuple[QueueProgress, Inflight]:
        """The in-flight delivery at ``offset`` of queue ``key`` that a handle (its fields) names; PopError
        otherwise. The handle is the caller's text: it counts only when its commit-log offset ``phys`` is that of
        the message the group popped from ``topic`` (or its retry topic) at that queue offset (else InvalidHandle),
        so a forged offset reaches no other topic's record."""
        progress = self.state.queues.get(key)
        entry = progress.inflight.get(offset) if progress is not None else None
        if entry is not None and entry.phys != phys:
            raise InvalidHandle(f"the receipt handle does not name the message of {topic} in flight at queue "
                                f"{key[2]} offset {offset}")
        expired = pop_time_ms + invisible_ms <= now
        if entry is None or entry.ready or entry.pop_time_ms + entry.invisible_ms <= now:
            if expired or entry is not None:
                raise PopError(KIND_HANDLE_EXPIRED, "receipt handle is expired")
            raise PopError(KIND_HANDLE_UNKNOWN, "the message of this receipt handle is not in flight (acked already?)")
        if expired and not (entry.renew_client and pop_time_ms == entry.first_pop_ms):
            # a lapsed handle, e.g. of a FIFO batch delivered again since; an auto-renewed delivery's first handle
            # stays good while the broker renews it
            raise PopError(KIND_HANDLE_EXPIRED, "receipt handle is expired")
        return progress, entry

    def _checked(self, group: str, topic: str, text: str, now: int) -> tuple[QueueKey, int, QueueProgress]:
        """(queue, offset, progress) of the in-flight delivery the handle ``text`` names; InvalidHandle or
        PopError otherwise (``_in_flight``)."""
        pop_time, invisible, kind, _broker, queue_id, offset, phys = parse_handle(text)
        key = (group, topic if kind == TOPIC_KIND_NORMAL else pop_retry_topic(group, topic), queue_id)
        progress, _entry = self._in_flight(key, topic, pop_time, invisible, offset, phys, now)
        return key, offset, progress

    def ack(self, group: str, topic: str, handle: ReceiptHandle) -> None:
        """Finish one delivery; acking a message acked already (an unexpired handle) is harmless."""
        problem = self.ack_many(group, topic, [handle.encode()])[0]
        if problem is not None:
            raise problem

    def ack_many(self, group: str, topic: str, handles: list[str]) -> list[Exception | None]:
        """Finish the deliveries named by ``handles`` (receipt-handle texts, one ack request): per handle None or
        the InvalidHandle/PopError refusing it. The usual handle, the one its delivery was handed out with and
        not lapsed, is recognised by its text (the entry keeps it: equality stands for every field); any other is
        parsed and checked by ``_in_flight``. The bookkeeping is per queue, not per message: one journal line and
        one offset commit per queue touched."""
        problems: list[Exception | None] = []
        finished: dict[QueueKey, tuple[QueueProgress, list[int]]] = {}
        queues = self.state.queues
        now = _now_ms()
        for text in handles:
            progress = None
            parts = text.split(" ", 8)
            if len(parts) == 9 and parts[4] == "0" and parts[6].isdecimal() and parts[7].isdecimal():
                key, offset = (group, topic, int(parts[6])), int(parts[7])
                progress = queues.get(key)
                entry = progress.inflight.get(offset) if progress is not None else None
                if entry is None or entry.handle != text or entry.ready or \
                        entry.pop_time_ms + entry.invisible_ms <= now:
                    progress = None
            if progress is None:
                try:
                    key, offset, progress = self._checked(group, topic, text, now)
                except PopError as exc:
                    problems.append(None if exc.kind == KIND_HANDLE_UNKNOWN else exc)
                    continue
                except InvalidHandle as exc:
                    problems.append(exc)
                    continue
            problems.append(None)
            done = finished.get(key)
            if done is None:
                finished[key] = (progress, [offset])
            else:
                done[1].append(offset)
        emptied = False
        for key, (progress, offsets) in finished.items():
            offsets = list(dict.fromkeys(offsets))  # a handle named twice in one request is one ack
            progress.finish(offsets)
            self.state.log_finish(key, offsets)
            self._commit(key, progress)
            emptied = emptied or not progress.inflight
        if finished:
            self.state.maybe_snapshot()
            if emptied:
                self._wake(topic)  # a FIFO queue may move on
        return problems

    def change_invisible(self, group: str, topic: str, handle: ReceiptHandle, invisible_ms: int) -> ReceiptHandle:
        """The delivery stays invisible `invisible_ms` from now; returns the handle that supersedes `handle`."""
        key, progress, entry = self._locate(group, topic, handle)
        now = _now_ms()
        entry.restart(now, max(0, invisible_ms))
        entry.renew_client = ""
        self.state.log_update(key, handle.queue_offset, entry)
        self._wake_revive.set()
        return handle.renewed(now, entry.invisible_ms)

    async def forward_to_dead_letter(self, group: str, topic: str, handle: ReceiptHandle) -> None:
        """Copy the delivery's message to ``%DLQ%<group>`` and finish it. The copy is of the record this group
        popped (``entry.phys``), and only when it is a record of ``topic`` or of its retry topic."""
        key, _progress, entry = self._locate(group, topic, handle)
        record = self.store.look_record(entry.phys)
        if record is None:
            raise PopError(KIND_NOT_FOUND, f"the message at commit-log offset {entry.phys} is gone")
        if record.topic != key[1]:
            raise InvalidHandle(f"the message at commit-log offset {entry.phys} is not of {key[1]}")
        await self._bury([_DeadLetter(key, handle.queue_offset, record, group, topic)])

    async def _bury(self, dead: list[_DeadLetter]) -> None:
        """Write each message to %DLQ%<group>, then finish it; a failed write leaves it in flight (retried)."""
        for item in dead:
            config = self.topics.create_dlq_topic(item.group)
            if config is None:
                raise PopError(KIND_INTERNAL, f"cannot create the dead-letter topic {dlq_topic(item.group)}")
            properties = dict(item.record.properties)
            properties.setdefault(PROP_RETRY_TOPIC, item.topic)
            properties[PROP_DLQ_ORIGIN_TOPIC] = item.topic
            properties[PROP_DLQ_ORIGIN_MESSAGE_ID] = properties.get("UNIQ_KEY") or item.record.offset_msg_id
            properties.setdefault(PROP_ORIGIN_MESSAGE_ID, item.record.offset_msg_id)
            message = message_from_record(item.record, config.topic_name, 0, properties, item.record.reconsume_times)
            stored = await self.store_message(message)
            if not stored.ok:
                raise PopError(KIND_INTERNAL, f"storing the dead letter failed: {stored.remark or stored.code}")
            progress = self.state.get(item.key)
            if progress is not None and item.offset in progress.inflight:
                progress.finish([item.offset])
                self.state.log_finish(item.key, [item.offset])
                self._commit(item.key, progress)
                if not progress.inflight:
                    self._wake(item.topic)  # a FIFO queue may move on
            log.info("message %s of %s went to %s", properties.get("UNIQ_KEY"), item.topic, config.topic_name)

    def release_client(self, client_id: str) -> None:
        """A client went away: its auto-renewed deliveries lapse now (and come back soon)."""
        now = _now_ms()
        for key, progress in self.state:
            for offset, entry in progress.inflight.items():
                if entry.renew_client == client_id:
                    entry.renew_client = ""
                    entry.restart(now, 0)
                    self.state.log_update(key, offset, entry)
        self._wake_revive.set()

    # ---- revive --------------------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake_revive.wait(), REVIVE_INTERVAL_S)
            except asyncio.TimeoutError:
                pass
            self._wake_revive.clear()
            try:
                await self.revive_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("bringing back lapsed POP deliveries failed; retrying")

    async def revive_once(self) -> int:
        """Renew auto-renewed deliveries of live clients; bring back the lapsed ones. Returns how many lapsed."""
        now = _now_ms()
        lapsed: list[tuple[QueueKey, int, Inflight]] = []
        for key, progress in self.state:
            for offset, entry in progress.inflight.items():
                if entry.ready:
                    continue
                if entry.renew_client and entry.expiry_ms - now <= self.renew.ahead_ms:
                    if now - entry.first_pop_ms < self.renew.max_ms and self.client_alive(entry.renew_client):
                        entry.restart(now, self.renew.invisible_ms)
                        self.state.log_update(key, offset, entry)
                        continue
                    entry.renew_client = ""
                if entry.expiry_ms <= now:
                    lapsed.append((key, offset, entry))
                    if len(lapsed) >= REVIVE_MAX_PER_PASS:
                        break
        for key, offset, entry in lapsed:
            await self._bring_back(key, offset, entry)
        return len(lapsed)

    async def _bring_back(self, key: QueueKey, offset: int, entry: Inflight) -> None:
        group, topic, queue_id = key
        progress = self.state.get(key)
        if progress is None or progress.inflight.get(offset) is not entry or entry.expiry_ms > _now_ms():
            return  # acked or changed meanwhile
        original = _original_topic(group, topic)
        group_config = self.groups.find(group)
        if group_config is not None and group_config.consume_message_orderly:
            entry.ready = True  # FIFO: delivered again in its place
            entry.handle = ""
            self.state.log_update(key, offset, entry)
            self._wake(original)
            return
        record = self.store.look_record(entry.phys)
        if record is not None:
            retry = pop_retry_topic(group, original)
            config = self.topics.create_topic_if_absent(retry, 1)
            if config is None:
                await self._not_requeueable(key, offset, entry, record, group, original, retry)
                return
            properties = dict(record.properties)
            properties.setdefault(PROP_RETRY_TOPIC, original)
            properties.setdefault(PROP_ORIGIN_MESSAGE_ID, record.offset_msg_id)
            if topic == original:
                properties[PROP_ORIGIN_QUEUE_ID] = str(queue_id)
                properties[PROP_ORIGIN_QUEUE_OFFSET] = str(offset)
            message = message_from_record(record, retry, 0, properties, record.reconsume_times + 1)
            stored = await self.store_message(message)
            if not stored.ok:
                self._warnings.warning(("pop-requeue", original), "cannot re-queue a lapsed delivery of %s to %s: %s",
                                       original, retry, stored.remark or stored.code)  # said once a minute
                return
            if progress.inflight.get(offset) is not entry:
                return  # acked while the copy was written: the copy is delivered once more (at least once)
        progress.finish([offset])
        self.state.log_finish(key, [offset])
        self._commit(key, progress)

    async def _not_requeueable(self, key: QueueKey, offset: int, entry: Inflight, record: MessageRecord, group: str,
                               original: str, retry: str) -> None:
        """The POP retry topic cannot be created (its name is too long: a group and topic accepted before such pairs
        were refused at receive). The message goes to the group's dead-letter topic, where it is kept and can be
        resent; if that fails too, it stays in flight and is tried again in a minute. Said at most once a minute."""
        self._warnings.error(("pop-retry", group, original),
                             "cannot create the POP retry topic %s... (%d characters, more than the topic max length): "
                             "lapsed deliveries of %s for group %s... go to its dead-letter topic", retry[:80],
                             len(retry), original, group[:80])
        try:
            await self._bury([_DeadLetter(key, offset, record, group, original)])
        except PopError as exc:
            entry.restart(_now_ms(), UNREQUEUEABLE_RETRY_MS)
            self.state.log_update(key, offset, entry)
            self._warnings.error(("pop-dlq", group, original),
                                 "a lapsed delivery of %s for group %s... stays in flight (tried again every %d s): %s",
                                 original, group[:80], UNREQUEUEABLE_RETRY_MS // 1000, exc)


def _original_topic(group: str, topic: str) -> str:
    prefix = f"%RETRY%{group}_"
    return topic[len(prefix):] if topic.startswith(prefix) else topic


def _records(buffers: list[Any]) -> list[MessageRecord]:
    """The records of one read's buffers, topics and hosts decoded once for all; an unreadable buffer is skipped."""
    records: list[MessageRecord] = []
    caches: tuple[dict, dict] = ({}, {})
    for buffer in buffers:
        try:
            records += list(iter_records(buffer, caches=caches))
        except RecordError as exc:
            log.error("skipping unreadable records while popping: %s", exc)
    return records


def _tag_filter(request: PopRequest) -> Callable[[int], bool] | None:
    return request.message_filter.tag_filter if request.message_filter is not None else None


def _record_filter(request: PopRequest) -> Callable[[Any], bool] | None:
    return request.message_filter.record_filter if request.message_filter is not None else None


def _now_ms() -> int:
    return int(time.time() * 1000)
