"""The one authorizer: who is asking, and may they use what their request names — for every protocol.

The remoting guard (broker/acl/validator.py), the gRPC endpoint and the web console each turn their own request
into an identity and a list of resources (``Needs``), then ask this object; the rules (white lists, admin-only
requests, the trace-topic exemption, DENY over any grant, groups as ``%RETRY%<group>``) live here only, so the
protocols cannot drift apart. The accounts are replaced whole on reload (one reference swap).

Authentication, in the reference's order (acl-and-tls.md §4.1): a globally white-listed address; an unknown or
missing AccessKey is refused; the account's ``whiteRemoteAddress`` spares the signature and every later check;
else the signature must match (remoting: HMAC-SHA1 over the sorted fields and the body; gRPC: over
``x-mq-date-time``, which must be within ``time_tolerance_s`` of this broker's clock so that a captured signature
expires)."""

from __future__ import annotations

import calendar
import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.acl.accounts import DENY, PUB, RETRY_GROUP_PREFIX, SUB, Account, AclConfig, unmap_ipv4
from protocol.acl_signature import ACCESS_KEY, signature_matches

__all__ = ["ANY_ACCESS", "REMARK_PREFIX", "TRACE_TOPIC", "Authorizer", "Needs", "Principal"]

Needs = list[tuple[str, int]]  # (resource, PUB, SUB or ANY_ACCESS); groups as "%RETRY%<group>"
ANY_ACCESS = PUB | SUB  # either permission will do (reading a topic's offsets or statistics)
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
REMARK_PREFIX = "AclException: "
DEFAULT_TIME_TOLERANCE_S = 900.0

_UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
_V4_9_3 = 399  # clients up to 4.9.3 do not sign _UNIQUE_KEY_QUERY; later ones do (the 5.x broker's rule)
_UNIQUE_KEY_EXCLUSION = (_UNIQUE_KEY_QUERY,)


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller. ``unchecked``: white-listed (globally, or by its account's address), so no admin or
    permission check applies, as in the reference."""

    access_key: str | None
    account: Account | None
    unchecked: bool = False

    @property
    def admin(self) -> bool:
        return self.unchecked or (self.account is not None and self.account.admin)

    def __str__(self) -> str:
        return f"accessKey={self.access_key}" if self.access_key else "a white-listed address"


def _permission_words(bits: int) -> str:
    if bits & DENY or not bits & ANY_ACCESS:
        return "DENY"
    return {PUB: "PUB", SUB: "SUB"}.get(bits & ANY_ACCESS, "PUB|SUB")


def _describe(resource: str) -> str:
    if resource.startswith(RETRY_GROUP_PREFIX):
        return f"group:{resource[len(RETRY_GROUP_PREFIX):]}"
    return f"topic:{resource}"


def parse_grpc_time(text: str) -> float | None:
    """``yyyyMMddTHHmmssZ`` (the 5.x SDKs' x-mq-date-time) -> seconds since the epoch, None if malformed."""
    try:
        return float(calendar.timegm(time.strptime(text.strip(), "%Y%m%dT%H%M%SZ")))
    except (ValueError, OverflowError):
        return None


class Authorizer:
    """Authentication and the permission decision over the current ``AclConfig``."""

    def __init__(self, config: AclConfig, *, time_tolerance_s: float = DEFAULT_TIME_TOLERANCE_S) -> None:
        self.config = config
        self.time_tolerance_s = time_tolerance_s

    def update(self, config: AclConfig) -> None:
        self.config = config  # one reference swap: a request sees the old or the new accounts, never a mix

    # ---- authentication ---------------------------------------------------------------------------------
    def _known(self, config: AclConfig, access_key: object, ip: str,
               what: str) -> tuple[Principal | None, str | None, Account | None]:
        """(principal, None, None) when white-listed; (None, refusal, None) when unknown; else (None, None, account)
        whose proof is still to be checked."""
        if config.global_white and config.globally_white(ip):
            return Principal(None, None, True), None, None
        if access_key is None:
            return None, f"No accessKey is configured ({what} from {ip} is not signed)", None
        account = config.accounts.get(access_key) if isinstance(access_key, str) else None
        if account is None:
            return None, f"No acl config for {access_key} (unknown accessKey)", None
        if account.white_address(ip):
            return Principal(account.access_key, account, True), None, None
        return None, None, account

    def authenticate_remoting(self, fields: Mapping[str, Any] | None, body: bytes, version: int,
                              remote_host: str, what: str = "the request") -> tuple[Principal | None, str | None]:
        """A remoting request signed by the RocketMQ ACL hook (AccessKey, Signature among its extFields)."""
        config = self.config
        access_key = fields.get(ACCESS_KEY) if fields else None
        principal, refusal, account = self._known(config, access_key, unmap_ipv4(remote_host), what)
        if account is None:
            return principal, refusal
        exclude = _UNIQUE_KEY_EXCLUSION if version <= _V4_9_3 and _UNIQUE_KEY_QUERY in fields else ()
        if not signature_matches(account.secret_key, fields, body, exclude):
            return None, f"Check signature failed for accessKey={access_key}"
        return Principal(account.access_key, account), None

    def authenticate_timed(self, access_key: str | None, signature_hex: str, date_time: str, remote_host: str,
                           now: float | None = None, what: str = "the call") -> tuple[Principal | None, str | None]:
        """A gRPC call: ``signature_hex`` = HMAC-SHA1(secret, ``date_time``) and ``date_time`` close to now."""
        config = self.config
        principal, refusal, account = self._known(config, access_key, unmap_ipv4(remote_host), what)
        if account is None:
            return principal, refusal
        expected = hmac.new(account.secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()
        if not hmac.compare_digest(expected, signature_hex.strip().lower()):
            return None, f"Check signature failed for accessKey={access_key}"
        signed_at = parse_grpc_time(date_time)
        if signed_at is None:
            return None, f"x-mq-date-time {date_time[:40]!r} is not a time (yyyyMMddTHHmmssZ, UTC)"
        skew = (time.time() if now is None else now) - signed_at
        if abs(skew) > self.time_tolerance_s:
            return None, (f"x-mq-date-time {date_time} is {abs(skew):.0f} s from the broker's clock, more than "
                          f"aclTimeToleranceSeconds={self.time_tolerance_s:.0f} (the signature has expired; "
                          "check both clocks and that the client sends UTC)")
        return Principal(account.access_key, account), None

    def authenticate_password(self, access_key: str, secret_key: str,
                              remote_host: str) -> tuple[Principal | None, str | None]:
        """The web console's sign-in: the account's own secret key (compared in constant time). White-listed
        addresses still need an account here: the console shows who is signed in."""
        account = self.config.accounts.get(access_key)
        if account is None or not hmac.compare_digest(account.secret_key.encode(), secret_key.encode()):
            return None, "unknown accessKey or wrong secretKey"
        return Principal(account.access_key, account, bool(account.white_address(unmap_ipv4(remote_host)))), None

    def principal_for(self, access_key: str, remote_host: str | None = None) -> Principal | None:
        """The principal of an account already authenticated (a console session), with the current accounts:
        None when the account was removed by a reload. From its ``whiteRemoteAddress`` (``remote_host``) it is
        unchecked, as at sign-in (``authenticate_password``)."""
        account = self.config.accounts.get(access_key)
        if account is None:
            return None
        white = remote_host is not None and bool(account.white_address(unmap_ipv4(remote_host)))
        return Principal(account.access_key, account, white)

    # ---- the decision ---------------------------------------------------------------------------------
    def decide(self, principal: Principal, needs: Needs, *, admin_only: bool = False,
               what: str = "this request") -> str | None:
        """None when ``principal`` may do ``what`` with ``needs``; else the refusal's text."""
        if principal.unchecked:
            return None
        account = principal.account
        if account is None:
            return f"{what} needs an account"
        if len(needs) == 1 and needs[0] == (TRACE_TOPIC, PUB):
            return None  # message-trace sends are always allowed (4.9.4+)
        if admin_only and not account.admin:
            return f"Need admin permission for {what}, but accessKey={account.access_key} is not"
        if account.unrestricted_admin:
            return None
        for resource, needed in needs:
            owned = account.permission_for(resource)
            if owned & DENY or not owned & needed:
                wanted = "PUB or SUB" if needed == ANY_ACCESS else _permission_words(needed)
                return (f"No {wanted} permission for {_describe(resource)}, accessKey={account.access_key} "
                        f"has {_permission_words(owned)}")
        return None

    def permits(self, principal: Principal, resource: str, needed: int) -> bool:
        """May ``principal`` use ``resource`` with ``needed`` (for filtering what a listing shows)?"""
        return self.decide(principal, [(resource, needed)]) is None
