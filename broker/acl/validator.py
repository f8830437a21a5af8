"""AclValidator: the remoting protocol's front to the one Authorizer.

Per request, in the reference's order (acl-and-tls.md §4.1): authenticate (white lists, AccessKey, signature);
read the request once (``protocol.requests.read_request``, the object its handler will use); find what it needs
(broker/acl/resources.py); let the Authorizer decide (admin-only codes, the trace-topic exemption, permissions).

A refusal is ``(ResponseCode.SYSTEM_ERROR, remark)``: code 1 as the reference answers (clients expect it), the remark
naming what was denied and why; a request that cannot be read is answered INVALID_PARAMETER. ``request_guard``
adapts the validator to ``RemotingServer``'s hook.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from broker.acl.accounts import AclConfig
from broker.acl.authorizer import REMARK_PREFIX, Authorizer
from broker.acl.resources import (ADMIN_CODES, NAMESRV_ADMIN_CODES, NAMESRV_LISTING_CODES, RecordTopics,
                                  needed_resources)
from broker.log_limit import RateLimitedLog
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import HeaderError
from protocol.requests import INLINE_BODY_MAX, read_request, reads_body

__all__ = ["REMARK_PREFIX", "AclValidator", "Refusal"]

log = logging.getLogger(__name__)
_refusals = RateLimitedLog(log)

Refusal = tuple[int, str]


def _refuse(message: str) -> Refusal:
    return ResponseCode.SYSTEM_ERROR, REMARK_PREFIX + message


class AclValidator:
    """Checks remoting requests with ``authorizer``; ``records`` (the store) finds the topic of a record named by
    its commit-log offset."""

    def __init__(self, authorizer: Authorizer | AclConfig, records: RecordTopics | None = None,
                 admin_codes: frozenset[int] = ADMIN_CODES) -> None:
        self.authorizer = authorizer if isinstance(authorizer, Authorizer) else Authorizer(authorizer)
        self.records = records
        self.admin_codes = admin_codes

    @property
    def config(self) -> AclConfig:
        return self.authorizer.config

    def update(self, config: AclConfig) -> None:
        self.authorizer.update(config)

    # ---- the decision ---------------------------------------------------------------------------
    def verify(self, cmd: RemotingCommand, remote_host: str) -> Refusal | None:
        """None when ``cmd`` from ``remote_host`` may run; else (response code, remark)."""
        authorizer = self.authorizer
        principal, refusal = authorizer.authenticate_remoting(cmd.ext_fields, cmd.body, cmd.version, remote_host,
                                                                f"request code={cmd.code}")
        if principal is None:
            return _refuse(refusal)
        if principal.unchecked:
            return None
        what = f"request code={cmd.code}"
        admin_only = cmd.code in self.admin_codes
        if admin_only and not principal.admin:  # refused before its fields are even read
            return _refuse(authorizer.decide(principal, [], admin_only=True, what=what))
        try:
            request = read_request(cmd)
        except HeaderError as exc:
            return ResponseCode.INVALID_PARAMETER, str(exc)
        needs = needed_resources(cmd.code, request, self.records)
        refusal = authorizer.decide(principal, needs, admin_only=admin_only, what=what)
        return None if refusal is None else _refuse(refusal)

    def verify_admin(self, cmd: RemotingCommand, remote_host: str) -> Refusal | None:
        """For the name server's route-changing codes: a globally white-listed IP, or an admin account that is
        white-listed for this IP or signed the request; for its topic listings, any account (signed, or white-listed).
        Other codes pass."""
        listing = cmd.code in NAMESRV_LISTING_CODES
        if not listing and cmd.code not in NAMESRV_ADMIN_CODES:
            return None
        principal, refusal = self.authorizer.authenticate_remoting(cmd.ext_fields, cmd.body, cmd.version,
                                                                    remote_host, f"request code={cmd.code}")
        if principal is None:
            return _refuse(refusal)
        if listing:
            return None
        if principal.account is not None and not principal.account.admin:
            # here white-listing only spares an admin account its signature
            return _refuse(f"Need admin permission for request code={cmd.code}, but {principal} is not")
        return None

    # ---- the RemotingServer hook ------------------------------------------------------------------
    def request_guard(self, namesrv: bool = False) -> Callable[[Any, RemotingCommand], RemotingCommand | None]:
        """``guard(channel, cmd)``: None to dispatch; else the error response to send instead (the server drops
        it for a one-way request). Refusals are logged rate-limited, never per request."""
        check = self.verify_admin if namesrv else self.verify
        where = "name server" if namesrv else "broker"

        def answer(channel: Any, cmd: RemotingCommand, refusal: Refusal | None) -> RemotingCommand | None:
            if refusal is None:
                return None
            code, remark = refusal
            _refusals.warning((where, cmd.code, remark[:80]), "%s: refused request code %s from %s: %s",
                              where, cmd.code, channel.remote_addr, remark)
            return cmd.make_response(code, remark)

        def checked(channel: Any, cmd: RemotingCommand) -> Refusal | None:
            try:
                return check(cmd, channel.remote_host)
            except Exception as exc:  # noqa: BLE001 - a bug: refuse (fail closed) with a remark, log the traceback rate-limited
                _refusals.error((where, "bug", type(exc).__name__), "%s: ACL check of request code %s failed",
                                where, cmd.code, exc_info=exc)
                return _refuse(f"ACL check failed: {type(exc).__name__}: {exc}")

        async def guard_large(channel: Any, cmd: RemotingCommand) -> RemotingCommand | None:
            try:  # read the large body in a thread; the check then finds it read (cmd.header)
                await asyncio.to_thread(read_request, cmd)
            except HeaderError:
                pass  # the check answers it, with the same error
            return answer(channel, cmd, checked(channel, cmd))

        def guard(channel: Any, cmd: RemotingCommand) -> Any:
            if not namesrv and cmd.header is None and len(cmd.body) > INLINE_BODY_MAX and reads_body(cmd.code):
                return guard_large(channel, cmd)  # the server awaits it before dispatching
            return answer(channel, cmd, checked(channel, cmd))

        return guard
