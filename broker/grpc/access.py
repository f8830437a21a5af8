"""Who may make each gRPC call: the broker's one Authorizer (broker/acl/authorizer.py) decides, as for remoting.

A call is turned into a caller and a list of resources (``Needs``):

* the caller comes from the 5.x SDKs' metadata: ``authorization: MQv2-HMAC-SHA1 Credential=<ak>[/...],
  SignedHeaders=x-mq-date-time, Signature=<hex>`` over ``x-mq-date-time``, which must be within
  ``aclTimeToleranceSeconds`` of the broker's clock (``Authorizer.authenticate_timed``), so a captured signature
  expires;
* the resources come from ``NEEDS``, one entry per RPC of the service, each reading the very protobuf request the
  handler then acts on (the 5.x reference's table: a send needs PUB on each message's topic, a consumer call SUB on
  its topic and its group, a route ANY on its topic; a ``%RETRY%g`` topic is group g's resource).

Every RPC is authenticated, NotifyClientTermination included, and a client id is bound to the identity that first
used it while it stays in use (``ClientOwners``): another account cannot end, re-register or keep alive a session
it did not open.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.acl.accounts import PUB, SUB, group_resource, unmap_ipv4
from broker.acl.authorizer import ANY_ACCESS, Authorizer, Needs, Principal
from broker.acl.resources import topic_resource
from broker.core.consume import consumer_needs
from broker.log_limit import RateLimitedLog
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb

__all__ = ["NEEDS", "Caller", "ClientOwners", "GrpcAccess", "metadata_value", "needs_of", "peer_host",
           "telemetry_needs"]

log = logging.getLogger(__name__)
_refusals = RateLimitedLog(log)

_AUTHORIZATION = re.compile(r"Credential=([^,\s]*)\s*,\s*SignedHeaders=([^,\s]*)\s*,\s*Signature=([0-9A-Fa-f]+)")


def metadata_value(context: Any, name: str) -> str:
    """The first value of metadata entry ``name`` ("" when absent)."""
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return ""


def peer_host(context: Any) -> str:
    """The caller's IP from gRPC's peer ("ipv4:127.0.0.1:5555", "ipv6:[::1]:5555")."""
    kind, _, rest = (context.peer() or "").partition(":")
    if kind not in ("ipv4", "ipv6"):
        return ""
    return unmap_ipv4(rest.rpartition(":")[0].strip("[]"))


# ---- what each RPC names --------------------------------------------------------------------------------------
def _add(needs: Needs, need: tuple[str, int]) -> None:
    if need not in needs:
        needs.append(need)


def _consumer(group: str, topic: str) -> Needs:
    """SUB on the topic and on the group: what the typed core request the call is decoded into states
    (broker/core: ``consumer_needs``, as for a remoting pull)."""
    return consumer_needs(group, topic)


def _named_group(request: Any) -> Needs:
    """SUB on the group when the request names one (producers name none)."""
    return [(group_resource(request.group.name), SUB)] if request.group.name else []


def _send(request: spb.SendMessageRequest) -> Needs:
    needs: Needs = []
    for message in request.messages:
        _add(needs, topic_resource(message.topic.name, PUB))
    return needs


def telemetry_needs(command: spb.TelemetryCommand) -> Needs:
    """A Settings command: PUB on each topic a producer publishes (its transaction checks, which carry the half
    messages, come to this stream), SUB on a consumer's group and on each topic it subscribes. Other commands
    (answers to the server's) name nothing the handler uses."""
    if command.WhichOneof("command") != "settings":
        return []
    settings = command.settings
    needs: Needs = []
    kind = settings.WhichOneof("pub_sub")
    if kind == "publishing":
        for topic in settings.publishing.topics:
            _add(needs, topic_resource(topic.name, PUB))
    elif kind == "subscription":
        subscription = settings.subscription
        if subscription.group.name:
            _add(needs, (group_resource(subscription.group.name), SUB))
        for entry in subscription.subscriptions:
            _add(needs, topic_resource(entry.topic.name, SUB))
    return needs


NEEDS: dict[str, Callable[[Any], Needs]] = {
    "QueryRoute": lambda r: [topic_resource(r.topic.name, ANY_ACCESS)],
    "Heartbeat": _named_group,
    "SendMessage": _send,
    "QueryAssignment": lambda r: _consumer(r.group.name, r.topic.name),
    "ReceiveMessage": lambda r: _consumer(r.group.name, r.message_queue.topic.name),
    "AckMessage": lambda r: _consumer(r.group.name, r.topic.name),
    "ForwardMessageToDeadLetterQueue": lambda r: _consumer(r.group.name, r.topic.name),
    "ChangeInvisibleDuration": lambda r: _consumer(r.group.name, r.topic.name),
    "EndTransaction": lambda r: [topic_resource(r.topic.name, PUB)],
    "RecallMessage": lambda r: [topic_resource(r.topic.name, PUB)],
    "NotifyClientTermination": _named_group,
    "Telemetry": telemetry_needs,  # per command on the stream; opening it names nothing
}


def needs_of(rpc: str, request: Any) -> Needs:
    """The (resource, permission) pairs ``request`` of ``rpc`` needs. KeyError for an RPC not in the table: a new
    RPC must get its entry before it can be served."""
    return NEEDS[rpc](request) if request is not None else []


# ---- sessions ----------------------------------------------------------------------------------------------------
class ClientOwners:
    """Which identity each client id in use belongs to. The first authenticated call naming a client id binds it;
    calls naming it under another identity are refused until the owner has been silent ``idle_s`` (the broker then
    counts the client gone: its settings and auto-renewed deliveries are no longer its protection). A client id is
    the 5.x SDK's ``host@pid@index@time``: unique per client instance, so no legitimate client shares one."""

    def __init__(self, idle_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_s = idle_s
        self.clock = clock
        self._owners: dict[str, tuple[str, float]] = {}
        self._prune_at = 1024

    def claim(self, client_id: str, identity: str) -> str | None:
        """None when ``identity`` may act as ``client_id`` (and now owns it); else the refusal's text."""
        now = self.clock()
        owner = self._owners.get(client_id)
        if owner is not None and owner[0] != identity and now - owner[1] < self.idle_s:
            return (f"client {client_id[:120]} belongs to another account (its session was opened by "
                    f"{owner[0]}); a client may act only on its own session")
        self._owners[client_id] = (identity, now)
        if len(self._owners) >= self._prune_at:
            self._prune(now)
        return None

    def release(self, client_id: str) -> None:
        self._owners.pop(client_id, None)

    def _prune(self, now: float) -> None:
        self._owners = {cid: owner for cid, owner in self._owners.items() if now - owner[1] < self.idle_s}
        self._prune_at = max(1024, 2 * len(self._owners))


# ---- the decision --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated gRPC caller; ``identity`` is what its client ids are bound to (its access key, or the
    white-listed address)."""

    principal: Principal
    identity: str


class GrpcAccess:
    """The endpoint's front to the broker's Authorizer; ``authorizer`` None (aclEnable=false) lets every call
    through, as remoting does."""

    def __init__(self, authorizer: Authorizer | None, client_idle_s: float) -> None:
        self.authorizer = authorizer
        self.owners = ClientOwners(client_idle_s)

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def authenticate(self, context: Any, rpc: str) -> tuple[Caller | None, pb.Status | None]:
        """The caller of ``context`` (None with ACL off), or the UNAUTHORIZED status saying why not."""
        authorizer = self.authorizer
        if authorizer is None:
            return None, None
        host = peer_host(context)
        found = _AUTHORIZATION.search(metadata_value(context, "authorization"))
        access_key = found.group(1).split("/", 1)[0] if found else ""
        principal, refusal = authorizer.authenticate_timed(
            access_key or None, found.group(3) if found else "", metadata_value(context, "x-mq-date-time"), host,
            what=rpc)
        if principal is None:
            return None, self._refuse(rpc, context, refusal or "not authenticated")
        return Caller(principal, principal.access_key or f"white-listed address {host}"), None

    def decide(self, caller: Caller | None, rpc: str, request: Any, context: Any,
               needs: Needs | None = None) -> pb.Status | None:
        """None when ``caller`` may make ``rpc`` with ``request`` (or, given, with what the messaging core's typed
        request ``needs``); else the UNAUTHORIZED status."""
        if caller is None or self.authorizer is None:
            return None
        refusal = self.authorizer.decide(caller.principal, needs_of(rpc, request) if needs is None else needs,
                                         what=rpc)
        return None if refusal is None else self._refuse(rpc, context, refusal)

    def claim(self, caller: Caller | None, rpc: str, client_id: str, context: Any) -> pb.Status | None:
        """None when ``caller`` may act as ``client_id``; else the UNAUTHORIZED status."""
        if caller is None or not client_id:
            return None
        refusal = self.owners.claim(client_id, caller.identity)
        return None if refusal is None else self._refuse(rpc, context, refusal)

    def admit(self, rpc: str, request: Any, context: Any, client_id: str = "",
              needs: Needs | None = None) -> tuple[Caller | None, pb.Status | None]:
        """Authenticate, decide on what ``request`` names (or ``needs``: what the core's typed request states), and
        check the session ``client_id`` is the caller's: (caller, None) when the call may run, (None, status) when it
        may not."""
        caller, refused = self.authenticate(context, rpc)
        if refused is None:
            refused = self.decide(caller, rpc, request, context, needs)
        if refused is None:
            refused = self.claim(caller, rpc, client_id, context)
        return (None, refused) if refused is not None else (caller, None)

    def current(self, caller: Caller | None) -> Caller | None:
        """``caller`` with its account as the ACL file says now (a long-lived Telemetry stream outlives reloads);
        None when its account was removed."""
        if caller is None or self.authorizer is None or caller.principal.unchecked:
            return caller
        principal = self.authorizer.principal_for(caller.principal.access_key or "")
        return Caller(principal, caller.identity) if principal is not None else None

    def release(self, client_id: str) -> None:
        """The session ended: its client id is free."""
        self.owners.release(client_id)

    @staticmethod
    def _refuse(rpc: str, context: Any, text: str) -> pb.Status:
        host = peer_host(context)
        _refusals.warning(("grpc", rpc, host), "gRPC: refused %s from %s: %s", rpc, host, text)
        return pb.Status(code=pb.UNAUTHORIZED, message=text)
