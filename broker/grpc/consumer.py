"""The consumer RPCs of apache.rocketmq.v2.MessagingService: protobuf <-> the core's typed POP requests.

Where a gRPC consumer call goes: each RPC here decodes its protobuf request into a typed request of
broker/core/pop.py (``*_request`` below), has the broker's one authorizer decide on that object's ``needs()``
(``admit``: broker/grpc/access.py), lets :class:`~broker.core.pop.PopCore` execute it, and encodes the Outcome
(``_code`` maps the core's response codes to gRPC's). Messages are read from the one store, so what a remoting
producer sent is received here and the reverse. QueryAssignment tells push consumers where to receive.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any, AsyncIterator

from broker.acl.authorizer import Needs
from broker.core.outcome import Outcome
from broker.core.pop import (AckRequest, ChangeInvisibilityRequest, DeadLetterRequest, PopCore,
                             PopReceiveRequest)
from broker.grpc.common import SYSTEM_PROPERTY_NAMES, fill_from_properties, fill_message, status, timestamp, to_ms
from broker.pop.types import Delivery
from protocol.codes import PERM_READ, ResponseCode
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb

log = logging.getLogger(__name__)

# The core's codes as gRPC statuses; INVALID_PARAMETER by the field at fault (Outcome.reason).
_CODES = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: pb.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.POLLING_FULL: pb.TOO_MANY_REQUESTS,
    ResponseCode.QUERY_NOT_FOUND: pb.NOT_FOUND,
}
_INVALID = {"group": pb.ILLEGAL_CONSUMER_GROUP, "topic": pb.ILLEGAL_TOPIC, "invisible_time": pb.ILLEGAL_INVISIBLE_TIME,
            "receipt_handle": pb.INVALID_RECEIPT_HANDLE}
_OK_STATUS = status(pb.OK)
_OK_FRAME = spb.ReceiveMessageResponse(status=_OK_STATUS)
_OK_ACK_ENTRY = spb.AckMessageResultEntry(status=pb.Status(code=pb.OK, message="OK"))

Admit = Callable[[str, Needs, Any], "pb.Status | None"]


def _code(outcome: Outcome[Any]) -> int:
    if outcome.code == ResponseCode.INVALID_PARAMETER:
        return _INVALID.get(outcome.reason, pb.BAD_REQUEST)
    return _CODES.get(outcome.code, pb.INTERNAL_SERVER_ERROR)


def _status(outcome: Outcome[Any]) -> pb.Status:
    return _OK_STATUS if outcome.ok else status(_code(outcome), outcome.remark)


# ---- wire -> typed ---------------------------------------------------------------------------------------------
def receive_request(request: spb.ReceiveMessageRequest, client_id: str, settings: pb.Settings | None,
                    time_left_s: float | None) -> PopReceiveRequest:
    expression = request.filter_expression
    return PopReceiveRequest(
        group=request.group.name, topic=request.message_queue.topic.name, batch=request.batch_size,
        invisible_ms=to_ms(request.invisible_duration) if request.HasField("invisible_duration") else None,
        auto_renew=request.auto_renew, client_id=client_id,
        expression_type="SQL92" if expression.type == pb.SQL else "TAG", expression=expression.expression or "*",
        poll_ms=to_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else None,
        time_left_s=time_left_s, attempt_id=request.attempt_id if request.HasField("attempt_id") else "",
        max_attempts=settings.backoff_policy.max_attempts if settings is not None and
        settings.backoff_policy.max_attempts > 0 else 0)


def ack_request(request: spb.AckMessageRequest) -> AckRequest:
    return AckRequest(request.group.name, request.topic.name, [entry.receipt_handle for entry in request.entries])


def change_request(request: spb.ChangeInvisibleDurationRequest) -> ChangeInvisibilityRequest:
    return ChangeInvisibilityRequest(request.group.name, request.topic.name, request.receipt_handle,
                                     to_ms(request.invisible_duration))


# ---- typed -> wire ---------------------------------------------------------------------------------------------
def closing_frame() -> spb.ReceiveMessageResponse:
    """A receive's closing frame: the server's clock when the answer is complete, as the reference stamps it."""
    return spb.ReceiveMessageResponse(delivery_timestamp=timestamp(int(time.time() * 1000)))


def message_frame(delivery: Delivery) -> spb.ReceiveMessageResponse:
    """One delivery as the SDKs expect it (reference §10), built in place in its response frame (no copies): id =
    UNIQ_KEY, an upper-case MD5 digest, tag, keys, group, the application's properties only, the receipt handle and
    invisible time. The definition ``message_frames`` must agree with (tests/unit/test_grpc_receive_frames.py)."""
    frame = spb.ReceiveMessageResponse()
    sp = fill_message(frame.message, delivery.record, delivery.topic, delivery.queue_id, delivery.queue_offset,
                      delivery.attempt)
    sp.receipt_handle = delivery.handle_text
    invisible = delivery.invisible_ms
    sp.invisible_duration.seconds, sp.invisible_duration.nanos = invisible // 1000, (invisible % 1000) * 1_000_000
    return frame


# Stored properties that change nothing in a delivery beyond what ``message_frames`` writes for every message
# (UNIQ_KEY, TAGS, __BORNHOST): a record with no other property (the usual case) skips ``fill_from_properties``.
_PLAIN_PROPERTIES = SYSTEM_PROPERTY_NAMES - {
    "KEYS", "__SHARDINGKEY", "TRACE_CONTEXT", "TIMER_DELIVER_MS", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID",
    "TRAN_MSG", "DELAY", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"}


def message_frames(deliveries: list[Delivery]) -> list[spb.ReceiveMessageResponse]:
    """The frames of one receive's deliveries, equal to ``message_frame`` of each, built with fewer protobuf writes
    (a receive's frames are most of its cost): each frame starts as a copy of a template holding what the batch's
    messages usually share (topic, digest type, encoding, type, store host, attempt 1, invisible time), then only a
    message's own fields are written, and its properties go through ``fill_from_properties`` only when it has one
    beyond the plain ones."""
    if not deliveries:
        return []
    first = deliveries[0]
    topic, invisible, store_host = first.topic, first.invisible_ms, first.record.store_host
    template = spb.ReceiveMessageResponse()
    template.message.topic.name = topic
    tsp = template.message.system_properties
    tsp.body_digest.type = pb.MD5
    tsp.body_encoding, tsp.message_type, tsp.delivery_attempt = pb.IDENTITY, pb.NORMAL, 1
    tsp.store_host = f"{store_host[0]}:{store_host[1]}"
    tsp.invisible_duration.seconds, tsp.invisible_duration.nanos = invisible // 1000, (invisible % 1000) * 1_000_000
    new_frame, md5, plain = spb.ReceiveMessageResponse, hashlib.md5, _PLAIN_PROPERTIES
    frames = []
    born_hosts: dict[tuple[str, int], str] = {}
    for delivery in deliveries:
        record = delivery.record
        props = record.properties
        frame = new_frame()
        frame.CopyFrom(template)
        message = frame.message
        message.body = body = record.body
        sp = message.system_properties
        sp.message_id = props.get("UNIQ_KEY") or record.offset_msg_id
        sp.body_digest.checksum = md5(body).hexdigest().upper()
        born, stored = record.born_timestamp, record.store_timestamp
        stamp = sp.born_timestamp
        stamp.seconds, stamp.nanos = born // 1000, (born % 1000) * 1_000_000
        born_host = props.get("__BORNHOST")
        if not born_host:
            born_host = born_hosts.get(record.born_host)
            if born_host is None:
                born_host = born_hosts[record.born_host] = f"{record.born_host[0]}:{record.born_host[1]}"
        sp.born_host = born_host
        stamp = sp.store_timestamp
        stamp.seconds, stamp.nanos = stored // 1000, (stored % 1000) * 1_000_000
        sp.queue_id, sp.queue_offset = delivery.queue_id, delivery.queue_offset
        sp.receipt_handle = delivery.handle_text
        tag = props.get("TAGS")
        if tag:
            sp.tag = tag
        if record.sys_flag & 1:
            sp.body_encoding = pb.GZIP
        if delivery.attempt != 1:
            sp.delivery_attempt = delivery.attempt
        if record.store_host != store_host:
            sp.store_host = f"{record.store_host[0]}:{record.store_host[1]}"
        if delivery.topic != topic:
            message.topic.name = delivery.topic
        if delivery.invisible_ms != invisible:
            ms = delivery.invisible_ms
            sp.invisible_duration.seconds, sp.invisible_duration.nanos = ms // 1000, (ms % 1000) * 1_000_000
        if not props.keys() <= plain:
            fill_from_properties(message, sp, props)
        frames.append(frame)
    return frames


class ConsumerRpcs:
    """The consumer half of MessagingService over the core's PopCore. ``settings_of(client_id)`` gives a client's
    last Settings; ``client_id_of(context)`` the caller's client id; ``admit(rpc, needs, context)`` authenticates
    the caller, decides on the typed request's needs and notes an admitted client alive (None = allowed, else the
    refusal's status). A receipt handle is honoured only for the delivery in flight that it names, of that topic
    and group (PopService._locate)."""

    def __init__(self, core: PopCore, broker_name: str, settings_of: Callable[[str], pb.Settings | None],
                 client_id_of: Callable[[Any], str], admit: Admit) -> None:
        self.core = core
        self.broker_name = broker_name
        self.settings_of = settings_of
        self.client_id_of = client_id_of
        self.admit = admit

    def max_attempts(self, group: str) -> int:
        return self.core.max_attempts(group)

    def fifo(self, group: str) -> bool:
        return self.core.fifo(group)

    # ---- QueryAssignment -----------------------------------------------------------------------------------
    async def query_assignment(self, request: spb.QueryAssignmentRequest,
                               endpoints: pb.Endpoints) -> spb.QueryAssignmentResponse:
        group, topic = request.group.name, request.topic.name
        refused = self.core.check_first_receive(group, topic)
        if refused is not None:
            return spb.QueryAssignmentResponse(status=_status(refused))
        config = self.core.topics.get(topic)
        if not config.perm & PERM_READ or config.read_queue_nums <= 0:
            return spb.QueryAssignmentResponse(status=status(pb.FORBIDDEN, "no readable queue"))
        broker = pb.Broker(name=self.broker_name, id=0, endpoints=endpoints)
        queue_ids = range(config.read_queue_nums) if self.fifo(group) else (-1,)
        assignments = [pb.Assignment(message_queue=pb.MessageQueue(
            topic=request.topic, id=queue_id, permission=pb.READ_WRITE, broker=broker,
            accept_message_types=[pb.NORMAL, pb.FIFO, pb.DELAY])) for queue_id in queue_ids]
        return spb.QueryAssignmentResponse(status=status(pb.OK), assignments=assignments)

    # ---- ReceiveMessage ------------------------------------------------------------------------------------
    async def receive(self, request: spb.ReceiveMessageRequest,
                      context: Any) -> AsyncIterator[spb.ReceiveMessageResponse]:
        for frame in await self.receive_frames(request, context):
            yield frame
        yield closing_frame()

    async def receive_frames(self, request: spb.ReceiveMessageRequest,
                             context: Any) -> list[spb.ReceiveMessageResponse]:
        """The answer's frames but the closing one (``closing_frame()``, stamped when they are written): a status,
        then one per message. A list, so the servicer's own generator yields them without a second generator's
        step per frame."""
        client_id = self.client_id_of(context)
        typed = receive_request(request, client_id, self.settings_of(client_id),
                                context.time_remaining() if context is not None else None)
        failure = self.admit("ReceiveMessage", typed.needs(), context)
        if failure is None:
            outcome = await self.core.receive(typed)
            if not outcome.ok:
                failure = _status(outcome)
        if failure is not None:
            return [spb.ReceiveMessageResponse(status=failure)]
        if not outcome.value:
            return [spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))]
        frames = [_OK_FRAME]  # shared: frames are only serialized once yielded
        frames += message_frames(outcome.value)
        return frames

    # ---- AckMessage ----------------------------------------------------------------------------------------
    async def ack(self, request: spb.AckMessageRequest, context: Any) -> spb.AckMessageResponse:
        typed = ack_request(request)
        refused = self.admit("AckMessage", typed.needs(), context)
        if refused is not None:
            return spb.AckMessageResponse(status=refused)
        outcome = self.core.ack(typed)
        if not outcome.ok:
            return spb.AckMessageResponse(status=_status(outcome))
        response = spb.AckMessageResponse()
        add = response.entries.add
        codes = set()
        for entry, handle, answer in zip(request.entries, typed.handles, outcome.value):
            result = add()
            if answer.ok:
                result.CopyFrom(_OK_ACK_ENTRY)  # the status, with one write
                codes.add(pb.OK)
            else:
                code = _code(answer)
                result.status.code, result.status.message = code, answer.remark
                codes.add(code)
            result.message_id, result.receipt_handle = entry.message_id, handle
        response.status.CopyFrom(response.entries[0].status if len(codes) == 1 else status(pb.MULTIPLE_RESULTS))
        return response

    # ---- ChangeInvisibleDuration ---------------------------------------------------------------------------
    async def change_invisible(self, request: spb.ChangeInvisibleDurationRequest,
                               context: Any) -> spb.ChangeInvisibleDurationResponse:
        typed = change_request(request)
        refused = self.admit("ChangeInvisibleDuration", typed.needs(), context)
        if refused is not None:
            return spb.ChangeInvisibleDurationResponse(status=refused)
        outcome = self.core.change_invisibility(typed)
        if not outcome.ok:
            return spb.ChangeInvisibleDurationResponse(status=_status(outcome))
        return spb.ChangeInvisibleDurationResponse(status=_OK_STATUS, receipt_handle=outcome.value.encode())

    # ---- ForwardMessageToDeadLetterQueue -------------------------------------------------------------------
    async def forward_to_dead_letter(self, request: spb.ForwardMessageToDeadLetterQueueRequest,
                                     context: Any) -> spb.ForwardMessageToDeadLetterQueueResponse:
        typed = DeadLetterRequest(request.group.name, request.topic.name, request.receipt_handle)
        refused = self.admit("ForwardMessageToDeadLetterQueue", typed.needs(), context)
        if refused is not None:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=refused)
        outcome = await self.core.forward_to_dead_letter(typed)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=_status(outcome))
