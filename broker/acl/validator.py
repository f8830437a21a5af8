"""AclValidator: the per-request decision of the plain ACL, in the reference's order (acl-and-tls.md §4.1).

1. client IP in globalWhiteRemoteAddresses: accept; 2. no AccessKey: refuse; 3. unknown AccessKey: refuse;
4. IP matches the account's whiteRemoteAddress: accept; 5. bad signature: refuse; 6. a message-trace send: accept;
7. admin code and not admin: refuse; 8-10. every needed topic/group permission, else refuse.

A refusal is ``(ResponseCode.SYSTEM_ERROR, remark)``: code 1 as the reference answers (clients expect it), the remark
naming what was denied and why. ``request_guard`` adapts the validator to ``RemotingServer``'s hook.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from broker.acl.accounts import (
    DENY,
    RETRY_GROUP_PREFIX,
    AclConfig,
    permission_text,
    unmap_ipv4,
)
from broker.acl.resources import (
    ADMIN_CODES,
    NAMESRV_ADMIN_CODES,
    TRACE_TOPIC,
    needed_resources,
)
from broker.log_limit import RateLimitedLog
from protocol.acl_signature import ACCESS_KEY, signature_matches
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand

__all__ = ["REMARK_PREFIX", "AclValidator", "Refusal"]

log = logging.getLogger(__name__)
_refusals = RateLimitedLog(log)

Refusal = tuple[int, str]
REMARK_PREFIX = "AclException: "
_UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
_V4_9_3 = 399  # clients up to 4.9.3 do not sign _UNIQUE_KEY_QUERY; later ones do (the 5.x broker's rule)
_NO_EXCLUSION: tuple[str, ...] = ()
_UNIQUE_KEY_EXCLUSION = (_UNIQUE_KEY_QUERY,)


def _refuse(message: str) -> Refusal:
    return ResponseCode.SYSTEM_ERROR, REMARK_PREFIX + message


class AclValidator:
    """Checks requests against the current AclConfig (replaced whole by ``update`` on reload)."""

    def __init__(self, config: AclConfig, admin_codes: frozenset[int] = ADMIN_CODES) -> None:
        self.config = config
        self.admin_codes = admin_codes

    def update(self, config: AclConfig) -> None:
        self.config = config  # one reference swap: a request sees the old or the new accounts, never a mix

    # ---- the decision ---------------------------------------------------------------------------
    def verify(self, cmd: RemotingCommand, remote_host: str) -> Refusal | None:
        """None when ``cmd`` from ``remote_host`` may run; else (response code, remark)."""
        config = self.config
        ip = unmap_ipv4(remote_host)
        if config.global_white and config.globally_white(ip):
            return None
        account, refusal, white_listed = self._authenticate(config, cmd, ip)
        if account is None:
            return refusal
        if white_listed:
            return None  # the account's whiteRemoteAddress: no signature, no admin or permission check (§4.1 step 4)
        try:
            needs = needed_resources(cmd.code, cmd.ext_fields, cmd.body)
        except ValueError as exc:
            return _refuse(f"cannot read the resources of request code={cmd.code}: {exc}")
        if any(resource == TRACE_TOPIC and perm & 4 for resource, perm in needs):
            return None  # message-trace sends are always allowed (4.9.4+)
        if cmd.code in self.admin_codes and not account.admin:
            return _refuse(f"Need admin permission for request code={cmd.code}, but accessKey={account.access_key} is not")
        if not needs or account.unrestricted_admin:
            return None
        for resource, needed in needs:
            owned = account.permission_for(resource)
            if owned & DENY or not owned & needed:
                kind, name = ("group", resource[len(RETRY_GROUP_PREFIX):]) if resource.startswith(RETRY_GROUP_PREFIX) \
                    else ("topic", resource)
                return _refuse(f"No {permission_text(needed)} permission for {kind}:{name}, accessKey="
                               f"{account.access_key} has {permission_text(owned)}")
        return None

    def verify_admin(self, cmd: RemotingCommand, remote_host: str) -> Refusal | None:
        """For the name server's route-changing codes: a globally white-listed IP, or an admin account that is
        white-listed for this IP or signed the request. Other codes pass."""
        if cmd.code not in NAMESRV_ADMIN_CODES:
            return None
        config = self.config
        ip = unmap_ipv4(remote_host)
        if config.global_white and config.globally_white(ip):
            return None
        account, refusal, _ = self._authenticate(config, cmd, ip)
        if account is None:
            return refusal
        if not account.admin:  # here white-listing only spares an admin account its signature
            return _refuse(f"Need admin permission for request code={cmd.code}, but accessKey={account.access_key} is not")
        return None

    def _authenticate(self, config: AclConfig, cmd: RemotingCommand, ip: str) -> tuple[Any, Refusal | None, bool]:
        """(account, None, white-listed?) when the account is known and white-listed or signed;
        (None, refusal, False) otherwise."""
        fields = cmd.ext_fields
        access_key = fields.get(ACCESS_KEY) if fields else None
        if access_key is None:
            return None, _refuse(f"No accessKey is configured (request code={cmd.code} from {ip} is not signed)"), False
        account = config.accounts.get(access_key) if isinstance(access_key, str) else None
        if account is None:
            return None, _refuse(f"No acl config for {access_key} (unknown accessKey)"), False
        if account.white_address(ip):
            return account, None, True
        exclude = _UNIQUE_KEY_EXCLUSION if cmd.version <= _V4_9_3 and _UNIQUE_KEY_QUERY in fields else _NO_EXCLUSION
        if not signature_matches(account.secret_key, fields, cmd.body, exclude):
            return None, _refuse(f"Check signature failed for accessKey={access_key}"), False
        return account, None, False

    # ---- the RemotingServer hook ------------------------------------------------------------------
    def request_guard(self, namesrv: bool = False) -> Callable[[Any, RemotingCommand], RemotingCommand | None]:
        """``guard(channel, cmd)``: None to dispatch; else the error response to send instead (the server drops
        it for a one-way request). Refusals are logged rate-limited, never per request."""
        check = self.verify_admin if namesrv else self.verify
        where = "name server" if namesrv else "broker"

        def guard(channel: Any, cmd: RemotingCommand) -> RemotingCommand | None:
            try:
                refusal = check(cmd, channel.remote_host)
            except Exception as exc:  # noqa: BLE001 - a bug: refuse (fail closed) with a remark, log the traceback rate-limited
                _refusals.error((where, "bug", type(exc).__name__), "%s: ACL check of request code %s failed",
                                where, cmd.code, exc_info=exc)
                refusal = _refuse(f"ACL check failed: {type(exc).__name__}: {exc}")
            if refusal is None:
                return None
            code, remark = refusal
            _refusals.warning((where, cmd.code, remark[:80]), "%s: refused request code %s from %s: %s",
                              where, cmd.code, channel.remote_addr, remark)
            return cmd.make_response(code, remark)

        return guard
