"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) — reference §4.3.

Validation is synchronous; the handler returns either an error response or the coroutine that
appends to the store. The remoting server starts that coroutine eagerly, so an ASYNC_FLUSH send
completes without creating a task.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

from broker.descriptors import DescriptorsShortError
from broker.managers.topic_config import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    TopicConfig,
    validate_topic,
)
from broker.schedule.delay import delay_level_of, to_schedule_topic
from broker.timer.timed import (PROP_DELAY_MS as PROP_TIMER_DELAY_MS, PROP_DELAY_SEC as PROP_TIMER_DELAY_SEC,
                                PROP_DELIVER_MS as PROP_TIMER_DELIVER_MS, TimerPropertyError, timer_deliver_ms,
                                to_timer_topic)
from broker.store.types import MessageToStore, PutResult, PutStatus
from protocol.codes import PERM_WRITE, RequestCode, ResponseCode
from protocol.command import RemotingCommand, ResponseTemplate
from protocol.hashing import tags_code
from protocol.headers import SendMessageRequestHeader
from protocol.ids import UniqKeyGenerator, pack_host
from protocol.requests import read_request
from protocol.message import MULTI_TAGS_FLAG, TRANSACTION_TYPE_MASK, RecordError, iter_batch_entries
from protocol.properties import (
    MAX_PROPERTIES_BYTES,
    decode_properties,
    encode_properties,
    match_producer_layout,
)
from broker.processors.base import BrokerProcessor
from broker.processors.send_limits import SendLimits
from broker.transaction.half import is_half_send, to_half

if TYPE_CHECKING:
    from broker.broker import Broker

PROP_UNIQ_KEY = "UNIQ_KEY"
PROP_TAGS = "TAGS"
PROP_KEYS = "KEYS"
PROP_CLUSTER = "CLUSTER"
PROP_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
DEFAULT_MAX_RECONSUME_TIMES = 16

# PutStatus name -> (response code, remark prefix)
_PUT_STATUS_CODES: dict[str, int] = {
    "PUT_OK": ResponseCode.SUCCESS,
    "FLUSH_DISK_TIMEOUT": ResponseCode.FLUSH_DISK_TIMEOUT,
    "FLUSH_SLAVE_TIMEOUT": ResponseCode.FLUSH_SLAVE_TIMEOUT,
    "SLAVE_NOT_AVAILABLE": ResponseCode.SLAVE_NOT_AVAILABLE,
    "MESSAGE_ILLEGAL": ResponseCode.MESSAGE_ILLEGAL,
    "PROPERTIES_SIZE_EXCEEDED": ResponseCode.MESSAGE_ILLEGAL,
    "SERVICE_NOT_AVAILABLE": ResponseCode.SERVICE_NOT_AVAILABLE,
    "DISK_FULL": ResponseCode.SERVICE_NOT_AVAILABLE,
    "OS_PAGE_CACHE_BUSY": ResponseCode.SYSTEM_BUSY,
    "UNKNOWN_ERROR": ResponseCode.SYSTEM_ERROR,
}


_DEFERRED = object()  # send_run: this request's message waits for its queue's batch append


class _BatchEntryRejected(ValueError):
    """One batch entry breaks a limit; the whole batch is refused with MESSAGE_ILLEGAL."""


_SUCCESS_CODES = frozenset({ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT,
                            ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE})


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


