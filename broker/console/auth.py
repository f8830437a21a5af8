"""Console sign-in when ACL is on: an account of the ACL file (access key + secret key) opens a session.

The broker's one Authorizer checks the secret and, for every request of the session, decides what the account may
see (broker/console/access.py) and whether it may change things (admin accounts only). Without ACL the console is
open to whoever reaches its port, which is loopback only unless dashboardHost says otherwise."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from broker.acl.authorizer import Authorizer, Principal

SESSION_COOKIE = "mqconsole"
SESSION_TTL_S = 8 * 3600
MAX_SESSIONS = 10_000


@dataclass(slots=True)
class Session:
    access_key: str
    admin: bool
    expires_at: float
    secret_digest: bytes = b""  # the secret signed in with: a changed secret ends the session
    principal: Principal | None = None  # as the authorizer sees the account now (None: ACL off)


class ConsoleAuth:
    """Sessions keyed by a random token (the cookie). The authorizer's accounts are read at each request, so a
    reload is seen at once: a removed account or a changed secret ends its sessions at their next request."""

    def __init__(self, authorizer: Authorizer | None) -> None:
        self.authorizer = authorizer
        self._sessions: dict[str, Session] = {}

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def login(self, access_key: str, secret_key: str, remote_host: str) -> tuple[str, Session] | None:
        """A new session token for a valid account, else None (the same answer for a wrong key or secret)."""
        if self.authorizer is None:
            return None
        principal, _refusal = self.authorizer.authenticate_password(access_key, secret_key, remote_host)
        if principal is None:
            return None
        self._expire(time.monotonic())
        if len(self._sessions) >= MAX_SESSIONS:
            oldest = min(self._sessions, key=lambda token: self._sessions[token].expires_at)
            del self._sessions[oldest]
        token = secrets.token_urlsafe(32)
        session = self._sessions[token] = Session(access_key, principal.admin, time.monotonic() + SESSION_TTL_S,
                                                  _digest(secret_key), principal)
        return token, session

    def logout(self, token: str | None) -> None:
        if token:
            self._sessions.pop(token, None)

    def session(self, token: str | None, remote_host: str | None = None) -> Session | None:
        """The live session of `token`, checked against the accounts as they are now (from `remote_host`)."""
        if self.authorizer is None:
            return Session("", True, float("inf"))  # no ACL: everyone is an operator
        if not token:
            return None
        session = self._sessions.get(token)
        if session is None:
            return None
        if session.expires_at < time.monotonic():
            del self._sessions[token]
            return None
        principal = self.authorizer.principal_for(session.access_key, remote_host)
        if principal is None or principal.account is None \
                or _digest(principal.account.secret_key) != session.secret_digest:
            del self._sessions[token]
            return None
        session.principal = principal
        session.admin = principal.admin
        return session

    def _expire(self, now: float) -> None:
        for token in [t for t, s in self._sessions.items() if s.expires_at < now]:
            del self._sessions[token]


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()
