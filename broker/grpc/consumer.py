"""The consumer RPCs of apache.rocketmq.v2.MessagingService over the broker's POP service (broker/pop).

ReceiveMessage pops messages for a group (long polling), AckMessage / ChangeInvisibleDuration /
ForwardMessageToDeadLetterQueue act on a receipt handle, QueryAssignment tells push consumers where to receive.
Messages are read from the one store, so what a remoting producer sent is received here and the reverse.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, AsyncIterator

from broker.grpc.common import duration, no_route_remark, record_message, status, timestamp, to_ms
from broker.filter import SelectorError, UnsupportedExpressionType, build_filter
from broker.managers.derived_names import consumer_group_problem, pop_names_problem
from broker.managers.topic_config import validate_topic
from broker.pop.handle import InvalidHandle, ReceiptHandle
from broker.pop.service import (KIND_BUSY, KIND_HANDLE_EXPIRED, KIND_HANDLE_UNKNOWN,
                                KIND_NOT_FOUND, MAX_BATCH, Delivery, PopError, PopRequest, PopService)
from protocol.codes import PERM_READ
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb

log = logging.getLogger(__name__)

MAX_INVISIBLE_MS = 12 * 3600 * 1000
DEFAULT_MAX_ATTEMPTS = 17


def to_message(delivery: Delivery) -> pb.Message:
    """A delivery as the SDKs expect it: the stored message, its receipt handle and invisible time."""
    message = record_message(delivery.record, delivery.topic, delivery.queue_id, delivery.queue_offset,
                             delivery.attempt)
    message.system_properties.receipt_handle = delivery.handle.encode()
    message.system_properties.invisible_duration.CopyFrom(duration(delivery.handle.invisible_ms))
    return message


class ConsumerRpcs:
    """The consumer half of MessagingService. `settings_of(client_id)` gives a client's last Settings. Access is
    decided before these run (broker/grpc/access.py: SUB on the request's topic and group); a receipt handle is
    honoured only for the delivery in flight that it names, of that topic and group (PopService._locate)."""

    def __init__(self, pop: PopService, topics: Any, groups: Any, config: Any,
                 settings_of: Callable[[str], pb.Settings | None], client_id_of: Callable[[Any], str]) -> None:
        self.pop = pop
        self.topics = topics
        self.groups = groups
        self.config = config
        self.settings_of = settings_of
        self.client_id_of = client_id_of

    # ---- checks --------------------------------------------------------------------------------------------
    def _problem(self, group: str, topic: str) -> pb.Status | None:
        if not self.pop.running:
            return status(pb.FORBIDDEN, "this broker does not serve POP consumption (it is a slave, or stopping): "
                                        "receive from its master")
        problem = consumer_group_problem(group)
        if problem is not None:
            return status(pb.ILLEGAL_CONSUMER_GROUP, problem)
        problem = validate_topic(topic)
        if problem is not None:
            return status(pb.ILLEGAL_TOPIC, problem)
        config = self.topics.get(topic)
        if config is None:
            return status(pb.TOPIC_NOT_FOUND, no_route_remark(topic))
        group_config = self.groups.find_or_create(group)
        if group_config is None:
            return status(pb.CONSUMER_GROUP_NOT_FOUND, f"consumer group {group} does not exist")
        if not group_config.consume_enable:
            return status(pb.FORBIDDEN, f"consumer group {group} may not consume now (consumeEnable=false)")
        return None

    def max_attempts(self, group: str) -> int:
        config = self.groups.find(group)
        return config.retry_max_times + 1 if config is not None else DEFAULT_MAX_ATTEMPTS

    def fifo(self, group: str) -> bool:
        config = self.groups.find(group)
        return bool(config is not None and config.consume_message_orderly)

    # ---- QueryAssignment -----------------------------------------------------------------------------------
    async def query_assignment(self, request: spb.QueryAssignmentRequest,
                               endpoints: pb.Endpoints) -> spb.QueryAssignmentResponse:
        group, topic = request.group.name, request.topic.name
        problem = self._problem(group, topic) or _pop_names_status(group, topic)
        if problem is not None:
            return spb.QueryAssignmentResponse(status=problem)
        config = self.topics.get(topic)
        if not config.perm & PERM_READ or config.read_queue_nums <= 0:
            return spb.QueryAssignmentResponse(status=status(pb.FORBIDDEN, "no readable queue"))
        broker = pb.Broker(name=self.config.broker_name, id=0, endpoints=endpoints)
        queue_ids = range(config.read_queue_nums) if self.fifo(group) else (-1,)
        assignments = [pb.Assignment(message_queue=pb.MessageQueue(
            topic=request.topic, id=queue_id, permission=pb.READ_WRITE, broker=broker,
            accept_message_types=[pb.NORMAL, pb.FIFO, pb.DELAY])) for queue_id in queue_ids]
        return spb.QueryAssignmentResponse(status=status(pb.OK), assignments=assignments)

    # ---- ReceiveMessage ------------------------------------------------------------------------------------
    async def receive(self, request: spb.ReceiveMessageRequest,
                      context: Any) -> AsyncIterator[spb.ReceiveMessageResponse]:
        pop_request, poll_s, failure = self._pop_request(request, context)
        deliveries: list[Delivery] = []
        if failure is None:
            try:
                deliveries = await self.pop.receive(pop_request, poll_s)
            except PopError as exc:
                failure = status(_pop_code(exc.kind), str(exc))
        if failure is not None:
            yield spb.ReceiveMessageResponse(status=failure)
        elif not deliveries:
            yield spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield spb.ReceiveMessageResponse(status=status(pb.OK))
            for delivery in deliveries:
                yield spb.ReceiveMessageResponse(message=to_message(delivery))
        # the closing frame: the server's clock when the answer is complete, as the reference stamps it
        yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(int(time.time() * 1000)))

    def _pop_request(self, request: spb.ReceiveMessageRequest,
                     context: Any) -> tuple[PopRequest | None, float, pb.Status | None]:
        group, topic = request.group.name, request.message_queue.topic.name
        problem = self._problem(group, topic) or _pop_names_status(group, topic)
        if problem is not None:
            return None, 0.0, problem
        client_id = self.client_id_of(context)
        if request.auto_renew:
            invisible_ms = self.pop.renew.invisible_ms
        else:
            if not request.HasField("invisible_duration"):
                return None, 0.0, status(pb.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required without auto_renew")
            invisible_ms = to_ms(request.invisible_duration)
            low = self.config.min_invisible_time_mills_for_recv
            if not low <= invisible_ms <= MAX_INVISIBLE_MS:
                return None, 0.0, status(pb.ILLEGAL_INVISIBLE_TIME,
                                         f"the invisible duration must be {low} ms to 12 h, got {invisible_ms} ms")
        if request.batch_size < 1:
            return None, 0.0, status(pb.BAD_REQUEST, f"batch_size must be at least 1, got {request.batch_size}")
        expression = request.filter_expression
        kind = "SQL92" if expression.type == pb.SQL else "TAG"
        text = expression.expression or "*"
        try:
            message_filter = build_filter(kind, text)
        except (SelectorError, UnsupportedExpressionType, ValueError) as exc:
            return None, 0.0, status(pb.ILLEGAL_FILTER_EXPRESSION, f"bad {kind} expression {text!r}: {exc}")
        tag_names = None
        if kind == "TAG" and text.strip() != "*":
            tag_names = frozenset(t.strip() for t in text.split("||") if t.strip())
        settings = self.settings_of(client_id)
        max_attempts = (settings.backoff_policy.max_attempts if settings is not None and
                        settings.backoff_policy.max_attempts > 0 else self.max_attempts(group))
        low_s = self.config.grpc_client_consumer_min_long_polling_timeout_millis / 1000
        high_s = self.config.grpc_client_consumer_max_long_polling_timeout_millis / 1000
        wanted = to_ms(request.long_polling_timeout) / 1000 if request.HasField("long_polling_timeout") else high_s
        poll_s = min(max(wanted, low_s), high_s)
        remaining = context.time_remaining() if context is not None else None
        if remaining is not None:
            poll_s = max(0.0, min(poll_s, remaining - 0.5))
        return PopRequest(group=group, topic=topic, batch=min(request.batch_size, MAX_BATCH),
                          invisible_ms=invisible_ms, max_attempts=max_attempts, fifo=self.fifo(group),
                          message_filter=message_filter, tag_names=tag_names,
                          renew_client=client_id if request.auto_renew else "",
                          attempt_id=request.attempt_id if request.HasField("attempt_id") else ""), poll_s, None

    # ---- AckMessage ----------------------------------------------------------------------------------------
    async def ack(self, request: spb.AckMessageRequest) -> spb.AckMessageResponse:
        group, topic = request.group.name, request.topic.name
        problem = self._problem(group, topic)
        if problem is not None:
            return spb.AckMessageResponse(status=problem)
        if not request.entries:
            return spb.AckMessageResponse(status=status(pb.BAD_REQUEST, "no entries to ack"))
        results = []
        for entry in request.entries:
            try:
                self.pop.ack(group, topic, ReceiptHandle.decode(entry.receipt_handle))
                outcome = status(pb.OK)
            except (InvalidHandle, PopError) as exc:
                outcome = status(_handle_code(exc), str(exc))
            results.append(spb.AckMessageResultEntry(message_id=entry.message_id,
                                                     receipt_handle=entry.receipt_handle, status=outcome))
        codes = {r.status.code for r in results}
        top = results[0].status if len(codes) == 1 else status(pb.MULTIPLE_RESULTS)
        return spb.AckMessageResponse(status=top, entries=results)

    # ---- ChangeInvisibleDuration ---------------------------------------------------------------------------
    async def change_invisible(self, request: spb.ChangeInvisibleDurationRequest
                               ) -> spb.ChangeInvisibleDurationResponse:
        group, topic = request.group.name, request.topic.name
        problem = self._problem(group, topic)
        if problem is not None:
            return spb.ChangeInvisibleDurationResponse(status=problem)
        invisible_ms = to_ms(request.invisible_duration)
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            return spb.ChangeInvisibleDurationResponse(status=status(
                pb.ILLEGAL_INVISIBLE_TIME, f"the invisible duration must be 0 to 12 h, got {invisible_ms} ms"))
        try:
            handle = self.pop.change_invisible(group, topic, ReceiptHandle.decode(request.receipt_handle),
                                               invisible_ms)
        except (InvalidHandle, PopError) as exc:
            return spb.ChangeInvisibleDurationResponse(status=status(_handle_code(exc), str(exc)))
        return spb.ChangeInvisibleDurationResponse(status=status(pb.OK), receipt_handle=handle.encode())

    # ---- ForwardMessageToDeadLetterQueue -------------------------------------------------------------------
    async def forward_to_dead_letter(self, request: spb.ForwardMessageToDeadLetterQueueRequest
                                     ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        group, topic = request.group.name, request.topic.name
        problem = self._problem(group, topic)
        if problem is not None:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=problem)
        try:
            await self.pop.forward_to_dead_letter(group, topic, ReceiptHandle.decode(request.receipt_handle))
        except (InvalidHandle, PopError) as exc:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=status(_handle_code(exc), str(exc)))
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.OK))


def _pop_names_status(group: str, topic: str) -> pb.Status | None:
    """A group and topic whose POP retry topic name would be too long are refused when the group first receives (acks
    and invisibility changes of deliveries made before are still served)."""
    problem = pop_names_problem(group, topic)
    return None if problem is None else status(pb.ILLEGAL_CONSUMER_GROUP, problem)


def _handle_code(exc: Exception) -> int:
    if isinstance(exc, InvalidHandle):
        return pb.INVALID_RECEIPT_HANDLE
    return _pop_code(exc.kind)


def _pop_code(kind: str) -> int:
    return {KIND_HANDLE_EXPIRED: pb.INVALID_RECEIPT_HANDLE, KIND_HANDLE_UNKNOWN: pb.INVALID_RECEIPT_HANDLE,
            KIND_NOT_FOUND: pb.NOT_FOUND, KIND_BUSY: pb.TOO_MANY_REQUESTS}.get(kind, pb.INTERNAL_SERVER_ERROR)
