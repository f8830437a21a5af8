"""SEND in the messaging core (reference §4.3): a typed SendRequest in, one Outcome[SendResult] out, whichever
protocol brought it.

The remoting processor (broker/processors/send.py) and the gRPC service (broker/grpc/service.py) only translate their
wire format into a SendRequest and the Outcome back; every check lives here once: the producer group and topic names,
the broker's and the topic's write permission, topic auto-creation (and its per-client rate), the queue, the message
and properties sizes (maxMessageSize, maxMessagePropertiesBytes/Count), retry topics and dead letters, delayed and
timed delivery, half messages of transactions, the in-sync replicas and the slaves' acknowledgements.

Three ways in, one per shape of traffic:

* ``send(request)``: one message, or an atomic batch (``request.batch``: one queue, one append, one answer; any bad
  message refuses them all) — broker/core/send_batch.py;
* ``send_one(request, message)``: ``send`` of one message, without its dispatch (the gRPC SendMessage of one message);
* ``send_each(request)``: several independent messages of one topic (a gRPC SendMessage): each checked and answered on
  its own, the plain ones to one queue stored with one append;
* ``send_run(requests)``: single sends read together from one connection (remoting pipelining): the same, one append
  per queue;

and ``store_one(message, ...)`` for messages the core builds itself (broker/core/send_back.py's retries and resent
dead letters): the same store path, in-sync check, flush and replication waits as a send.

A result is an Outcome when nothing is left to wait for (ASYNC_FLUSH, no replication: no coroutine is created), else
an awaitable of one. With SYNC_FLUSH or a replicating master, the messages of a run are stored with one append per
queue and the run waits once, for its last append (one flush, one slaves' acknowledgement).
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from collections.abc import Callable
from typing import Any, Awaitable

from broker.core.outcome import Outcome
from broker.core.replication import ReplicationWaiter
from broker.core.retries import dead_letter_topic, reconsume_limit
from broker.core.send_batch import BatchSender
from broker.core.send_limits import SendLimits
from broker.core.send_types import (Message, PROP_CLUSTER, PROP_KEYS, PROP_SHARDING_KEY,
                                     PROP_TAGS, PROP_UNIQ_KEY, REASON_BODY_TOO_LARGE, REASON_DELIVERY_TIME,
                                     REASON_ILLEGAL_TOPIC, REASON_MESSAGE_TYPE, REASON_PROPERTIES_TOO_LARGE,
                                     MessageIds, STORED_CODES, SendObserver, SendRequest, SendResult, StoreWriter,
                                     SUCCESS_CODE, late_outcome, utf8_len, stored_outcome)
from broker.descriptors import DescriptorsShortError
from broker.managers.topic_message_type import remoting_type_problem, send_type_problem
from broker.managers.topic_config import RETRY_GROUP_TOPIC_PREFIX, TopicConfig, validate_group, validate_topic
from broker.schedule.delay import to_schedule_topic
from broker.store.types import MessageToStore, PutResult, PutStatus
from broker.timer.timed import (PROP_DELAY_MS as PROP_TIMER_DELAY_MS, PROP_DELAY_SEC as PROP_TIMER_DELAY_SEC,
                                PROP_DELIVER_MS as PROP_TIMER_DELIVER_MS, TimerPropertyError, timer_deliver_ms,
                                to_timer_topic)
from broker.transaction.half import is_half_send, to_half
from protocol.codes import PERM_WRITE, ResponseCode
from protocol.hashing import tags_code
from protocol.ids import UniqKeyGenerator
from protocol.message import MULTI_TAGS_FLAG, TRANSACTION_TYPE_MASK
from protocol.properties import MAX_PROPERTIES_BYTES, decode_properties, encode_properties

__all__ = ["Message", "SendObserver", "SendRequest", "SendResult", "SendService", "StoreWriter", "REASON_BODY_TOO_LARGE",
           "REASON_DELIVERY_TIME", "REASON_ILLEGAL_TOPIC", "REASON_PROPERTIES_TOO_LARGE", "STORED_CODES"]

_DEFERRED = object()  # send_run: this request's message waits for its queue's append
#: the properties that make a message other than NORMAL (topic_message_type.message_type_of)
_TYPED_PROPERTIES = frozenset({"TRAN_MSG", "DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
                               "__SHARDINGKEY"})
#: a properties text this long or shorter is within MAX_PROPERTIES_BYTES whatever its characters (UTF-8: <= 3 bytes
#: per UTF-16 unit, 4 per astral character, which Python counts as one)
_ASCII_PROPERTIES_LIMIT = MAX_PROPERTIES_BYTES // 4


class SendService:
    """Checks, stores and answers sends. Built by the Broker with what it uses: ``config`` (BrokerConfig, read live:
    permissions, roles and limits change at run time), the store's put API, the topic and subscription-group
    registries, the replication waiter, ``remember_half`` (the transaction service keeps the half messages it will
    be asked to decide on), ``delay_max_level`` (the schedule service's number of delay levels) and ``observer``
    (metrics: told once per request settled by ``send_each_settled``; the remoting server observes its own)."""

    def __init__(self, config: Any, store: StoreWriter, topics: Any, groups: Any, *, sync_flush: bool,
                 replication: ReplicationWaiter, remember_half: Callable[..., None],
                 delay_max_level: Callable[[], int], observer: SendObserver | None = None) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.sync_flush = sync_flush
        self.replication = replication
        self.remember_half = remember_half
        self.delay_max_level = delay_max_level
        self.observer = observer
        self.region = config.region_id
        self.trace_on = bool(config.trace_on)
        self.cluster_name = config.broker_cluster_name
        self._cluster_suffix = f"{PROP_CLUSTER}\x01{config.broker_cluster_name}\x02"
        self.max_body = config.max_message_size
        self.type_check = bool(config.enable_topic_message_type_check)  # topics refuse other message types
        self.limits = SendLimits(config)  # issue 27: auto-created topics per client, properties per message
        self.uniq = UniqKeyGenerator(config.broker_ip1 or "127.0.0.1")
        self.random = random.Random()
        self._valid_topics: set[str] = set()  # names that passed validate_topic and the not-allowed list
        self._valid_groups: set[str] = set()  # producer groups that passed validate_group
        self.tag_codes: dict[bytes | None, int] = {None: 0}  # TAGS bytes -> tagsCode (batch path)
        self._text_tag_codes: dict[str | None, int] = {None: 0}  # TAGS -> tagsCode (tags repeat across messages)
        self._batch = BatchSender(self)

    def refresh_role(self) -> None:
        """Read the role again (controller mode changes it at run time)."""
        self.replication.refresh_role()

    # ---- entry points --------------------------------------------------------------------------------------------
    def send(self, request: SendRequest) -> Outcome[SendResult] | Awaitable[Outcome[SendResult]]:
        """One message, or an atomic batch (``request.batch``)."""
        if request.batch:
            return self._batch.send(request)
        if len(request.messages) != 1:
            return Outcome.refused(ResponseCode.MESSAGE_ILLEGAL, "give one message, or a batch")
        return self.send_one(request, request.messages[0])

    def send_each(self, request: SendRequest) -> list[Any]:
        """Each message of ``request`` sent on its own (its own checks and Outcome, in order); messages the broker
        puts in a queue itself go to one queue, and the plain ones of a queue are stored with one append."""
        if len(request.messages) == 1:
            return [self.send(request)]
        return self.send_run([SendRequest(request.topic, [message], request.queue_id, request.producer_group,
                                          request.requester, request.default_topic,
                                          request.default_topic_queue_nums, request.max_reconsume_times)
                              for message in request.messages])

    async def send_each_settled(self, request: SendRequest) -> list[Any]:
        """``send_each`` with every result settled (an Outcome, or the exception one raised), the request then told to
        the observer once. The gRPC SendMessage's way in: remoting sends are observed by their server, so no send is
        counted twice."""
        started = time.perf_counter()
        results = self.send_each(request)
        for index, result in enumerate(results):
            if type(result) is not Outcome and not isinstance(result, BaseException):
                try:
                    results[index] = await result
                except Exception as exc:  # noqa: BLE001 - answered per message by the caller
                    results[index] = exc
        observer = self.observer
        if observer is not None:
            code = None
            for result in results:
                this = result.code if type(result) is Outcome else int(ResponseCode.SYSTEM_ERROR)
                if code is None:
                    code = this
                if this not in STORED_CODES:
                    code = this
                    break
            observer(request.topic, len(request.messages), sum(len(m.body) for m in request.messages),
                     SUCCESS_CODE if code is None else code, time.perf_counter() - started)
        return results

    def send_run(self, requests: list[SendRequest]) -> list[Any]:
        """Single sends that arrived together: each is checked and answered on its own, but the plain ones are stored
        with one append per queue (one queue per topic for those that leave the choice to the broker). With
        SYNC_FLUSH or a replicating master the run then waits once, for its last append (one flush, one slaves'
        acknowledgement: the log is written in order, so that covers every message of the run). One result per
        request: an Outcome, an awaitable of one, or the exception one raised."""
        replication = self.replication
        waits = self.sync_flush or replication.sync_master
        deferred: list | None = []
        if replication.sync_master and replication.in_sync_refusal() is not None:
            deferred = None  # too few in-sync replicas: each send is refused on its own, nothing stored
        picks: dict[str, int] = {}
        checked: dict[tuple, TopicConfig] = {}  # the run's (topic, group, queue) that passed check_topic
        results: list[Any] = []
        single = self.send_one
        for request in requests:
            try:
                if request.batch or len(request.messages) != 1:
                    results.append(self.send(request))
                else:
                    results.append(single(request, request.messages[0], deferred, picks, checked))
            except Exception as exc:  # noqa: BLE001 - answered per request by the caller
                results.append(exc)
        if deferred:
            if waits and len(deferred) == 1:  # one plain message: stored and awaited as if alone
                settled: list[Any] = [self.store_one(*deferred[0])]
            else:
                settled, last = self._store_deferred(deferred)
                if waits and last is not None:
                    settled = self._after_one_wait(settled, last)
            pending = iter(settled)
            results = [next(pending) if result is _DEFERRED else result for result in results]
        return results

    # ---- checks --------------------------------------------------------------------------------------------------
    def check_topic(self, request: SendRequest) -> tuple[TopicConfig | None, Outcome | None]:
        """The producer group, the broker's and the topic's permissions, the topic (auto-created when allowed), the
        queue: (topic config, None) or (None, the refusal)."""
        topic = request.topic
        group = request.producer_group
        if group not in self._valid_groups:
            problem = validate_group(group)
            if problem is not None:
                return None, Outcome.refused(ResponseCode.INVALID_PARAMETER, f"producerGroup: {problem}")
            if len(self._valid_groups) > 100_000:
                self._valid_groups.clear()
            self._valid_groups.add(group)
        config = self.config
        if not config.broker_permission & PERM_WRITE:
            return None, Outcome.refused(ResponseCode.NO_PERMISSION,
                                         f"the broker[{config.broker_ip1}] sending message is forbidden")
        if topic not in self._valid_topics:
            problem = validate_topic(topic)
            if problem is not None:
                return None, Outcome.refused(ResponseCode.INVALID_PARAMETER, problem, REASON_ILLEGAL_TOPIC)
            if self.topics.is_not_allowed_send_topic(topic):
                return None, Outcome.refused(ResponseCode.NO_PERMISSION,
                                             f"Sending message to topic[{topic}] is forbidden.")
            if len(self._valid_topics) > 100_000:
                self._valid_topics.clear()
            self._valid_topics.add(topic)
        topic_config = self.topics.get(topic)
        if topic_config is None:
            try:
                topic_config, refusal = self.limits.create_topic(self.topics, request.requester, topic,
                                                                 request.default_topic,
                                                                 request.default_topic_queue_nums or 4)
            except DescriptorsShortError as exc:  # fileDescriptorReserve reached: a transient refusal
                return None, Outcome.refused(ResponseCode.SYSTEM_BUSY, str(exc))
            if refusal is not None:
                return None, Outcome.refused(ResponseCode.SYSTEM_BUSY, refusal)
            if topic_config is None:
                return None, Outcome.refused(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{topic}] not exist, apply first please! (defaultTopic {request.default_topic!r} "
                    f"cannot be used for auto-creation)")
        if not topic_config.perm & PERM_WRITE:
            return None, Outcome.refused(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        queue_id = request.queue_id
        queue_limit = max(topic_config.read_queue_nums, topic_config.write_queue_nums)
        if queue_id >= queue_limit:
            return None, Outcome.refused(
                ResponseCode.INVALID_PARAMETER,
                f"request queueId[{queue_id}] is illegal, topic[{topic}] has {queue_limit} queues")
        return topic_config, None

    def pick_queue(self, queue_id: int, topic_config: TopicConfig, sharding_key: str | None = None,
                   picks: dict[str, int] | None = None) -> int:
        """The queue a message goes to: the one asked for; else its sharding key's (a message group: always the same
        queue); else one at random (one per topic for a run)."""
        if queue_id >= 0:
            return queue_id
        queues = max(1, topic_config.write_queue_nums)
        if sharding_key:
            return (zlib.crc32(sharding_key.encode()) & 0x7FFFFFFF) % queues
        if picks is None:
            return self.random.getrandbits(30) % queues
        topic = topic_config.topic_name
        picked = picks.get(topic)
        if picked is None:
            picked = picks[topic] = self.random.getrandbits(30) % queues
        return picked

    @staticmethod
    def type_problem(request: SendRequest, topic_config: TopicConfig, props: dict[str, str]) -> Outcome | None:
        """The topic's message type against the message's (enableTopicMessageTypeCheck). gRPC checks every known
        topic (an untyped one is NORMAL), as the reference's proxy; remoting checks only topics given a type, since
        the reference's own port checks none and 4.x producers send delay and transactional messages to plain
        topics."""
        grpc = request.requester.protocol == "grpc"
        if not getattr(topic_config, "attributes", None) and (not grpc or _TYPED_PROPERTIES.isdisjoint(props)):
            return None  # an untyped topic: remoting checks nothing; gRPC takes it as NORMAL, as is a plain message
        check = send_type_problem if grpc else remoting_type_problem
        problem = check(True, topic_config, props)
        return None if problem is None else Outcome.refused(ResponseCode.MESSAGE_ILLEGAL, problem, REASON_MESSAGE_TYPE)

    # ---- one message ---------------------------------------------------------------------------------------------
    def send_one(self, request: SendRequest, message: Message, deferred: list | None = None,
                 picks: dict[str, int] | None = None,
                 checked: dict[tuple, TopicConfig] | None = None) -> Any:
        """One message of ``request`` (not a batch): what ``send`` does for it, called directly by a front end that
        has one message (the gRPC SendMessage: a call less per message). Check and build the message, then store it;
        with ``deferred`` (a run) a plain message is added there and _DEFERRED returned: send_run
        stores it with the others of its queue. ``checked``: a run's topic checks already passed (the same topic,
        group and queue pass again within one run: nothing they read can change between two messages of it)."""
        props = message.properties
        props_text = message.properties_text
        if props is not None and props_text is None:
            props_text = encode_properties(props)
        elif props_text is None:
            props_text = ""
        limits = self.limits
        if len(props_text) > limits.check_from:  # before anything is decoded or a topic created
            refusal = limits.properties_refusal(props_text)
            if refusal is not None:
                return Outcome.refused(ResponseCode.MESSAGE_ILLEGAL, refusal, REASON_PROPERTIES_TOO_LARGE)
        if checked is None:
            topic_config, refusal = self.check_topic(request)
            if refusal is not None:
                return refusal
        else:
            key = (request.topic, request.producer_group, request.queue_id)
            topic_config = checked.get(key)
            if topic_config is None:
                topic_config, refusal = self.check_topic(request)
                if refusal is not None:
                    return refusal
                checked[key] = topic_config
        topic = request.topic
        body = message.body
        if len(body) > self.max_body:
            return Outcome.refused(ResponseCode.MESSAGE_ILLEGAL,
                                   f"the message body size {len(body)} exceeds the maximum {self.max_body}",
                                   REASON_BODY_TOO_LARGE)
        if props is None:
            props = decode_properties(props_text)
        if self.type_check and (topic_config.attributes or not _TYPED_PROPERTIES.isdisjoint(props)):
            refusal = self.type_problem(request, topic_config, props)  # not for a plain message to an untyped topic
            if refusal is not None:
                return refusal
        queue_id = request.queue_id
        if queue_id < 0:
            sharding_key = props.get(PROP_SHARDING_KEY)
            if sharding_key or picks is not None:
                queue_id = self.pick_queue(queue_id, topic_config, sharding_key, picks)
            else:  # pick_queue's own choice for one message: a queue at random
                queue_id = self.random.getrandbits(30) % max(1, topic_config.write_queue_nums)
        reconsume_times = message.reconsume_times
        rebuild = False

        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
            group_config = self.groups.find_or_create(group)
            if group_config is None:
                return Outcome.refused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
            if reconsume_times > reconsume_limit(request.max_reconsume_times, group_config):
                dlq, refusal = dead_letter_topic(self.topics, group)
                if refusal is not None:
                    return refusal
                topic = dlq.topic_name
                queue_id = 0
                if props.pop("DELAY", None) is not None:
                    rebuild = True

        # Stored properties = request properties + UNIQ_KEY (if missing) + CLUSTER; appended to the
        # original text when possible instead of re-encoding the whole map.
        suffix = ""
        uniq_key = props.get(PROP_UNIQ_KEY)
        if not uniq_key:
            uniq_key = self.uniq.next()
            props[PROP_UNIQ_KEY] = uniq_key
            suffix = f"{PROP_UNIQ_KEY}\x01{uniq_key}\x02"
        cluster = props.get(PROP_CLUSTER)
        if cluster != self.cluster_name:
            if cluster is not None:
                rebuild = True
            else:
                suffix += self._cluster_suffix
            props[PROP_CLUSTER] = self.cluster_name
        if rebuild:
            props_text = encode_properties(props)
        elif suffix:
            if props_text and not props_text.endswith("\x02"):
                props_text += "\x02"
            props_text += suffix
        if len(props_text) > _ASCII_PROPERTIES_LIMIT and utf8_len(props_text) > MAX_PROPERTIES_BYTES:
            return Outcome.refused(ResponseCode.MESSAGE_ILLEGAL,
                                   f"the message properties size {utf8_len(props_text)} exceeds {MAX_PROPERTIES_BYTES}")

        sys_flag = message.sys_flag
        half = "TRAN_MSG" in props and is_half_send(props, reconsume_times)
        if sys_flag & TRANSACTION_TYPE_MASK and not half:
            sys_flag &= ~TRANSACTION_TYPE_MASK  # a stray PREPARED bit must not hide a plain message (pitfall 1)
        if topic_config.topic_filter_type == "MULTI_TAG":
            sys_flag |= MULTI_TAGS_FLAG
        tags = props.get(PROP_TAGS)
        code = self._text_tag_codes.get(tags)
        if code is None:
            code = self._tag_code(tags)
        stored = MessageToStore(topic, queue_id, message.flag, sys_flag, message.born_timestamp, message.born_host,
                                reconsume_times, body, props_text, code, props.get(PROP_KEYS), uniq_key)
        timed = 0
        if half:  # transactions.md §2: stored in the half queue, invisible until END_TRANSACTION commits it
            if self.config.reject_transaction_message:
                return Outcome.refused(ResponseCode.NO_PERMISSION, f"the broker[{self.config.broker_ip1}] sending "
                                                                   f"transaction message is forbidden")
            committed_text = to_half(stored, props)
            stored.keys = stored.uniq_key = None  # not indexed: the committed message will be
            return self._put_half(stored, props, committed_text, queue_id, uniq_key)
        if "DELAY" in props:  # §4.3.2 step 6: delayed messages wait in SCHEDULE_TOPIC_XXXX
            to_schedule_topic(stored, props, self.delay_max_level())
        elif PROP_TIMER_DELIVER_MS in props or PROP_TIMER_DELAY_SEC in props or PROP_TIMER_DELAY_MS in props:
            refusal_text = self._to_timer(stored, props)  # 5.x timed messages wait in rmq_sys_wheel_timer
            if refusal_text is not None:
                return Outcome.refused(ResponseCode.MESSAGE_ILLEGAL, refusal_text, REASON_DELIVERY_TIME)
            if stored.topic != topic:  # waits in the timer: its delivery time names it in a recall handle
                timed = int(props[PROP_TIMER_DELIVER_MS])
        if deferred is not None:
            deferred.append((stored, queue_id, uniq_key, timed))
            return _DEFERRED
        if self.sync_flush or self.replication.sync_master:
            return self.store_one(stored, queue_id, uniq_key, timed)
        put = self.store.append_one(stored)  # ASYNC_FLUSH: nothing to await, answered without creating a coroutine
        if put.status is PutStatus.PUT_OK:  # stored_outcome's usual case, without its call
            return Outcome(SUCCESS_CODE, "", SendResult(MessageIds(put), queue_id, put.queue_offset, uniq_key, timed))
        return stored_outcome(put, queue_id, uniq_key, timed)

    def _tag_code(self, tags: str) -> int:
        """tagsCode of a tag, remembered per tag (bounded)."""
        codes = self._text_tag_codes
        if len(codes) > 4096:
            codes.clear()
            codes[None] = 0
        code = codes[tags] = tags_code(tags)
        return code

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

    # ---- storing -------------------------------------------------------------------------------------------------
    def store_one(self, message: MessageToStore, queue_id: int, uniq_key: str | None,
                  timed: int = 0) -> Outcome[SendResult] | Awaitable[Outcome[SendResult]]:
        """Store a message built by the core the way every send is stored: on a replicating master after the in-sync
        check and acknowledged by a slave, with SYNC_FLUSH once on disk, else at once. Also the way in of the
        consumers' send-backs and the dead-letter resends (broker/core/send_back.py)."""
        if self.replication.sync_master:
            return self._put_replicated(message, queue_id, uniq_key, timed)
        if self.sync_flush:
            return self._put_one(message, queue_id, uniq_key, timed)
        return stored_outcome(self.store.append_one(message), queue_id, uniq_key, timed)

    async def store_written(self, message: MessageToStore) -> Outcome[SendResult]:
        """A message a broker service writes on its own (POP's retries and dead letters: broker/pop/service.py),
        stored as a send is — the in-sync check and the slaves' acknowledgement on a replicating master, the flush
        with SYNC_FLUSH — so it is acknowledged only when a send would be; its Outcome (``ok`` only when stored and
        safe)."""
        result = self.store_one(message, message.queue_id, message.uniq_key)
        return result if type(result) is Outcome else await result

    def _store_deferred(self, deferred: list[tuple[MessageToStore, int, str, bool]]
                        ) -> tuple[list[Outcome], PutResult | None]:
        """One append per (topic, queue), outcomes in request order, and the last append that stored anything (the
        run's wait is for it). A batch the store refuses is retried message by message, so each request gets exactly
        the outcome it would have had alone."""
        store = self.store
        last: PutResult | None = None
        outcomes: list[Any] = [None] * len(deferred)
        groups: dict[tuple[str, int], list[int]] = {}
        for k, entry in enumerate(deferred):
            message = entry[0]
            key = (message.topic, message.queue_id)
            members = groups.get(key)
            if members is None:
                groups[key] = [k]
            else:
                members.append(k)
        for members in groups.values():
            if len(members) > 1:
                result = store.append([deferred[k][0] for k in members])
                if result.status is PutStatus.PUT_OK:
                    last = result
                    msg_ids = result.msg_ids
                    first = result.queue_offset
                    for n, k in enumerate(members):
                        _message, queue_id, uniq_key, timed = deferred[k]
                        outcomes[k] = Outcome(SUCCESS_CODE, "", SendResult((msg_ids[n],), queue_id, first + n,
                                                                       uniq_key, timed))
                    continue
            for k in members:
                message, queue_id, uniq_key, timed = deferred[k]
                put = store.append_one(message)
                if put.status is PutStatus.PUT_OK:
                    last = put
                outcomes[k] = stored_outcome(put, queue_id, uniq_key, timed)
        return outcomes, last

    def _after_one_wait(self, outcomes: list[Outcome], last: PutResult) -> list[Any]:
        """A run's stored outcomes as awaitables that settle after one wait for ``last`` (the run's final append);
        refusals stay as they are."""
        wait = asyncio.ensure_future(self._wait_for(last))
        settled = self._settled
        return [settled(wait, outcome) if outcome.code == SUCCESS_CODE else outcome for outcome in outcomes]

    async def _wait_for(self, last: PutResult) -> PutStatus:
        """The flush (SYNC_FLUSH) and the slaves' acknowledgement (a replicating master) of everything appended up to
        ``last``: its status afterwards."""
        await self.store.await_flush(last)
        if self.replication.sync_master:
            await self.replication.wait(last)
        return last.status

    @staticmethod
    async def _settled(wait: "asyncio.Future[PutStatus]", outcome: Outcome[SendResult]) -> Outcome[SendResult]:
        # shielded: one request given up (its connection closed) does not cancel the others' wait
        return late_outcome(outcome, await asyncio.shield(wait))

    async def _put_replicated(self, message: MessageToStore, queue_id: int, uniq_key: str,
                              timed: int) -> Outcome[SendResult]:
        refusal = self.replication.in_sync_refusal()
        if refusal is not None:
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, refusal)
        result = await self.store.put_message(message)
        await self.replication.wait(result)
        return stored_outcome(result, queue_id, uniq_key, timed)

    async def _put_half(self, message: MessageToStore, props: dict[str, str], committed_text: str | None,
                        queue_id: int, uniq_key: str) -> Outcome[SendResult]:
        refusal = self.replication.in_sync_refusal()
        if refusal is not None:
            return Outcome.refused(ResponseCode.SYSTEM_ERROR, refusal)
        result = await self.store.put_message(message)
        await self.replication.wait(result)
        if result.ok:
            self.remember_half(result.physical_offset, result.queue_offset, message, props, committed_text)
        return stored_outcome(result, queue_id, uniq_key)

    async def _put_one(self, message: MessageToStore, queue_id: int, uniq_key: str,
                       timed: int) -> Outcome[SendResult]:
        return stored_outcome(await self.store.put_message(message), queue_id, uniq_key, timed)
