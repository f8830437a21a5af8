"""What the signed-in account may see in the console, decided by the broker's one Authorizer.

Every console read names the resources the equivalent remoting request would (broker/acl/resources.py): reading a
topic's messages needs SUB on it (PULL_MESSAGE, QUERY_MESSAGE, VIEW_MESSAGE_BY_ID), a topic's offsets and
statistics PUB or SUB (GET_TOPIC_STATS_INFO), a group's offsets, lag, clients and dead letters SUB on the group
(``%RETRY%<group>``, GET_CONSUME_STATS, GET_CONSUMER_CONNECTION_LIST), and the broker-wide figures an admin account
(GET_BROKER_RUNTIME_INFO). A listing leaves out what the account may not see; a direct read of it answers 403.
With ACL off (no authorizer) everything is allowed, as before."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.acl.accounts import RETRY_GROUP_PREFIX, SUB, group_resource
from broker.acl.authorizer import ANY_ACCESS, Authorizer, Needs, Principal
from protocol.codes import ResponseCode

__all__ = ["ConsoleError", "Viewer", "outcome_value", "topic_need"]


class ConsoleError(Exception):
    """A request the console cannot serve: an HTTP status and a message for the page."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def outcome_value(outcome: Any) -> Any:
    """The value of a core Outcome that succeeded; a refusal as the page shows it (SYSTEM_ERROR: 500, else 400)."""
    if outcome.ok:
        return outcome.value
    raise ConsoleError(400 if outcome.code != ResponseCode.SYSTEM_ERROR else 500,
                       f"{outcome.remark or f'failed with code {outcome.code}'} (code {outcome.code})")


def topic_need(topic: str, perm: int) -> tuple[str, int]:
    """A retry topic ``%RETRY%g`` is its group's resource: using it needs SUB (the remoting rule)."""
    return (topic, SUB) if topic.startswith(RETRY_GROUP_PREFIX) else (topic, perm)


@dataclass(frozen=True, slots=True)
class Viewer:
    """One request's account: ``authorizer`` None means ACL is off (everyone is an operator)."""

    authorizer: Authorizer | None
    principal: Principal | None

    @classmethod
    def operator(cls) -> "Viewer":
        return cls(None, None)

    @property
    def admin(self) -> bool:
        return self.authorizer is None or (self.principal is not None and self.principal.admin)

    @property
    def sees_everything(self) -> bool:
        """No check can refuse anything (ACL off, a white-listed address or an admin without resource lists)."""
        if self.authorizer is None:
            return True
        principal = self.principal
        return principal is not None and (principal.unchecked or (principal.account is not None
                                                                  and principal.account.unrestricted_admin))

    def refusal(self, needs: Needs, what: str, *, admin_only: bool = False) -> str | None:
        if self.authorizer is None:
            return None
        if self.principal is None:
            return f"{what} needs an account"
        return self.authorizer.decide(self.principal, needs, admin_only=admin_only, what=what)

    def require(self, needs: Needs, what: str, *, admin_only: bool = False) -> None:
        """ConsoleError 403 with the authorizer's reason unless the account may do ``what``."""
        refusal = self.refusal(needs, what, admin_only=admin_only)
        if refusal is not None:
            raise ConsoleError(403, refusal if what in refusal else f"{refusal} ({what})")

    def require_request(self, request: Any, what: str) -> None:
        """403 unless the account may make the core's typed ``request`` (its ``needs()``, admin-only or not)."""
        self.require(request.needs(), what, admin_only=request.admin_only)

    def may(self, needs: Needs) -> bool:
        return self.refusal(needs, "a read") is None

    def may_see_topic(self, topic: str) -> bool:
        """Its queues, offsets and counts (PUB or SUB)."""
        return self.may([topic_need(topic, ANY_ACCESS)])

    def may_read_topic(self, topic: str) -> bool:
        """Its messages (SUB)."""
        return self.may([topic_need(topic, SUB)])

    def may_see_group(self, group: str) -> bool:
        return self.may([(group_resource(group), SUB)])

    def require_topic(self, topic: str, what: str) -> None:
        self.require([topic_need(topic, ANY_ACCESS)], what)

    def require_topic_read(self, topic: str, what: str) -> None:
        self.require([topic_need(topic, SUB)], what)

    def require_group(self, group: str, what: str) -> None:
        self.require([(group_resource(group), SUB)], what)

    def require_admin(self, what: str) -> None:
        self.require([], what, admin_only=True)

