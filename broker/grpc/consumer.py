"""The consumer RPCs of apache.rocketmq.v2.MessagingService: protobuf <-> the core's typed POP requests.

Where a gRPC consumer call goes: each RPC here decodes its protobuf request into a typed request of
broker/core/pop.py (``*_request`` below), has the broker's one authorizer decide on that object's ``needs()``
(``admit``: broker/grpc/access.py), lets :class:`~broker.core.pop.PopCore` execute it, and encodes the Outcome
(``_code`` maps the core's response codes to gRPC's). Messages are read from the one store, so what a remoting
producer sent is received here and the reverse. QueryAssignment tells push consumers where to receive.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, AsyncIterator

from broker.acl.authorizer import Needs
from broker.core.outcome import Outcome
from broker.core.pop import (AckRequest, ChangeInvisibilityRequest, DeadLetterRequest, PopCore,
                             PopReceiveRequest)
from broker.grpc.common import fill_message, status, timestamp, to_ms
from broker.pop.service import Delivery
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
    invisible time."""
    frame = spb.ReceiveMessageResponse()
    sp = fill_message(frame.message, delivery.record, delivery.topic, delivery.queue_id, delivery.queue_offset,
                      delivery.attempt)
    handle = delivery.handle
    sp.receipt_handle = handle.encode()
    invisible = handle.invisible_ms
    sp.invisible_duration.seconds, sp.invisible_duration.nanos = invisible // 1000, (invisible % 1000) * 1_000_000
    return frame


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
        frames = [spb.ReceiveMessageResponse(status=_OK_STATUS)]
        frames += map(message_frame, outcome.value)
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
        entries = response.entries
        codes = set()
        for entry, answer in zip(request.entries, outcome.value):
            result = entries.add(message_id=entry.message_id, receipt_handle=entry.receipt_handle)
            if answer.ok:
                result.status.code, result.status.message = pb.OK, "OK"
                codes.add(pb.OK)
            else:
                code = _code(answer)
                result.status.code, result.status.message = code, answer.remark
                codes.add(code)
        response.status.CopyFrom(entries[0].status if len(codes) == 1 else status(pb.MULTIPLE_RESULTS))
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
