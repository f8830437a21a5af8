"""apache.rocketmq.v2.MessagingService for RocketMQ 5.x SDKs: routes, settings, heartbeats, sends, transactions, and
(through broker/grpc/consumer.py and the broker's POP service) receives, acks and invisibility changes.

SendMessage and EndTransaction are decoded from protobuf into the messaging core's typed requests (broker/core/send.py,
broker/core/transaction.py), authorized as such by the broker's one Authorizer, executed by the core — the same
checks, store and dispatch as a remoting send, so remoting consumers read what was sent here — and the core's Outcome
is answered as protobuf; no remoting frame is built. Transactional sends are half messages; the broker's transaction
checks reach gRPC producers on their Telemetry streams (broker/grpc/transactions.py). Delivery times go to the broker's
5.x timer (TIMER_DELIVER_MS, broker/timer), and RecallMessage cancels a timed message before its time.
"""

from __future__ import annotations

import logging
import re
import time
from time import perf_counter
from typing import TYPE_CHECKING, Any, AsyncIterator

from broker.acl.authorizer import Needs
from broker.acl.resources import send_needs
from broker.core.outcome import Outcome, Requester
from broker.core.recall import REASON_HANDLE as REASON_RECALL_HANDLE, REASON_NOT_FOUND as REASON_RECALL_NOT_FOUND
from broker.core.recall import RecallRequest, RecallService
from broker.core.send import (REASON_BODY_TOO_LARGE, REASON_DELIVERY_TIME, REASON_ILLEGAL_TOPIC,
                              REASON_MESSAGE_TYPE, REASON_PROPERTIES_TOO_LARGE, STORED_CODES, Message, SendRequest)
from broker.core.send_types import PROP_UNIQ_KEY
from broker.grpc.access import Caller, GrpcAccess, metadata_value
from broker.grpc.common import SYSTEM_PROPERTY_NAMES, accept_message_types, duration, no_route_remark, status
from broker.grpc.consumer import ConsumerRpcs, closing_frame
from broker.grpc.transactions import GrpcTransactions, TelemetryStreams, half_send_properties
from broker.pop.service import MAX_BATCH
from broker.managers.derived_names import consumer_group_problem
from broker.managers.topic_config import validate_topic
from protocol.codes import PERM_READ, PERM_WRITE, ResponseCode
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb
from protocol.grpc import service_pb2_grpc
from protocol.ids import pack_host

if TYPE_CHECKING:
    from broker.grpc.parts import GrpcParts

log = logging.getLogger(__name__)

MAX_USER_PROPERTIES = 128
CLIENT_ALIVE_MS = 120_000  # a client silent this long (no heartbeat, settings or receive) is gone
CLIENT_FORGET_S = 3600.0  # ... and this long: its entries (settings, last call) are dropped


class ClientTable:
    """Client id -> when it was last heard from, and its last Settings. SDKs that exit without
    NotifyClientTermination (a crash, kill -9) leave entries behind: a client silent for ``forget_s`` is forgotten
    in sweeps amortized over the calls (a sweep when the table has doubled), so the table holds the recent clients,
    not every client ever seen."""

    def __init__(self, forget_s: float = CLIENT_FORGET_S, clock: Any = time.monotonic) -> None:
        self.forget_s = forget_s
        self.clock = clock
        self.last_seen: dict[str, float] = {}  # client id -> monotonic time of its last call
        self.settings: dict[str, pb.Settings] = {}  # client id -> its last Settings
        self._sweep_at = 1024

    def seen(self, client_id: str) -> None:
        now = self.clock()
        self.last_seen[client_id] = now
        if len(self.last_seen) >= self._sweep_at:
            self._forget_silent(now)

    def forget(self, client_id: str) -> pb.Settings | None:
        """Drop a client that ended its session; its settings, if it had sent any."""
        self.last_seen.pop(client_id, None)
        return self.settings.pop(client_id, None)

    def _forget_silent(self, now: float) -> None:
        silent = [client_id for client_id, seen in self.last_seen.items() if now - seen >= self.forget_s]
        for client_id in silent:  # in place: the service and its consumer RPCs share these dicts
            del self.last_seen[client_id]
            self.settings.pop(client_id, None)
        self._sweep_at = max(1024, 2 * len(self.last_seen))


