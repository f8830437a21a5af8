"""TLS settings of the remoting ports (broker, VIP, name server) and the server-side ``ssl.SSLContext``.

Modes follow the reference's ``tls.server.mode``: ``disabled`` (plaintext only), ``permissive`` (TLS and
plaintext on one port, told apart by the first byte: 0x16 starts a TLS handshake record and can never start a
plaintext frame, whose length would then exceed 16 MiB) and ``enforcing`` (TLS only; other connections are
closed without a reply). Unlike the reference there is no throwaway test certificate: a mode other than
``disabled`` needs ``tlsServerCertPath`` and ``tlsServerKeyPath``, and a missing or unreadable file stops
start-up with a ``ConfigError`` naming the key and the file.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Any, Mapping

from broker.errors import ConfigError

TLS_MODES = ("disabled", "permissive", "enforcing")
CLIENT_AUTH_MODES = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}
TLS_HANDSHAKE_RECORD = 0x16  # first byte of every TLS ClientHello
HANDSHAKE_TIMEOUT_S = 10.0  # a started TLS handshake must finish within this

# broker.conf key -> TlsSettings attribute (the name server's config file takes the same keys)
TLS_KEYS = {
    "tlsMode": "mode",
    "tlsServerCertPath": "cert_path",
    "tlsServerKeyPath": "key_path",
    "tlsServerTrustCertPath": "trust_cert_path",
    "tlsServerNeedClientAuth": "need_client_auth",
}


@dataclass(frozen=True)
class TlsSettings:
    """The server side TLS keys, checked (values only; files are read by ``server_context``)."""

    mode: str = "disabled"
    cert_path: str | None = None
    key_path: str | None = None
    trust_cert_path: str | None = None
    need_client_auth: str = "none"

    def __post_init__(self) -> None:
        mode = (self.mode or "disabled").strip().lower()
        auth = (self.need_client_auth or "none").strip().lower()
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "need_client_auth", auth)
        if mode not in TLS_MODES:
            raise ConfigError(f"expected one of {', '.join(TLS_MODES)}, got {self.mode!r}", "tlsMode")
        if auth not in CLIENT_AUTH_MODES:
            raise ConfigError(f"expected one of {', '.join(CLIENT_AUTH_MODES)}, got {self.need_client_auth!r}",
                              "tlsServerNeedClientAuth")
        if mode == "disabled":
            return
        for key in ("tlsServerCertPath", "tlsServerKeyPath"):
            if not getattr(self, TLS_KEYS[key]):
                raise ConfigError(f"tlsMode={mode} needs a certificate and key; {key} is not set", key)
        if auth != "none" and not self.trust_cert_path:
            raise ConfigError(f"tlsServerNeedClientAuth={auth} needs the CA bundle that signs client certificates; "
                              "tlsServerTrustCertPath is not set", "tlsServerTrustCertPath")

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"

    @classmethod
    def from_config(cls, config: Any) -> "TlsSettings":
        """From a BrokerConfig (its ``tls_*`` attributes)."""
        return cls(config.tls_mode, config.tls_server_cert_path, config.tls_server_key_path,
                   config.tls_server_trust_cert_path, config.tls_server_need_client_auth)

    @classmethod
    def from_properties(cls, values: Mapping[str, str]) -> "TlsSettings":
        """From ``{tlsKey: text}`` (the standalone name server's config file)."""
        return cls(**{TLS_KEYS[k]: (v.strip() or None) for k, v in values.items() if k in TLS_KEYS})

    def describe(self) -> str:
        """Short text for the listening line, e.g. ``tls permissive, client auth require``."""
        if not self.enabled:
            return ""
        auth = "" if self.need_client_auth == "none" else f", client auth {self.need_client_auth}"
        return f"tls {self.mode}{auth}"

    def server_context(self) -> ssl.SSLContext | None:
        """The server context (None when disabled); a bad file raises ConfigError naming key and file."""
        if not self.enabled:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        for key in ("tlsServerCertPath", "tlsServerKeyPath", "tlsServerTrustCertPath"):
            path = getattr(self, TLS_KEYS[key])
            if path and not os.access(path, os.R_OK):
                reason = "does not exist" if not os.path.exists(path) else "is not readable"
                raise ConfigError(f"{key}: file {path} {reason}", key)
        try:
            ctx.load_cert_chain(self.cert_path, self.key_path)  # type: ignore[arg-type]
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(f"tlsServerCertPath/tlsServerKeyPath: cannot load {self.cert_path} with key "
                              f"{self.key_path}: {_reason(exc)}", "tlsServerCertPath") from None
        if self.trust_cert_path:
            try:
                ctx.load_verify_locations(cafile=self.trust_cert_path)
            except (ssl.SSLError, OSError, ValueError) as exc:
                raise ConfigError(f"tlsServerTrustCertPath: cannot load {self.trust_cert_path}: {_reason(exc)}",
                                  "tlsServerTrustCertPath") from None
        ctx.verify_mode = CLIENT_AUTH_MODES[self.need_client_auth]
        return ctx


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc) or type(exc).__name__



def outbound_tls_enabled(config: Any) -> bool:
    """``tlsEnable`` (the broker's own connections to remote name servers); unset follows the reference:
    on when ``tlsMode=enforcing``."""
    return config.tls_enable if config.tls_enable is not None else config.tls_mode == "enforcing"


def outbound_context(config: Any) -> ssl.SSLContext:
    """Client context for the broker's connections to remote name servers: verifies them against
    ``tlsServerTrustCertPath`` (the system store when unset), no host-name check (name servers are addressed by
    IP), and presents the broker's own certificate when it has one (name servers requiring client auth)."""
    trust = config.tls_server_trust_cert_path
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=trust or None)
    ctx.check_hostname = False
    if config.tls_server_cert_path and config.tls_server_key_path:
        try:
            ctx.load_cert_chain(config.tls_server_cert_path, config.tls_server_key_path)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"tlsServerCertPath: cannot load {config.tls_server_cert_path}: {_reason(exc)}",
                              "tlsServerCertPath") from None
    return ctx
