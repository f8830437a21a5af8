"""Security keys: TLS on the remoting ports (values checked by ``broker.tls.TlsSettings``), plain ACL and the
broker's own admin account, and the web console's Host list and sign-in limits."""

from __future__ import annotations

import functools
import ipaddress
import re

from .entry import Positive, Rule, key

__all__ = ["KEYS"]

_k = functools.partial(key, concern="security")

_HOST_ENTRY = re.compile(r"\*|\[[0-9A-Fa-f:.]+\](:\d{1,5})?|[A-Za-z0-9_.-]+(:\d{1,5})?")


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _allowed_hosts(value: str) -> str | None:
    """dashboardAllowedHosts: comma-separated ``name``, ``name:port``, ``[v6]:port``, a bare IPv6 or ``*``."""
    for entry in value.split(","):
        entry = entry.strip()
        if entry and not _HOST_ENTRY.fullmatch(entry) and not _is_ipv6(entry):
            return f"expected host names separated by commas (name, name:port, [v6]:port or *), got {entry!r}"
    return None


KEYS = (
    # TLS on every remoting port of the process (broker, VIP, embedded name server); see broker/tls.py
    _k("tlsMode", str, "disabled", doc="disabled | permissive (TLS and plaintext on one port) | enforcing"),
    _k("tlsServerCertPath", str, optional=True, doc="PEM certificate chain"),
    _k("tlsServerKeyPath", str, optional=True, doc="PEM private key, unencrypted"),
    _k("tlsServerTrustCertPath", str, optional=True, doc="PEM CA bundle verifying client certificates"),
    _k("tlsServerNeedClientAuth", str, "none", doc="none | optional | require"),
    _k("tlsEnable", bool, optional=True,
       doc="the broker's own connections to remote name servers; unset: tlsMode=enforcing"),
    # plain ACL (broker/acl): off by default
    _k("aclEnable", bool, False),
    _k("aclFile", str, optional=True, doc="unset: plain_acl.yml beside broker.conf; relative: to broker.conf's folder"),
    _k("aclTimeToleranceSeconds", int, 900, Positive(),
       doc="how far a gRPC signature's x-mq-date-time may be from this broker's clock"),
    _k("accessKey", str, optional=True,
       doc="project keys: this broker's admin account, signs REGISTER_BROKER/UNREGISTER_BROKER to name servers "
           "that have ACL on (both or neither, checked across keys)"),
    _k("secretKey", str, optional=True, doc="never listed by to_properties"),
    # issue 27, web console part: the Host names it answers besides its own address ("name" any port, "name:port"
    # that port only, "*" any Host), and the slow-down and lock-out of failed sign-ins, per client address and per
    # account: a delay doubling from 1 s (capped) after DelayAfter failures, refused for LockSeconds after
    # LockAfter; failures are forgotten LockSeconds after the last one (DelayAfter <= LockAfter, checked across keys)
    _k("dashboardAllowedHosts", str, "", Rule(_allowed_hosts)),
    _k("dashboardSignInDelayAfter", int, 5, Positive()),
    _k("dashboardSignInLockAfter", int, 20, Positive()),
    _k("dashboardSignInAccountDelayAfter", int, 20, Positive()),
    _k("dashboardSignInAccountLockAfter", int, 100, Positive()),
    _k("dashboardSignInMaxDelaySeconds", int, 60, Positive()),
    _k("dashboardSignInLockSeconds", int, 900, Positive()),
)
