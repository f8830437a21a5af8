"""POP consumption: typed receive / ack / change-invisibility requests in, Outcomes out, over the POP service.

A front end (today gRPC's ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue in
broker/grpc/consumer.py) decodes its request into one of these dataclasses, has the one authorizer decide on
``request.needs()``, calls :class:`PopCore`, and encodes the outcome. The checks a POP request must pass (the
service runs here, the names are legal, topic and group exist and may be consumed, the invisible time and batch are
in range, the filter compiles) are made here, once for every protocol.

Refusal codes are ResponseCodes; ``Outcome.reason`` names the field at fault where one code covers several
(INVALID_PARAMETER: ``group``, ``topic``, ``invisible_time``, ``batch_size``, ``entries``, ``receipt_handle``;
NO_PERMISSION: ``broker`` (the service does not run here) or ``group``). An empty receive is a success with no
deliveries; a handle of a delivery acked already is acked again harmlessly."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.acl.authorizer import Needs
from broker.core.consume import GroupNames, consumer_needs
from broker.core.outcome import Outcome
from broker.filter import SelectorError, UnsupportedExpressionType, build_filter
from broker.managers.derived_names import pop_names_problem
from broker.managers.topic_config import no_route_remark, validate_topic
from broker.pop.handle import InvalidHandle, ReceiptHandle
from broker.pop.service import PopService
from broker.pop.types import (KIND_BUSY, KIND_HANDLE_EXPIRED, KIND_HANDLE_UNKNOWN, KIND_NOT_FOUND, MAX_BATCH, Delivery,
                              PopError, PopRequest)
from protocol.codes import ResponseCode

__all__ = ["AckRequest", "ChangeInvisibilityRequest", "DeadLetterRequest", "MAX_INVISIBLE_MS", "PopCore",
           "PopReceiveRequest"]

MAX_INVISIBLE_MS = 12 * 3600 * 1000
DEFAULT_MAX_ATTEMPTS = 17


@dataclass(slots=True)
class PopReceiveRequest:
    """Pop up to ``batch`` messages of ``topic`` for ``group`` (every readable queue when ``queue_id`` is -1),
    invisible ``invisible_ms`` (required unless ``auto_renew``: then the client's liveness keeps them invisible),
    waiting up to ``poll_ms`` (None: the broker's longest) but never past ``time_left_s`` (the caller's deadline)."""

    group: str
    topic: str
    batch: int
    invisible_ms: int | None = None
    auto_renew: bool = False
    client_id: str = ""
    queue_id: int = -1
    expression_type: str = "TAG"
    expression: str = "*"
    poll_ms: int | None = None
    time_left_s: float | None = None
    attempt_id: str = ""
    max_attempts: int = 0  # 0: the group's retryMaxTimes + 1

    def needs(self) -> Needs:
        return consumer_needs(self.group, self.topic)


@dataclass(slots=True)
class AckRequest:
    """Finish the deliveries named by ``handles`` (receipt-handle texts), one answer per handle."""

    group: str
    topic: str
    handles: list[str] = field(default_factory=list)

    def needs(self) -> Needs:
        return consumer_needs(self.group, self.topic)


@dataclass(slots=True)
class ChangeInvisibilityRequest:
    """The delivery ``handle`` names stays invisible ``invisible_ms`` from now; answers the handle superseding it."""

    group: str
    topic: str
    handle: str
    invisible_ms: int

    def needs(self) -> Needs:
        return consumer_needs(self.group, self.topic)


@dataclass(slots=True)
class DeadLetterRequest:
    """Move the delivery ``handle`` names to the group's dead-letter topic now."""

    group: str
    topic: str
    handle: str

    def needs(self) -> Needs:
        return consumer_needs(self.group, self.topic)


def _refusal(exc: Exception) -> Outcome[Any]:
    """A PopError or InvalidHandle as an Outcome."""
    if isinstance(exc, InvalidHandle):
        return Outcome.refused(ResponseCode.INVALID_PARAMETER, str(exc), "receipt_handle")
    kind = getattr(exc, "kind", "")
    if kind in (KIND_HANDLE_EXPIRED, KIND_HANDLE_UNKNOWN):
        return Outcome.refused(ResponseCode.INVALID_PARAMETER, str(exc), "receipt_handle")
    if kind == KIND_NOT_FOUND:
        return Outcome.refused(ResponseCode.QUERY_NOT_FOUND, str(exc))
    if kind == KIND_BUSY:
        return Outcome.refused(ResponseCode.POLLING_FULL, str(exc))
    return Outcome.refused(ResponseCode.SYSTEM_ERROR, str(exc))


_OK: Outcome[None] = Outcome.success()


class PopCore:
    """Executes POP requests on ``pop`` (the POP service), checking them against the topic and group registries
    and ``settings`` (minInvisibleTimeMillsForRecv and the long-polling bounds, read per request)."""

    def __init__(self, pop: PopService, topics: Any, groups: Any, settings: Any,
                 group_names: GroupNames | None = None) -> None:
        self.pop = pop
        self.topics = topics
        self.groups = groups
        self.settings = settings
        self.group_names = group_names or GroupNames()

    # ---- checks -----------------------------------------------------------------------------------------------
    def check(self, group: str, topic: str) -> Outcome[Any] | None:
        """None when ``group`` may consume ``topic`` by POP here, else the refusal."""
        if not self.pop.running:
            return Outcome.refused(ResponseCode.NO_PERMISSION, "this broker does not serve POP consumption (it is "
                                                               "a slave, or stopping): receive from its master",
                                   "broker")
        problem = self.group_names.problem(group)
        if problem is not None:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, problem, "group")
        problem = validate_topic(topic)
        if problem is not None:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, problem, "topic")
        if self.topics.get(topic) is None:
            return Outcome.refused(ResponseCode.TOPIC_NOT_EXIST, no_route_remark(topic), "topic")
        group_config = self.groups.find_or_create(group)
        if group_config is None:
            return Outcome.refused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"consumer group {group} does not exist",
                                   "group")
        if not group_config.consume_enable:
            return Outcome.refused(ResponseCode.NO_PERMISSION,
                                   f"consumer group {group} may not consume now (consumeEnable=false)", "group")
        return None

    def check_first_receive(self, group: str, topic: str) -> Outcome[Any] | None:
        """``check``, and the group's POP retry topic name must fit (refused when the group first receives; acks and
        invisibility changes of deliveries made before are still served)."""
        refused = self.check(group, topic)
        if refused is None:
            problem = pop_names_problem(group, topic)
            if problem is not None:
                refused = Outcome.refused(ResponseCode.INVALID_PARAMETER, problem, "group")
        return refused

    def max_attempts(self, group: str) -> int:
        config = self.groups.find(group)
        return config.retry_max_times + 1 if config is not None else DEFAULT_MAX_ATTEMPTS

    def fifo(self, group: str) -> bool:
        config = self.groups.find(group)
        return bool(config is not None and config.consume_message_orderly)

    # ---- receive ------------------------------------------------------------------------------------------------
    def _pop_request(self, request: PopReceiveRequest) -> tuple[PopRequest | None, float, Outcome[Any] | None]:
        refused = self.check_first_receive(request.group, request.topic)
        if refused is not None:
            return None, 0.0, refused
        cfg = self.settings
        if request.auto_renew:
            invisible_ms = self.pop.renew.invisible_ms
        else:
            if request.invisible_ms is None:
                return None, 0.0, Outcome.refused(ResponseCode.INVALID_PARAMETER,
                                                  "invisible_duration is required without auto_renew",
                                                  "invisible_time")
            invisible_ms = request.invisible_ms
            low = cfg.min_invisible_time_mills_for_recv
            if not low <= invisible_ms <= MAX_INVISIBLE_MS:
                return None, 0.0, Outcome.refused(
                    ResponseCode.INVALID_PARAMETER,
                    f"the invisible duration must be {low} ms to 12 h, got {invisible_ms} ms", "invisible_time")
        if request.batch < 1:
            return None, 0.0, Outcome.refused(ResponseCode.INVALID_PARAMETER,
                                              f"batch_size must be at least 1, got {request.batch}", "batch_size")
        kind = "SQL92" if request.expression_type.upper() in ("SQL", "SQL92") else "TAG"
        text = request.expression or "*"
        try:
            message_filter = build_filter(kind, text)
        except (SelectorError, UnsupportedExpressionType, ValueError) as exc:
            return None, 0.0, Outcome.refused(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                              f"bad {kind} expression {text!r}: {exc}", "filter")
        tag_names = None
        if kind == "TAG" and text.strip() != "*":
            tag_names = frozenset(t.strip() for t in text.split("||") if t.strip())
        low_s = cfg.grpc_client_consumer_min_long_polling_timeout_millis / 1000
        high_s = cfg.grpc_client_consumer_max_long_polling_timeout_millis / 1000
        wanted = request.poll_ms / 1000 if request.poll_ms is not None else high_s
        poll_s = min(max(wanted, low_s), high_s)
        if request.time_left_s is not None:
            poll_s = max(0.0, min(poll_s, request.time_left_s - 0.5))
        return PopRequest(group=request.group, topic=request.topic, batch=min(request.batch, MAX_BATCH),
                          invisible_ms=invisible_ms, max_attempts=request.max_attempts or
                          self.max_attempts(request.group), fifo=self.fifo(request.group),
                          message_filter=message_filter, tag_names=tag_names,
                          renew_client=request.client_id if request.auto_renew else "",
                          attempt_id=request.attempt_id), poll_s, None

    async def receive(self, request: PopReceiveRequest) -> Outcome[list[Delivery]]:
        """Up to ``batch`` deliveries, waiting for messages on the broker's new-message notification."""
        pop_request, poll_s, refused = self._pop_request(request)
        if refused is not None:
            return refused
        try:
            deliveries = await self.pop.receive(pop_request, poll_s)
        except (PopError, InvalidHandle) as exc:
            return _refusal(exc)
        return Outcome.success(deliveries)

    # ---- ack, invisibility, dead letters ----------------------------------------------------------------------
    def ack(self, request: AckRequest) -> Outcome[list[Outcome[None]]]:
        """One outcome per handle, in order; the bookkeeping of all of them is done per queue (one journal line
        and one offset commit per queue touched)."""
        refused = self.check(request.group, request.topic)
        if refused is not None:
            return refused
        if not request.handles:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, "no entries to ack", "entries")
        problems = self.pop.ack_many(request.group, request.topic, request.handles)
        return Outcome.success([_OK if problem is None else _refusal(problem) for problem in problems])

    def change_invisibility(self, request: ChangeInvisibilityRequest) -> Outcome[ReceiptHandle]:
        refused = self.check(request.group, request.topic)
        if refused is not None:
            return refused
        if not 0 <= request.invisible_ms <= MAX_INVISIBLE_MS:
            return Outcome.refused(ResponseCode.INVALID_PARAMETER, f"the invisible duration must be 0 to 12 h, got "
                                   f"{request.invisible_ms} ms", "invisible_time")
        try:
            handle = self.pop.change_invisible(request.group, request.topic, ReceiptHandle.decode(request.handle),
                                               request.invisible_ms)
        except (InvalidHandle, PopError) as exc:
            return _refusal(exc)
        return Outcome.success(handle)

    async def forward_to_dead_letter(self, request: DeadLetterRequest) -> Outcome[None]:
        refused = self.check(request.group, request.topic)
        if refused is not None:
            return refused
        try:
            await self.pop.forward_to_dead_letter(request.group, request.topic, ReceiptHandle.decode(request.handle))
        except (InvalidHandle, PopError) as exc:
            return _refusal(exc)
        return _OK