class SendProcessor(BrokerProcessor):
    """Validates sends, builds MessageToStore objects and answers with the put result."""

    def __init__(self, broker: "Broker") -> None:
        super().__init__(broker)
        cfg = broker.config
        self.store_host: bytes = broker.store_host
        self._region = cfg.region_id
        self._trace = "true" if cfg.trace_on else "false"
        self._cluster_suffix = f"{PROP_CLUSTER}\x01{cfg.broker_cluster_name}\x02"
        self._cluster_name = cfg.broker_cluster_name
        self._max_body = cfg.max_message_size
        self._uniq = UniqKeyGenerator(cfg.broker_ip1 or "127.0.0.1")
        self._random = random.Random()
        self._valid_topics: set[str] = set()  # names that passed validate_topic and the not-allowed list
        self._sync_flush = bool(self.store.config.sync_flush)
        self._sync_master = False
        self.refresh_role()
        self._slave_timeout_s = (cfg.slave_timeout if cfg.slave_timeout and cfg.slave_timeout > 0
                                 else cfg.sync_flush_timeout) / 1000
        self._tag_codes: dict[bytes | None, int] = {None: 0}  # TAGS bytes -> tagsCode (batch path)
        self._ok_templates: dict[tuple[int, bool], ResponseTemplate] = {}  # (serialize type, with transactionId)
        self._limits = SendLimits(cfg)  # issue 27: auto-created topics per client, properties per message

    def refresh_role(self) -> None:
        """Read the role again (controller mode changes it at run time). A controller-mode master waits for acks
        only when allAckInSyncStateSet, inSyncReplicas > 1 or minInSyncReplicas > 1 ask for it (controller.md §8)."""
        cfg = self.config
        if cfg.enable_controller_mode:
            self._sync_master = cfg.broker_role != "SLAVE" and (
                cfg.all_ack_in_sync_state_set or cfg.in_sync_replicas > 1 or cfg.min_in_sync_replicas > 1)
        else:
            self._sync_master = cfg.broker_role == "SYNC_MASTER"

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.SEND_MESSAGE: self.send_message,
            RequestCode.SEND_MESSAGE_V2: self.send_message_v2,
            RequestCode.SEND_BATCH_MESSAGE: self.send_batch_message,
        }

    def run_handlers(self) -> dict[int, Any]:
        """Pipelined single sends read together are stored as one batch per queue (see send_run)."""
        return {
            RequestCode.SEND_MESSAGE: self.send_run,
            RequestCode.SEND_MESSAGE_V2: self.send_run,
        }

    # ---- helpers ----------------------------------------------------------------------------
    def _error(self, cmd: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        return cmd.make_response(code, remark, {"MSG_REGION": self._region, "TRACE_ON": self._trace})

    def _born_host(self, channel: Any) -> bytes:
        attrs = channel.attrs
        packed = attrs.get("born_host")
        if packed is None:
            try:
                packed = pack_host(channel.remote_host, channel.remote_port)
            except ValueError:
                packed = pack_host("127.0.0.1", 0)
            attrs["born_host"] = packed
        return packed

    def _check_topic(self, channel: Any, cmd: RemotingCommand, header: SendMessageRequestHeader
                     ) -> tuple[TopicConfig | None, RemotingCommand | None]:
        """Checks of §4.3.2 step 2; returns the topic config or an error response."""
        topic = header.topic
        if header.producer_group not in self._valid_groups:
            problem = self.group_problem(header.producer_group)
            if problem is not None:
                return None, self._error(cmd, ResponseCode.INVALID_PARAMETER, f"producerGroup: {problem}")
        if not self.config.broker_permission & PERM_WRITE:
            return None, self._error(cmd, ResponseCode.NO_PERMISSION,
                                     f"the broker[{self.config.broker_ip1}] sending message is forbidden")
        if topic not in self._valid_topics:
            problem = validate_topic(topic)
            if problem is not None:
                return None, self._error(cmd, ResponseCode.INVALID_PARAMETER, problem)
            if self.topics.is_not_allowed_send_topic(topic):
                return None, self._error(cmd, ResponseCode.NO_PERMISSION,
                                         f"Sending message to topic[{topic}] is forbidden.")
            if len(self._valid_topics) > 100_000:
                self._valid_topics.clear()
            self._valid_topics.add(topic)
        topic_config = self.topics.get(topic)
        if topic_config is None:
            try:
                topic_config, refusal = self._limits.create_topic(self.topics, channel, topic, header.default_topic,
                                                                  header.default_topic_queue_nums or 4)
            except DescriptorsShortError as exc:  # fileDescriptorReserve reached: a transient refusal
                return None, self._error(cmd, ResponseCode.SYSTEM_BUSY, str(exc))
            if refusal is not None:
                return None, self._error(cmd, ResponseCode.SYSTEM_BUSY, refusal)
            if topic_config is None:
                return None, self._error(
                    cmd, ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{topic}] not exist, apply first please! (defaultTopic {header.default_topic!r} "
                    f"cannot be used for auto-creation)")
        if not topic_config.perm & PERM_WRITE:
            return None, self._error(cmd, ResponseCode.NO_PERMISSION,
                                     f"the topic[{topic}] sending message is forbidden")
        queue_id = header.queue_id
        queue_limit = max(topic_config.read_queue_nums, topic_config.write_queue_nums)
        if queue_id >= queue_limit:
            return None, self._error(
                cmd, ResponseCode.INVALID_PARAMETER,
                f"request queueId[{queue_id}] is illegal, topic[{topic}] has {queue_limit} queues")
        return topic_config, None

    def _pick_queue(self, header: SendMessageRequestHeader, topic_config: TopicConfig) -> int:
        if header.queue_id < 0:
            return self._random.randrange(99_999_999) % max(1, topic_config.write_queue_nums)
        return header.queue_id

    def _response(self, cmd: RemotingCommand, result: PutResult, queue_id: int, transaction_id: str | None,
                  batch: bool) -> RemotingCommand | bytes:
        status = result.status.name
        code = _PUT_STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)
        if code not in _SUCCESS_CODES:
            remark = result.remark or f"put message failed: {status}"
            return self._error(cmd, code, remark)
        if code == ResponseCode.SUCCESS:
            return self._success_frame(cmd, result, queue_id, transaction_id, batch)
        msg_ids = result.msg_ids
        ext = {
            "msgId": ",".join(msg_ids) if batch else (msg_ids[0] if msg_ids else ""),
            "queueId": str(queue_id),
            "queueOffset": str(result.queue_offset),
            "MSG_REGION": self._region,
            "TRACE_ON": self._trace,
        }
        if transaction_id:
            ext["transactionId"] = transaction_id
        return cmd.make_response(code, None if code == ResponseCode.SUCCESS else status, ext)

    def _success_frame(self, cmd: RemotingCommand, result: PutResult, queue_id: int, transaction_id: str | None,
                       batch: bool) -> bytes:
        """The PUT_OK answer as a pre-encoded frame: the same bytes _response's general branch would produce."""
        msg_ids = result.msg_ids
        msg_id = ",".join(msg_ids) if batch else (msg_ids[0] if msg_ids else "")
        return self._ok_frame(cmd, msg_id, queue_id, result.queue_offset, transaction_id)

    def _ok_frame(self, cmd: RemotingCommand, msg_id: str, queue_id: int, queue_offset: int,
                  transaction_id: str | None) -> bytes:
        key = (cmd.serialize_type, bool(transaction_id))
        template = self._ok_templates.get(key)
        if template is None:
            items = [("msgId", None), ("queueId", None), ("queueOffset", None), ("MSG_REGION", self._region),
                     ("TRACE_ON", self._trace)]
            if transaction_id:
                items.append(("transactionId", None))
            template = self._ok_templates[key] = ResponseTemplate(cmd.serialize_type, ResponseCode.SUCCESS, items)
        if transaction_id:
            return template.encode(cmd.opaque, msg_id, str(queue_id), str(queue_offset), transaction_id)
        return template.encode(cmd.opaque, msg_id, str(queue_id), str(queue_offset))

    # ---- single message ---------------------------------------------------------------------
    def send_message(self, channel: Any, cmd: RemotingCommand):
        return self._send_one(channel, cmd, read_request(cmd))

    def send_message_v2(self, channel: Any, cmd: RemotingCommand):
        return self._send_one(channel, cmd, read_request(cmd))

    def send_run(self, channel: Any, cmds: list[RemotingCommand]) -> list[Any]:
        """Single sends read together from one connection: each is checked and answered on its own, but the plain
        ASYNC_FLUSH ones are stored with one append per queue. Returns one result per request, as the single
        handlers would (an exception object where one raised). SYNC_FLUSH / SYNC_MASTER brokers take the
        single path: their acknowledgement waits differ per message."""
        results: list[Any] = []
        if self._sync_flush or self._sync_master:
            deferred = None
        else:
            deferred = []
        for cmd in cmds:
            try:
                header = read_request(cmd)
                results.append(self._send_one(channel, cmd, header, deferred))
            except Exception as exc:  # noqa: BLE001 - answered per request by the server
                results.append(exc)
        if deferred:
            answers = self._store_deferred(deferred)
            pending = iter(answers)
            results = [next(pending) if result is _DEFERRED else result for result in results]
        return results

    def _store_deferred(self, deferred: list[tuple[RemotingCommand, MessageToStore, str]]) -> list[Any]:
        """One append per (topic, queue), answers in request order. A batch the store refuses is retried message
        by message, so each request gets exactly the answer it would have had alone."""
        store = self.store
        answers: list[Any] = [None] * len(deferred)
        groups: dict[tuple[str, int], list[int]] = {}
        for k, (_cmd, message, _uniq) in enumerate(deferred):
            key = (message.topic, message.queue_id)
            members = groups.get(key)
            if members is None:
                groups[key] = [k]
            else:
                members.append(k)
        for members in groups.values():
            if len(members) > 1:
                result = store._append([deferred[k][1] for k in members])
                if result.status is PutStatus.PUT_OK:
                    msg_ids = result.msg_ids
                    first = result.queue_offset
                    ok_frame = self._ok_frame
                    for n, k in enumerate(members):
                        cmd, message, uniq_key = deferred[k]
                        answers[k] = ok_frame(cmd, msg_ids[n], message.queue_id, first + n, uniq_key)
                    continue
            for k in members:
                cmd, message, uniq_key = deferred[k]
                answers[k] = self._response(cmd, store._append_one(message), message.queue_id, uniq_key, batch=False)
        return answers

    def _send_one(self, channel: Any, cmd: RemotingCommand, header: SendMessageRequestHeader,
                  deferred: list | None = None):
        """Check and build the message, then store it; with `deferred` (a run, ASYNC_FLUSH), a plain message is
        added there and _DEFERRED returned: send_run stores it with the others of its queue."""
        props_text = header.properties or ""
        if len(props_text) > self._limits.check_from:  # before anything is decoded or a topic created
            refusal = self._limits.properties_refusal(props_text)
            if refusal is not None:
                return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL, refusal)
        topic_config, error = self._check_topic(channel, cmd, header)
        if error is not None:
            return error
        topic = header.topic
        body = cmd.body
        if len(body) > self._max_body:
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL,
                               f"the message body size {len(body)} exceeds the maximum {self._max_body}")
        props = decode_properties(props_text)
        queue_id = self._pick_queue(header, topic_config)
        reconsume_times = header.reconsume_times or 0
        rebuild = False

        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
            group_config = self.groups.find_or_create(group)
            if group_config is None:
                return self._error(cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                   f"subscription group not exist, {group}")
            max_times = header.max_reconsume_times
            if max_times is None or cmd.version < 121:
                max_times = group_config.retry_max_times
            if max_times is None or max_times < 0:
                max_times = DEFAULT_MAX_RECONSUME_TIMES
            if reconsume_times > max_times:
                dlq = self.topics.create_dlq_topic(group)
                if dlq is None:
                    return self._error(cmd, ResponseCode.SYSTEM_ERROR, f"topic[{DLQ_GROUP_TOPIC_PREFIX}{group}] not exist")
                topic = dlq.topic_name
                queue_id = 0
                if props.pop("DELAY", None) is not None:
                    rebuild = True

        # Stored properties = request properties + UNIQ_KEY (if missing) + CLUSTER; appended to the
        # original text when possible instead of re-encoding the whole map.
        suffix = ""
        uniq_key = props.get(PROP_UNIQ_KEY)
        if not uniq_key:
            uniq_key = self._uniq.next()
            props[PROP_UNIQ_KEY] = uniq_key
            suffix = f"{PROP_UNIQ_KEY}\x01{uniq_key}\x02"
        cluster = props.get(PROP_CLUSTER)
        if cluster != self._cluster_name:
            if cluster is not None:
                rebuild = True
            else:
                suffix += self._cluster_suffix
            props[PROP_CLUSTER] = self._cluster_name
        if rebuild:
            props_text = encode_properties(props)
        elif suffix:
            if props_text and not props_text.endswith("\x02"):
                props_text += "\x02"
            props_text += suffix
        if _utf8_len(props_text) > MAX_PROPERTIES_BYTES:
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL,
                               f"the message properties size {_utf8_len(props_text)} exceeds {MAX_PROPERTIES_BYTES}")

        sys_flag = header.sys_flag or 0
        half = "TRAN_MSG" in props and is_half_send(props, reconsume_times)
        if sys_flag & TRANSACTION_TYPE_MASK and not half:
            sys_flag &= ~TRANSACTION_TYPE_MASK  # a stray PREPARED bit must not hide a plain message (pitfall 1)
        if topic_config.topic_filter_type == "MULTI_TAG":
            sys_flag |= MULTI_TAGS_FLAG
        message = MessageToStore(
            topic=topic,
            queue_id=queue_id,
            flag=header.flag or 0,
            sys_flag=sys_flag,
            born_timestamp=header.born_timestamp or 0,
            born_host=self._born_host(channel),
            reconsume_times=reconsume_times,
            body=body,
            properties=props_text,
            tags_code=tags_code(props.get(PROP_TAGS)),
            keys=props.get(PROP_KEYS),
            uniq_key=uniq_key,
        )
        if half:  # transactions.md §2: stored in the half queue, invisible until END_TRANSACTION commits it
            if self.config.reject_transaction_message:
                return self._error(cmd, ResponseCode.NO_PERMISSION,
                                   f"the broker[{self.config.broker_ip1}] sending transaction message is forbidden")
            committed_text = to_half(message, props)
            message.keys = message.uniq_key = None  # not indexed: the committed message will be
        elif "DELAY" in props:  # §4.3.2 step 6: delayed messages wait in SCHEDULE_TOPIC_XXXX
            to_schedule_topic(message, props, self.broker.schedule_service.max_level)
        elif PROP_TIMER_DELIVER_MS in props or PROP_TIMER_DELAY_SEC in props or PROP_TIMER_DELAY_MS in props:
            refusal = self._to_timer(message, props)  # 5.x timed messages wait in rmq_sys_wheel_timer
            if refusal is not None:
                return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL, refusal)
        if half:
            return self._put_half(cmd, message, props, committed_text, queue_id, uniq_key)
        if self._sync_master:
            return self._put_replicated(cmd, message, queue_id, uniq_key)
        if deferred is not None:
            deferred.append((cmd, message, uniq_key))
            return _DEFERRED
        if not self._sync_flush:  # ASYNC_FLUSH: nothing to await, so answer without creating a coroutine
            return self._response(cmd, self.store._append_one(message), queue_id, uniq_key, batch=False)
        return self._put_one(cmd, message, uniq_key)

    def _to_timer(self, message: MessageToStore, props: dict[str, str]) -> str | None:
        """Redirect a timed message whose time is ahead to the timer topic; the refusal text when its timer
        properties are malformed or too far ahead (timerMaxDelaySec)."""
        now = int(time.time() * 1000)
        try:
            deliver_ms = timer_deliver_ms(props, now)
        except TimerPropertyError as exc:
            return str(exc)
        if deliver_ms is None or deliver_ms <= now:
            return None  # due already: stored as a plain message
        limit_s = self.config.timer_max_delay_sec
        if deliver_ms - now > limit_s * 1000:
            return (f"the delivery time is {(deliver_ms - now) // 1000} s ahead, more than timerMaxDelaySec "
                    f"({limit_s} s)")
        to_timer_topic(message, props, deliver_ms)
        return None

    async def _await_slave(self, result: PutResult) -> None:
        """SYNC_MASTER: a stored message is acknowledged once a slave has it (replication.md §4)."""
        if result.status is not PutStatus.PUT_OK and result.status is not PutStatus.FLUSH_DISK_TIMEOUT:
            return
        if self.config.enable_controller_mode and self.store.config.replica:
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT  # stored as master, stepped down before its ack (a sync
            return  # flush was awaited): the new master may not have it, so it is not acknowledged
        if not self._sync_master:
            return
        ha = self.broker.ha_master
        end = self.store.commit_log.max_offset  # at or past this message's end: never acknowledged too early
        if self.config.enable_controller_mode:  # controller.md §8: no SLAVE_NOT_AVAILABLE in this mode
            cfg = self.config
            if ha is None:
                return
            if cfg.all_ack_in_sync_state_set:
                ok = await ha.wait_for_in_sync(end, self._slave_timeout_s)
            elif cfg.in_sync_replicas > 1:
                ok = await ha.wait_for_acks(end, cfg.in_sync_replicas - 1, self._slave_timeout_s)
            else:
                ok = True
            if not ok:
                result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            return
        if ha is None or not ha.slave_available(end):
            result.status = PutStatus.SLAVE_NOT_AVAILABLE
        elif not await ha.wait_for_slave(end, self._slave_timeout_s):
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT

    def in_sync_refusal(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """Controller mode: fewer in-sync replicas than minInSyncReplicas -> not stored (controller.md §8)."""
        cfg = self.config
        ha = self.broker.ha_master
        if cfg.enable_controller_mode and cfg.min_in_sync_replicas > 1 and ha is not None \
                and ha.in_sync_count() < cfg.min_in_sync_replicas:
            return self._error(cmd, ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough")
        return None

    async def _put_replicated(self, cmd: RemotingCommand, message: MessageToStore, queue_id: int,
                              uniq_key: str) -> RemotingCommand:
        refusal = self.in_sync_refusal(cmd)
        if refusal is not None:
            return refusal
        result = await self.store.put_message(message)
        await self._await_slave(result)
        return self._response(cmd, result, queue_id, uniq_key, batch=False)

    async def _put_half(self, cmd: RemotingCommand, message: MessageToStore, props: dict[str, str],
                        committed_text: str | None, queue_id: int, uniq_key: str) -> RemotingCommand:
        refusal = self.in_sync_refusal(cmd)
        if refusal is not None:
            return refusal
        result = await self.store.put_message(message)
        await self._await_slave(result)
        if result.ok:
            self.broker.transaction_service.remember_half(result.physical_offset, result.queue_offset, message, props,
                                                          committed_text)
        return self._response(cmd, result, queue_id, uniq_key, batch=False)

    async def _put_one(self, cmd: RemotingCommand, message: MessageToStore, uniq_key: str) -> RemotingCommand:
        result = await self.store.put_message(message)
        return self._response(cmd, result, message.queue_id, uniq_key, batch=False)

    # ---- batch ------------------------------------------------------------------------------
    def send_batch_message(self, channel: Any, cmd: RemotingCommand):
        header = read_request(cmd)
        topic = header.topic
        if topic and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group")
        if topic and len(topic) > 127:
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL,
                               f"message topic length too long {len(topic)}, max 127")
        topic_config, error = self._check_topic(channel, cmd, header)
        if error is not None:
            return error
        queue_id = self._pick_queue(header, topic_config)
        sys_flag = header.sys_flag or 0
        if sys_flag & TRANSACTION_TYPE_MASK:
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL, "batch messages cannot be transactional")
        if topic_config.topic_filter_type == "MULTI_TAG":
            sys_flag |= MULTI_TAGS_FLAG
        template = MessageToStore(topic, queue_id, 0, sys_flag, header.born_timestamp or 0, self._born_host(channel),
                                  header.reconsume_times or 0, b"", "", 0)
        try:
            messages = self._batch_messages(cmd.body, template)
        except RecordError as exc:
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL, f"malformed batch body: {exc}")
        except _BatchEntryRejected as exc:
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL, str(exc))
        if not messages:
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL, "batch body holds no message")
        refusal = self._limits.properties_refusal(header.properties, "the batch")
        if refusal is not None:
            return self._error(cmd, ResponseCode.MESSAGE_ILLEGAL, refusal)
        batch_uniq = decode_properties(header.properties).get(PROP_UNIQ_KEY) if header.properties else None
        return self._put_batch(cmd, messages, queue_id, batch_uniq)

    def _batch_messages(self, batch_body: bytes, template: MessageToStore) -> list[MessageToStore]:
        """Decode the batch body straight into store messages (one loop, no intermediate entry objects).

        Each entry is stored with its own properties only (HEAD behaviour, reference §4.3.4). Properties in the
        producers' usual layout are kept as the bytes that arrived; anything else is decoded and completed by
        _general_batch_message. Raises RecordError (malformed body) or _BatchEntryRejected."""
        topic = template.topic
        queue_id = template.queue_id
        sys_flag = template.sys_flag
        born_timestamp = template.born_timestamp
        born_host = template.born_host
        reconsume_times = template.reconsume_times
        max_body = self._max_body
        match_layout = match_producer_layout
        tag_codes = self._tag_codes
        limits = self._limits
        check_props_from = limits.check_from
        messages: list[MessageToStore] = []
        append = messages.append
        for flag, body, raw_props in iter_batch_entries(batch_body):
            if len(body) > max_body:
                raise _BatchEntryRejected(f"batch message {len(messages)}: body size {len(body)} exceeds the "
                                          f"maximum {max_body}")
            if len(raw_props) > check_props_from:
                refusal = limits.raw_properties_refusal(raw_props, f"batch message {len(messages)}")
                if refusal is not None:
                    raise _BatchEntryRejected(refusal)
            layout = raw_props.isascii() and match_layout(raw_props)
            if not layout:
                append(self._general_batch_message(template, len(messages), flag, body, raw_props))
                continue
            tags, keys, uniq = layout.groups()
            code = tag_codes.get(tags)
            if code is None:
                code = self._tag_code(tags)
            append(MessageToStore(topic, queue_id, flag, sys_flag, born_timestamp, born_host, reconsume_times, body,
                                  "", code, None if keys is None else keys.decode("ascii"), uniq.decode("ascii"), 0,
                                  raw_props))
        return messages

    def _tag_code(self, tags: bytes) -> int:
        """tagsCode of an ASCII tag, remembered per tag (tags repeat across messages)."""
        if len(self._tag_codes) > 4096:
            self._tag_codes.clear()
            self._tag_codes[None] = 0
        code = self._tag_codes[tags] = tags_code(tags.decode("ascii"))
        return code

    def _general_batch_message(self, template: MessageToStore, index: int, flag: int, body: bytes,
                               raw_props: bytes) -> MessageToStore:
        """Any properties layout: decode (invalid UTF-8 replaced, as Java's new String(bytes, UTF_8) does) and add
        UNIQ_KEY if missing."""
        props_text = raw_props.decode("utf-8", "replace")
        props = decode_properties(props_text)
        if "DELAY" in props and delay_level_of(props) > 0:  # §4.3.4: no delay level in a batch
            raise _BatchEntryRejected(f"batch message {index}: delay level not supported in a batch")
        uniq_key = props.get(PROP_UNIQ_KEY)
        if not uniq_key:
            uniq_key = self._uniq.next()
            if props_text and not props_text.endswith("\x02"):
                props_text += "\x02"
            props_text += f"{PROP_UNIQ_KEY}\x01{uniq_key}\x02"
            if _utf8_len(props_text) > MAX_PROPERTIES_BYTES:
                raise _BatchEntryRejected(f"batch message {index}: properties exceed {MAX_PROPERTIES_BYTES} bytes")
        return MessageToStore(template.topic, template.queue_id, flag, template.sys_flag, template.born_timestamp,
                              template.born_host, template.reconsume_times, body, props_text,
                              tags_code(props.get(PROP_TAGS)), props.get(PROP_KEYS), uniq_key)

    async def _put_batch(self, cmd: RemotingCommand, messages: list[MessageToStore], queue_id: int,
                         batch_uniq: str | None) -> RemotingCommand:
        refusal = self.in_sync_refusal(cmd)
        if refusal is not None:
            return refusal
        result = await self.store.put_messages(messages)
        await self._await_slave(result)
        return self._response(cmd, result, queue_id, batch_uniq, batch=True)