def _client_id(context: Any) -> str:
    return metadata_value(context, "x-mq-client-id")


def _peer_address(peer: str) -> str:
    """gRPC's peer ("ipv4:127.0.0.1:5555", "ipv6:[::1]:5555") as host:port."""
    kind, _, rest = peer.partition(":")
    return rest if kind in ("ipv4", "ipv6") else "127.0.0.1:0"


#: _has_control(text): a match (truthy) when ``text`` has a control character; the pattern's own search, so a check
#: costs no Python frame
_has_control = re.compile("[\x00-\x1f\x7f]").search


def _packed(peer: str) -> bytes:
    """The peer's host:port packed as a born host (loopback when it cannot be)."""
    host, _, port = peer.rpartition(":")
    try:
        return pack_host(host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else 0)
    except ValueError:
        return pack_host("127.0.0.1", 0)


def _translate(message: pb.Message, topic: str, peer: str, born_host: bytes,
               body: bytes) -> Message | tuple[int, str]:
    """A 5.x message as the core's, or what the 5.x protocol refuses in its shape (names, ids, reserved properties)
    as (code, text); sizes and every other check are the core's. Each protobuf field is read once (``topic``: the
    message's topic name, read by the caller).

    The stored properties are those a remoting producer would send: the user properties, TAGS, KEYS, UNIQ_KEY =
    message id, __SHARDINGKEY = message group, trace context, born host and time, PGROUP = the topic; a delivery
    time as TIMER_DELIVER_MS, a transactional message as a half message."""
    if topic not in _VALID_TOPICS:
        problem = validate_topic(topic)
        if problem is not None:
            return pb.ILLEGAL_TOPIC, problem
        if len(_VALID_TOPICS) >= 4096:
            _VALID_TOPICS.clear()
        _VALID_TOPICS.add(topic)
    if not body:
        return pb.MESSAGE_BODY_EMPTY, "the message body is empty"
    user_properties = message.user_properties
    if user_properties:
        if len(user_properties) > MAX_USER_PROPERTIES:
            return pb.MESSAGE_PROPERTIES_TOO_LARGE, f"more than {MAX_USER_PROPERTIES} user properties"
        props = dict(user_properties)
        for name, value in props.items():
            if name in SYSTEM_PROPERTY_NAMES or _has_control(name) or _has_control(value):
                return pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {name!r} is reserved or has control characters"
    else:
        props = {}
    sp = message.system_properties
    tag = sp.tag
    if tag or sp.HasField("tag"):  # a tag given empty is refused as blank
        if not tag.strip() or "|" in tag or _has_control(tag):
            return pb.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is blank or has '|' or control characters"
        props["TAGS"] = tag
    keys = sp.keys
    if keys:
        for key in keys:
            if not key.strip() or _has_control(key):
                return pb.ILLEGAL_MESSAGE_KEY, f"key {key!r} is blank or has control characters"
        props["KEYS"] = " ".join(keys)
    message_id = sp.message_id
    if not message_id:
        return pb.ILLEGAL_MESSAGE_ID, "the message has no message_id"
    props["UNIQ_KEY"] = message_id
    if sp.HasField("message_group"):
        group = sp.message_group
        if not group.strip() or len(group.encode()) >= 64 or _has_control(group):
            return pb.ILLEGAL_MESSAGE_GROUP, "the message group is blank, 64 bytes or longer, or has control characters"
        props["__SHARDINGKEY"] = group
    if sp.HasField("trace_context"):
        props["TRACE_CONTEXT"] = sp.trace_context
    props["__BORNHOST"] = sp.born_host or peer
    born = sp.born_timestamp
    born_ms = born.seconds * 1000 + born.nanos // 1_000_000
    props["BORN_TIMESTAMP"] = str(born_ms)
    props["PGROUP"] = topic
    transactional = sp.message_type == pb.TRANSACTION
    if transactional:  # a half message, as a remoting transactional send (TRAN_MSG, PGROUP, prepared sysFlag)
        half_send_properties(props, message)
    elif sp.HasField("delivery_timestamp"):  # the broker's 5.x timer (broker/timer)
        deliver = sp.delivery_timestamp
        props["TIMER_DELIVER_MS"] = str(deliver.seconds * 1000 + deliver.nanos // 1_000_000)
    sys_flag = (1 if sp.body_encoding == pb.GZIP else 0) | (4 if transactional else 0)
    # the properties also encoded (as encode_properties does: no value is None here), so the core need not
    return Message(body, "\x02".join(map("\x01".join, props.items())) + "\x02", props, 0, sys_flag, born_ms, born_host)


_VALID_TOPICS: set[str] = set()  # topic names that passed validate_topic (bounded)
_SENDERS: dict[str, tuple[str, Requester, bytes]] = {}  # gRPC peer -> its host:port, requester, packed born host
_OK = status(pb.OK)
_OK_ANSWER = spb.SendMessageResponse(status=_OK, entries=[spb.SendResultEntry(status=_OK)])  # filled per answer
_SUCCESS = int(ResponseCode.SUCCESS)


def _sender(peer: str) -> tuple[str, Requester, bytes]:
    """A gRPC peer's address (host:port), as the core's Requester, and its packed born host, made once per peer and
    kept in ``_SENDERS`` (bounded: cleared past 4,096 peers), where SendMessage looks it up itself. The Requester
    names no client id: the send core reads only the address, and reading the client id means converting the
    call's whole metadata (~4 µs a call live); ACL, when on, reads it itself."""
    if len(_SENDERS) >= 4096:
        _SENDERS.clear()
    address = _peer_address(peer)
    known = _SENDERS[peer] = (address, Requester(address, "grpc"), _packed(address))
    return known


def _entry(message: pb.Message, outcome: Outcome, recaller: RecallService) -> spb.SendResultEntry:
    """One message's Outcome as its entry: the offset, the transaction id (the message id, as the reference's;
    EndTransaction finds a half record by it through the broker's HalfIds), a recall handle for a timed one."""
    sp = message.system_properties
    if outcome.code not in STORED_CODES or outcome.value is None:
        return spb.SendResultEntry(status=status(_send_code(outcome), outcome.remark), message_id=sp.message_id)
    value = outcome.value
    code = pb.OK if outcome.ok else _send_code(outcome)
    message_id = sp.message_id
    if sp.message_type == pb.TRANSACTION:
        return spb.SendResultEntry(status=_OK if code == pb.OK else status(code), message_id=message_id,
                                   offset=value.queue_offset, transaction_id=message_id)
    recall = recaller.handle_for(message.topic.name, value.timed, message_id, value.msg_ids[0]) if value.timed else ""
    return spb.SendResultEntry(status=_OK if code == pb.OK else status(code), message_id=message_id,
                               offset=value.queue_offset, recall_handle=recall, transaction_id=message_id)


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    """The RPCs 5.x producers call, backed by the broker's managers and request handlers."""

    def __init__(self, parts: "GrpcParts", grpc_port: int) -> None:
        """``parts``: the narrow parts of the broker the RPCs use (broker/grpc/parts.py)."""
        self.config = parts.config  # read live
        self.topics = parts.topics
        self.pop = parts.pop
        self.recaller = parts.recaller
        self.sender = parts.sender
        self.grpc_port = grpc_port
        self.clients = ClientTable()
        self.settings = self.clients.settings  # client id -> its last Settings
        self.streams = TelemetryStreams()  # open Telemetry streams: where server-initiated commands go
        self.transactions = GrpcTransactions(parts.ender, self.streams)
        self.last_seen = self.clients.last_seen  # client id -> monotonic time of its last call
        self.access = GrpcAccess(parts.authorizer, CLIENT_ALIVE_MS / 1000)
        self.consumers = ConsumerRpcs(parts.pop_core, parts.config.broker_name, self.settings.get, _client_id,
                                      self._admit)

    def _seen(self, context: Any) -> str:
        """The caller's client id, noting that it is alive."""
        client_id = _client_id(context)
        if client_id:
            self.clients.seen(client_id)
        return client_id

    def client_alive(self, client_id: str) -> bool:
        seen = self.last_seen.get(client_id)
        return seen is not None and time.monotonic() - seen < CLIENT_ALIVE_MS / 1000

    # ---- access (broker/grpc/access.py: the broker's one Authorizer) ----------------------------------------
    def _admit(self, rpc: str, needs: Needs, context: Any) -> pb.Status | None:
        """A call decoded into a typed core request: authorized on that object's needs; an admitted caller's client
        is noted alive. None = allowed."""
        _caller, refused = self.access.admit(rpc, None, context, _client_id(context), needs=needs)
        if refused is None:
            self._seen(context)
        return refused

    def _refusal(self, rpc: str, request: Any, context: Any) -> pb.Status | None:
        """With aclEnable=true: the call must be signed by an account of the ACL file within
        aclTimeToleranceSeconds, may use what ``request`` names, and may act as the client id it names. None =
        allowed."""
        _caller, refused = self.access.admit(rpc, request, context, _client_id(context))
        return refused

    # ---- routes ----------------------------------------------------------------------------------------------
    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Any) -> spb.QueryRouteResponse:
        refused = self._refusal("QueryRoute", request, context)
        if refused is not None:
            return spb.QueryRouteResponse(status=refused)
        topic = request.topic.name
        problem = validate_topic(topic)
        if problem is not None:
            return spb.QueryRouteResponse(status=status(pb.ILLEGAL_TOPIC, problem))
        config = self.topics.get(topic)
        if config is None:
            return spb.QueryRouteResponse(status=status(pb.TOPIC_NOT_FOUND, no_route_remark(topic)))
        endpoints = request.endpoints if request.endpoints.addresses else self._own_endpoints()
        broker = pb.Broker(name=self.config.broker_name, id=0, endpoints=endpoints)
        queues = []
        read, write = config.read_queue_nums, config.write_queue_nums
        accepted = accept_message_types(config)  # the topic's message type (attribute message.type)
        for queue_id in range(max(read, write)):
            readable = config.perm & PERM_READ and queue_id < read
            writable = config.perm & PERM_WRITE and queue_id < write
            permission = (pb.READ_WRITE if readable and writable else pb.READ if readable
                          else pb.WRITE if writable else pb.NONE)
            queues.append(pb.MessageQueue(topic=request.topic, id=queue_id, permission=permission, broker=broker,
                                          accept_message_types=accepted))
        return spb.QueryRouteResponse(status=status(pb.OK), message_queues=queues)

    def _own_endpoints(self) -> pb.Endpoints:
        host = self.config.broker_ip1 or "127.0.0.1"
        return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=self.grpc_port)])

    # ---- client lifecycle ------------------------------------------------------------------------------------
    async def Telemetry(self, request_iterator: AsyncIterator[spb.TelemetryCommand],
                        context: Any) -> AsyncIterator[spb.TelemetryCommand]:
        client_id = _client_id(context)
        caller, refused = self.access.admit("Telemetry", None, context, client_id)
        if refused is not None:
            yield spb.TelemetryCommand(status=refused)
            return
        stream = self.streams.open(client_id)
        try:
            async for pushed, command in stream.merged(request_iterator):
                if pushed:  # server-initiated (a transaction check): written to the client as is
                    yield command
                    continue
                if command.WhichOneof("command") != "settings":
                    continue  # answers to server-initiated commands: nothing waits for them
                # the stream outlives its signature: decided with the account as the ACL file says now
                caller = self.access.current(caller)
                refused = self._stream_refusal(caller, command, context)
                if refused is not None:  # the settings are not taken; the stream ends
                    yield spb.TelemetryCommand(status=refused)
                    return
                settings = self._merged(command.settings)
                if client_id:
                    self.settings[client_id] = settings
                    self.clients.seen(client_id)
                stream.publishing(settings)
                yield spb.TelemetryCommand(status=status(pb.OK), settings=settings)
        finally:
            stream.close()

    def _stream_refusal(self, caller: Caller | None, command: spb.TelemetryCommand,
                        context: Any) -> pb.Status | None:
        if self.access.enabled and caller is None:
            return status(pb.UNAUTHORIZED, "the account that opened this stream was removed from the ACL file")
        return self.access.decide(caller, "Telemetry", command, context)

    def _merged(self, settings: pb.Settings) -> pb.Settings:
        """The client's Settings with the server's values, as the reference fills them (§6)."""
        merged = pb.Settings()
        merged.CopyFrom(settings)
        merged.metric.on = False
        if settings.WhichOneof("pub_sub") == "publishing":
            merged.publishing.max_body_size = self.config.max_message_size  # the core's limit
            merged.publishing.validate_message_type = self.config.enable_topic_message_type_check
            merged.backoff_policy.max_attempts = 3
            backoff = merged.backoff_policy.exponential_backoff
            backoff.initial.CopyFrom(duration(10))
            backoff.max.CopyFrom(duration(1000))
            backoff.multiplier = 2.0
        elif settings.WhichOneof("pub_sub") == "subscription":
            group = settings.subscription.group.name
            subscription = merged.subscription
            subscription.receive_batch_size = MAX_BATCH
            subscription.long_polling_timeout.CopyFrom(
                duration(self.config.grpc_client_consumer_max_long_polling_timeout_millis))
            subscription.fifo = self.consumers.fifo(group)
            merged.backoff_policy.max_attempts = self.consumers.max_attempts(group)
            # the classic retry delays: levels 3.. of messageDelayLevel (10 s, 30 s, 1 m, ... 2 h)
            levels = self.config.delay_levels_ms()[2:]
            merged.backoff_policy.customized_backoff.next.extend(duration(ms) for ms in levels)
        return merged

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        refused = self._refusal("Heartbeat", request, context)
        if refused is not None:
            return spb.HeartbeatResponse(status=refused)
        if self._seen(context) not in self.settings:
            return spb.HeartbeatResponse(status=status(pb.UNRECOGNIZED_CLIENT_TYPE,
                                                       "cannot find client settings for this client"))
        if request.client_type in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER):
            problem = consumer_group_problem(request.group.name)  # its %RETRY% / %DLQ% names must fit too
            if problem is not None:
                return spb.HeartbeatResponse(status=status(pb.ILLEGAL_CONSUMER_GROUP, problem))
        return spb.HeartbeatResponse(status=status(pb.OK))

    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest,
                                      context: Any) -> spb.NotifyClientTerminationResponse:
        """Ends the caller's own session: with ACL on, only the account that has been using this client id may end
        it (broker/grpc/access.py ClientOwners)."""
        refused = self._refusal("NotifyClientTermination", request, context)
        if refused is not None:
            return spb.NotifyClientTerminationResponse(status=refused)
        client_id = _client_id(context)
        self.access.release(client_id)
        settings = self.clients.forget(client_id)
        if client_id:
            self.pop.release_client(client_id)  # its auto-renewed deliveries come back soon
        if settings is None:
            return spb.NotifyClientTerminationResponse(status=status(pb.UNRECOGNIZED_CLIENT_TYPE,
                                                                     "cannot find client settings for this client"))
        return spb.NotifyClientTerminationResponse(status=status(pb.OK))

    # ---- sending (the messaging core: broker/core/send.py) -----------------------------------------------------
    async def SendMessage(self, request: spb.SendMessageRequest, context: Any) -> spb.SendMessageResponse:
        """Decoded into one typed SendRequest (authorized as such), sent by the core, its outcomes answered as
        entries. Several messages are each answered on their own, the plain ones to one queue stored with one append
        (``_send_many``). One message, the SDKs' usual call, is the hot path of a gRPC producer and is written out
        here: each Python call costs ~1 µs live (grpc evicts the caches between two calls). The caller's address,
        Requester and born host are looked up per gRPC peer (``_SENDERS``), the message translated in one pass over
        its fields, sent by the core's ``send_one`` (with ASYNC_FLUSH and no replication to wait for, without
        suspending), told to the metrics observer and answered; a plain success fills a copy of the prebuilt reply
        (the cheapest way to build it)."""
        started = perf_counter()
        messages = request.messages
        if len(messages) != 1:
            return await self._send_many(messages, context, started)
        message = messages[0]
        topic = message.topic.name
        if self.access.authorizer is not None:  # aclEnable=false: nothing to decide
            refused = self._admitted("SendMessage", send_needs(topic), context)
            if refused is not None:
                self._refused(topic, 1, ResponseCode.NO_PERMISSION, started)
                return spb.SendMessageResponse(status=refused, entries=[spb.SendResultEntry(
                    status=refused, message_id=message.system_properties.message_id)])
        peer = context.peer() or ""
        address, requester, born_host = _SENDERS.get(peer) or _sender(peer)
        translated = _translate(message, topic, address, born_host, message.body)  # body: a copy each time it is read
        if type(translated) is tuple:
            self._refused(topic, 1, ResponseCode.MESSAGE_ILLEGAL, started)
            entry = spb.SendResultEntry(status=status(*translated), message_id=message.system_properties.message_id)
            return spb.SendMessageResponse(status=entry.status, entries=[entry])
        result = self.sender.send_one(SendRequest(topic, [translated], -1, topic, requester, "TBW102", 4), translated)
        if type(result) is not Outcome:
            result = await result
        observer = self.sender.observer
        if observer is not None:  # metrics: as send_each_settled tells a request
            observer(topic, 1, len(translated.body), result.code, perf_counter() - started)
        value = result.value
        if result.code == _SUCCESS and value is not None and not value.timed:  # a copy of the prebuilt reply, filled
            response = spb.SendMessageResponse()
            response.CopyFrom(_OK_ANSWER)
            entry = response.entries[0]
            message_id = translated.properties[PROP_UNIQ_KEY]  # the message's message_id
            entry.message_id = message_id
            entry.offset = value.queue_offset
            entry.transaction_id = message_id
            return response
        entry = _entry(message, result, self.recaller)
        return spb.SendMessageResponse(status=entry.status, entries=[entry])

    def _refused(self, topic: str, count: int, code: int, started: float) -> None:
        """A send refused before the core (ACL, the 5.x shape checks) told to the metrics observer as the core's
        refusals are: remoting counts every refused send, whichever check refused it."""
        observer = self.sender.observer
        if observer is not None:
            observer(topic, count, 0, int(code), perf_counter() - started)

    async def _send_many(self, messages: Any, context: Any, started: float) -> spb.SendMessageResponse:
        """Several messages of one topic (or none: refused), each checked and answered on its own."""
        if not messages:
            self._refused("", 0, ResponseCode.MESSAGE_ILLEGAL, started)
            return spb.SendMessageResponse(status=status(pb.MESSAGE_CORRUPTED, "give one or more messages of one topic"))
        topic = messages[0].topic.name
        if any(m.topic.name != topic for m in messages):
            self._refused(topic, len(messages), ResponseCode.MESSAGE_ILLEGAL, started)
            return spb.SendMessageResponse(status=status(pb.MESSAGE_CORRUPTED,
                                                         "give one or more messages of one topic"))
        peer = context.peer() or ""
        address, requester, born_host = _SENDERS.get(peer) or _sender(peer)
        typed = SendRequest(topic, [], -1, topic, requester, "TBW102", 4)
        if self.access.authorizer is not None:  # aclEnable=false: nothing to decide
            refused = self._admitted("SendMessage", typed.needs(), context)
            if refused is not None:
                self._refused(topic, len(messages), ResponseCode.NO_PERMISSION, started)
                entries = [spb.SendResultEntry(status=refused, message_id=m.system_properties.message_id)
                           for m in messages]
                return spb.SendMessageResponse(status=refused, entries=entries)
        entries: list[spb.SendResultEntry | None] = []
        for message in messages:
            translated = _translate(message, topic, address, born_host, message.body)
            if type(translated) is tuple:
                entries.append(spb.SendResultEntry(status=status(*translated),
                                                   message_id=message.system_properties.message_id))
                continue
            typed.messages.append(translated)
            entries.append(None)
        if len(typed.messages) < len(messages):  # the core counts the others
            self._refused(topic, len(messages) - len(typed.messages), ResponseCode.MESSAGE_ILLEGAL, started)
        results = iter(await self.sender.send_each_settled(typed) if typed.messages else ())
        sent = [m for m, e in zip(messages, entries) if e is None]
        answers = iter([await self._entry(m, next(results)) for m in sent])
        entries = [next(answers) if e is None else e for e in entries]
        codes = {e.status.code for e in entries}
        top = entries[0].status if len(codes) == 1 else status(pb.MULTIPLE_RESULTS)
        return spb.SendMessageResponse(status=top, entries=entries)

    def _admitted(self, rpc: str, needs: Needs, context: Any) -> pb.Status | None:
        """ACL on a typed core request: the caller may do what ``needs`` names (None = allowed)."""
        _caller, refused = self.access.admit(rpc, None, context, _client_id(context), needs=needs)
        return refused

    async def _entry(self, message: pb.Message, result: Any) -> spb.SendResultEntry:
        """One message's result (an Outcome, an awaitable of one, or the exception it raised) as its entry."""
        if isinstance(result, BaseException):
            raise result
        return _entry(message, result if type(result) is Outcome else await result, self.recaller)

    # ---- consumption (broker/grpc/consumer.py) --------------------------------------------------------------
    async def QueryAssignment(self, request: spb.QueryAssignmentRequest, context: Any) -> spb.QueryAssignmentResponse:
        refused = self._refusal("QueryAssignment", request, context)
        if refused is not None:
            return spb.QueryAssignmentResponse(status=refused)
        self._seen(context)
        endpoints = request.endpoints if request.endpoints.addresses else self._own_endpoints()
        return await self.consumers.query_assignment(request, endpoints)

    # decoded, authorized (on the typed request), executed and answered in broker/grpc/consumer.py
    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest,
                             context: Any) -> AsyncIterator[spb.ReceiveMessageResponse]:
        # grpc.aio needs an async generator here; the frames come as a list (no second generator step per frame)
        for frame in await self.consumers.receive_frames(request, context):
            yield frame
        yield closing_frame()

    async def AckMessage(self, request: spb.AckMessageRequest, context: Any) -> spb.AckMessageResponse:
        return await self.consumers.ack(request, context)

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest,
                                      context: Any) -> spb.ChangeInvisibleDurationResponse:
        return await self.consumers.change_invisible(request, context)

    async def ForwardMessageToDeadLetterQueue(self, request: spb.ForwardMessageToDeadLetterQueueRequest,
                                              context: Any) -> spb.ForwardMessageToDeadLetterQueueResponse:
        return await self.consumers.forward_to_dead_letter(request, context)

    # ---- transactions and timed messages ----------------------------------------------------------------------
    async def EndTransaction(self, request: spb.EndTransactionRequest, context: Any) -> spb.EndTransactionResponse:
        """Decoded into the core's typed EndTransactionRequest (authorized as such: PUB on ``request.topic``, which
        the core checks the half record named by the transaction id is of before touching it), decided by the core,
        its Outcome answered as a status (broker/grpc/transactions.py)."""
        typed, problem = self.transactions.typed(request, Requester(_peer_address(context.peer() or ""), "grpc",
                                                                    _client_id(context)))
        refused = self._admitted("EndTransaction", typed.needs(), context)
        if refused is not None:
            return spb.EndTransactionResponse(status=refused)
        topic_problem = validate_topic(request.topic.name)
        if topic_problem is not None:
            return spb.EndTransactionResponse(status=status(pb.ILLEGAL_TOPIC, topic_problem))
        if problem is not None:
            return spb.EndTransactionResponse(status=problem)
        return spb.EndTransactionResponse(status=await self.transactions.end_transaction(typed))

    async def RecallMessage(self, request: spb.RecallMessageRequest, context: Any) -> spb.RecallMessageResponse:
        """Cancel a timed message before its time: the core's recall (broker/core/recall.py), on the typed request."""
        typed = RecallRequest(request.topic.name, request.recall_handle)
        refused = self._admitted("RecallMessage", typed.needs(), context)
        if refused is not None:
            return spb.RecallMessageResponse(status=refused)
        outcome = self.recaller.recall(typed)
        if not outcome.ok:
            return spb.RecallMessageResponse(status=status(_RECALL_CODES.get(outcome.reason) or _send_code(outcome),
                                                           outcome.remark))
        return spb.RecallMessageResponse(status=status(pb.OK), message_id=outcome.value)


_RECALL_CODES = {REASON_RECALL_HANDLE: pb.BAD_REQUEST, REASON_RECALL_NOT_FOUND: pb.NOT_FOUND}
_REASON_CODES = {REASON_BODY_TOO_LARGE: pb.MESSAGE_BODY_TOO_LARGE, REASON_PROPERTIES_TOO_LARGE:
                 pb.MESSAGE_PROPERTIES_TOO_LARGE, REASON_DELIVERY_TIME: pb.ILLEGAL_DELIVERY_TIME,
                 REASON_ILLEGAL_TOPIC: pb.ILLEGAL_TOPIC, REASON_MESSAGE_TYPE: pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE}


def _send_code(outcome: Outcome) -> int:
    """A core send refusal as a gRPC status code (reference §8)."""
    code = _REASON_CODES.get(outcome.reason)
    if code is not None:
        return code
    return {
        ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
        ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
        ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
        ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
        ResponseCode.INVALID_PARAMETER: pb.BAD_REQUEST,
        ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    }.get(outcome.code, pb.INTERNAL_SERVER_ERROR)
