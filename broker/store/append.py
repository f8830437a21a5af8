"""The put path of the MessageStore: validate, append to the commit log, dispatch to the consume queue and the
index, notify arrival listeners — synchronously, so an acknowledged message is immediately pullable and queryable.

The public put API (what the send path, the transaction service and the timers use): ``append(msgs)`` (a batch of one
topic and queue, any layout) and ``append_one(msg)`` (the usual single message, without the per-batch lists) store and
dispatch at once and return the PutResult without waiting for a flush; ``put_messages`` / ``put_message`` do the same
and, on a SYNC_FLUSH store, await the flush; ``await_flush(result)`` is that wait alone (several appends, one
wait). The single path falls back to ``append([m])`` whenever anything unusual applies; both write the same bytes.
``MessageAppender`` is a mixin of MessageStore: it works on the store's own state (listed below), and asks the commit
log and the consume queue, through their public methods, whether their current file has room.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from broker.log_limit import RateLimitedLog  # a leaf module (stdlib only), not a higher floor
from protocol.properties import decode_properties

from .recovery import SCHEDULE_TOPIC, schedule_tags_code
from .commit_log import CommitLog
from .consume_queue import ConsumeQueue
from .flush import FlushService
from .index import IndexService
from .mapped_file import StoreDiskFullError
from .types import MessageToStore, PutResult, PutStatus, StoreConfig

log = logging.getLogger(__name__)
# Put errors repeat for every message while the cause lasts (disk full, unwritable directory): one line per
# cause every 10 s, counting the rest.
_put_errors = RateLimitedLog(log)

ArrivalListener = Callable[[str, int, int, "int | list[int]"], None]

_MAX_PROPERTIES = 32767
_MAX_TOPIC_V1 = 127
_MAX_TOPIC = 32767
_TRAN_MASK = 0xC
_DISPATCHED_TRAN_TYPES = (0x0, 0x8)  # NOT and COMMIT records go to their consume queue; PREPARED/ROLLBACK do not
_NO_CQ_TYPES = (0x4, 0xC)  # prepared / rollback: not dispatched to a ConsumeQueue
_ROLLBACK = 0xC
_NO_QUEUES: dict = {}


class MessageAppender:
    """put_message / put_messages for MessageStore (see the module docstring)."""

    # State owned by MessageStore.__init__ / load().
    config: StoreConfig
    commit_log: CommitLog
    consume_queues: dict[str, dict[int, ConsumeQueue]]
    index: IndexService | None
    flush_service: FlushService | None
    delay_levels_ms: list[int]
    stats: dict[str, int]
    last_store_timestamp: int
    _clock_ms: Callable[[], int] | None
    _listeners: list[ArrivalListener]
    _topic_listeners: dict[str, list[ArrivalListener]]
    _topic_bytes: dict[str, bytes]
    _loaded: bool
    _shutdown: bool
    _disk_check_at: int
    _disk_refuse_remark: str | None
    get_or_create_consume_queue: Callable[[str, int], ConsumeQueue]
    _disk_refusal: Callable[[int], str | None]  # a remark while puts must be refused (disk full)

    # ------------------------------------------------------------------ API
    def add_arrival_listener(self, cb: ArrivalListener, topic: str | None = None) -> None:
        """``cb(topic, queue_id, max_offset_after, tags)`` once per put after dispatch; ``tags`` is the
        tagsCode (int) for a single message and the list of tagsCodes for a batch. With ``topic``: only puts to that
        topic (the timer and the schedule service wait on their own topics: not a call for every put)."""
        if topic is None:
            self._listeners.append(cb)
        else:
            self._topic_listeners.setdefault(topic, []).append(cb)

    async def put_messages(self, msgs: list[MessageToStore]) -> PutResult:
        """Store a batch (one topic/queue, consecutive queue offsets)."""
        result = self.append(msgs)
        if result.status is PutStatus.PUT_OK and self.config.sync_flush:
            await self._await_sync_flush(result)
        return result

    async def put_message(self, msg: MessageToStore) -> PutResult:
        result = self.append_one(msg)
        if result.status is PutStatus.PUT_OK and self.config.sync_flush:
            await self._await_sync_flush(result)
        return result

    async def await_flush(self, result: PutResult) -> None:
        """SYNC_FLUSH: wait until what ``result`` stored, and everything appended before it, is on disk (its status
        becomes FLUSH_DISK_TIMEOUT when that takes longer than syncFlushTimeout); nothing to wait for with
        ASYNC_FLUSH or a failed put. For callers that ``append`` several times and wait once, for the last."""
        if result.status is PutStatus.PUT_OK and self.config.sync_flush:
            await self._await_sync_flush(result)

    async def _await_sync_flush(self, result: PutResult) -> None:
        self.stats["flush_waits"] += 1
        end = result.physical_offsets[-1] + 1
        ok = await self.flush_service.wait_flushed(end, self.config.sync_flush_timeout_ms / 1000)
        if not ok:
            result.status = PutStatus.FLUSH_DISK_TIMEOUT
            result.remark = "flush to disk did not complete within %d ms" % self.config.sync_flush_timeout_ms

    # ------------------------------------------------------------------ shared steps
    def _fail(self, status: PutStatus, remark: str) -> PutResult:
        self.stats["put_failures"] += 1
        return PutResult(status, remark=remark)

    def _notify_arrival(self, topic: str, queue_id: int, max_offset_after: int, tags: int | list[int]) -> None:
        listeners = self._listeners
        own = self._topic_listeners.get(topic)
        if own is not None:
            listeners = listeners + own
        for cb in listeners:
            try:
                cb(topic, queue_id, max_offset_after, tags)
            except Exception:  # noqa: BLE001 - a listener must not fail the put
                log.exception("message arrival listener failed")

    def _schedule_tags(self, m: MessageToStore, store_ts: int) -> int:
        return schedule_tags_code(decode_properties(m.properties_text()), m.queue_id, store_ts,
                                  self.delay_levels_ms)

    @staticmethod
    def _index_general(index: IndexService, topic: str, msgs: list[MessageToStore], phys_list: list[int],
                       now: int) -> None:
        keys: list[str] = []
        offs: list[int] = []
        for m, phys in zip(msgs, phys_list):
            if m.uniq_key:
                keys.append(m.uniq_key)
                offs.append(phys)
            if m.keys:
                for key in m.keys.split(" "):
                    if key:
                        keys.append(key)
                        offs.append(phys)
        if keys:
            index.put(index.hasher.hash_many(topic, keys), offs, now)

    # ------------------------------------------------------------------ general path
    def append(self, msgs: list[MessageToStore]) -> PutResult:
        """Append + dispatch synchronously, without waiting for a flush. All messages go to msgs[0]'s topic/queue,
        with consecutive queue offsets."""
        if not self._loaded or self._shutdown:
            return self._fail(PutStatus.SERVICE_NOT_AVAILABLE, "message store is not running")
        if self.config.replica:
            return self._fail(PutStatus.SERVICE_NOT_AVAILABLE, "service not available now: messages are put to "
                              "the slave (a slave's log is written by its master only)")
        if not msgs:
            return self._fail(PutStatus.MESSAGE_ILLEGAL, "no message to store")
        now = time.time_ns() // 1_000_000 if self._clock_ms is None else self._clock_ms()
        refusal = self._disk_refusal(now)
        if refusal is not None:
            return self._fail(PutStatus.DISK_FULL, refusal)
        first = msgs[0]
        topic = first.topic
        queue_id = first.queue_id
        topic_bytes = self._topic_bytes.get(topic)
        if topic_bytes is None:
            topic_bytes = topic.encode("utf-8")
            if not topic_bytes or len(topic_bytes) > _MAX_TOPIC:
                return self._fail(PutStatus.MESSAGE_ILLEGAL, "topic length %d is invalid" % len(topic_bytes))
            self._topic_bytes[topic] = topic_bytes
        props_list = [m.properties.encode("utf-8") if m.properties_bytes is None else m.properties_bytes
                      for m in msgs]
        if max(map(len, props_list)) > _MAX_PROPERTIES:
            return self._fail(PutStatus.PROPERTIES_SIZE_EXCEEDED,
                              "message properties are longer than %d bytes" % _MAX_PROPERTIES)
        body_lens = [len(m.body) for m in msgs]
        if max(body_lens) > self.config.max_message_size:
            return self._fail(PutStatus.MESSAGE_ILLEGAL, "message body size %d exceeds maxMessageSize %d"
                              % (max(body_lens), self.config.max_message_size))
        store_host_v6 = len(self.config.store_host) == 20
        born_v4 = all(len(m.born_host) == 8 for m in msgs)
        fast = born_v4 and not store_host_v6 and len(topic_bytes) <= _MAX_TOPIC_V1
        const = (91 if len(topic_bytes) <= _MAX_TOPIC_V1 else 92) + len(topic_bytes) + (12 if store_host_v6 else 0)
        if born_v4:
            sizes = [const + b + len(p) for b, p in zip(body_lens, props_list)]
        else:
            sizes = [const + b + len(p) + (12 if len(m.born_host) == 20 else 0)
                     for b, p, m in zip(body_lens, props_list, msgs)]
            if any(len(m.born_host) not in (8, 20) for m in msgs):
                return self._fail(PutStatus.MESSAGE_ILLEGAL, "born host must be a packed IPv4 or IPv6 address")
        if max(sizes) + 8 > self.commit_log.file_size:
            return self._fail(PutStatus.MESSAGE_ILLEGAL, "message of %d bytes does not fit a commit log file"
                              % max(sizes))
        total = sum(sizes)
        tran = first.sys_flag & _TRAN_MASK
        dispatch_cq = tran not in _NO_CQ_TYPES
        cq = self.get_or_create_consume_queue(topic, queue_id) if dispatch_cq else None
        first_qoff = cq.max_offset if cq is not None else 0
        try:
            if cq is not None:
                cq.reserve(len(msgs))
            phys_list = self.commit_log.append_batch(
                msgs, props_list, sizes, total, topic, topic_bytes, queue_id, first_qoff,
                1 if dispatch_cq else 0, now, fast)
        except StoreDiskFullError as exc:
            _put_errors.error("disk-full", "put refused: %s", exc)
            return self._fail(PutStatus.DISK_FULL, "service not available now: the broker's disk is full, "
                                                   "cannot create a store file (%s)" % exc.strerror)
        except OSError as exc:
            _put_errors.error("create-file", "put failed: cannot create a store file: %s", exc)
            return self._fail(PutStatus.UNKNOWN_ERROR, "create mapped file failed: %s" % exc)
        self.last_store_timestamp = now
        count = len(msgs)
        # -- dispatch: consume queue
        if cq is not None:  # files were reserved above: this cannot fail on a full disk
            if count == 1:
                tags = first.tags_code if topic != SCHEDULE_TOPIC else self._schedule_tags(first, now)
                cq.append(phys_list[0], sizes[0], tags)
            else:
                tags = [m.tags_code for m in msgs]
                if topic == SCHEDULE_TOPIC:
                    tags = [self._schedule_tags(m, now) for m in msgs]
                cq.append_many(phys_list, sizes, tags)
        else:
            tags = first.tags_code if count == 1 else [m.tags_code for m in msgs]
        # -- dispatch: index
        index = self.index
        if index is not None and tran != _ROLLBACK:
            uniq_keys = [m.uniq_key for m in msgs]
            try:
                if all(uniq_keys) and not any([m.keys for m in msgs]):  # the usual shape: one key each
                    index.put(index.hasher.hash_many(topic, uniq_keys), phys_list, now)
                else:
                    self._index_general(index, topic, msgs, phys_list, now)
            except OSError as exc:
                _put_errors.error("index-file", "index file creation failed: %s (messages stay pullable)", exc)
        stats = self.stats
        stats["put_messages"] += count
        stats["put_bytes"] += total
        stats["put_appends"] += 1
        if cq is not None:
            self._notify_arrival(topic, queue_id, cq.max_offset, tags)
        return PutResult(PutStatus.PUT_OK, phys_list[0], first_qoff, count, total, now, None, phys_list,
                         self.config.store_host)

    # ------------------------------------------------------------------ single-message fast path
    def append_one(self, m: MessageToStore) -> PutResult:
        """One message: the same bytes and effects as append([m]) without the per-batch lists.

        Taken when nothing unusual applies (IPv4 hosts, topic <= 127 bytes already seen, a transaction type that is
        dispatched (NOT or COMMIT), no KEYS, room in the current commit-log and consume-queue files); otherwise
        append. This runs once per message a producer sends one at a time (a gRPC SendMessage, a remoting send that
        came alone): each Python call in it costs ~1 µs live (caches are cold between two requests), so the commit
        log checks its own room and the index file writes its entry and header in one call."""
        topic = m.topic
        topic_bytes = self._topic_bytes.get(topic)
        cq = self.consume_queues.get(topic, _NO_QUEUES).get(m.queue_id)
        if (topic_bytes is None or cq is None or not self._loaded or self._shutdown or self.config.replica
                or m.sys_flag & _TRAN_MASK not in _DISPATCHED_TRAN_TYPES
                or len(m.born_host) != 8 or len(self.config.store_host) != 8 or len(topic_bytes) > _MAX_TOPIC_V1
                or m.keys or topic == SCHEDULE_TOPIC or not cq.has_room_for_one()):
            return self.append([m])
        props = m.properties.encode("utf-8") if m.properties_bytes is None else m.properties_bytes
        body = m.body
        size = 91 + len(topic_bytes) + len(body) + len(props)
        cl = self.commit_log
        if len(props) > _MAX_PROPERTIES or len(body) > self.config.max_message_size:
            return self.append([m])
        now = time.time_ns() // 1_000_000 if self._clock_ms is None else self._clock_ms()
        if now >= self._disk_check_at or self._disk_refuse_remark is not None:
            refusal = self._disk_refusal(now)
            if refusal is not None:
                return self._fail(PutStatus.DISK_FULL, refusal)
        queue_id = m.queue_id
        qoff = cq.max_offset
        try:
            phys = cl.append_one(m, props, size, topic_bytes, queue_id, qoff, now)
        except StoreDiskFullError as exc:  # raised before anything was written
            _put_errors.error("disk-full", "put refused: %s", exc)
            return self._fail(PutStatus.DISK_FULL, "service not available now: the broker's disk is full, "
                                                   "cannot allocate store file space (%s)" % exc.strerror)
        if phys < 0:  # the current commit-log file is too short for it: the general path rolls to the next
            return self.append([m])
        self.last_store_timestamp = now
        tags = m.tags_code
        cq.append(phys, size, tags)
        index = self.index
        if index is not None and m.uniq_key:
            try:
                index.put_one(index.hasher(topic, m.uniq_key), phys, now)
            except OSError as exc:
                _put_errors.error("index-file", "index file creation failed: %s (messages stay pullable)", exc)
        stats = self.stats
        stats["put_messages"] += 1
        stats["put_bytes"] += size
        stats["put_appends"] += 1
        self._notify_arrival(topic, queue_id, cq.max_offset, tags)
        return PutResult(PutStatus.PUT_OK, phys, qoff, 1, size, now, None, [phys], self.config.store_host)
