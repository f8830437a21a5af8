"""Credentials of RocketMQ's plain ACL (4.x) and the request signing our client applies with them.

A signed request carries the extFields ``AccessKey`` (and ``SecurityToken`` if given) and ``Signature``: the recipe
of protocol.acl_signature over the extFields and body. The broker verifies over the extFields it *decodes*, so the
values are first normalised to the exact text every header encoder writes (JSON, msgpack, binary alike): strings as
they are, booleans ``true``/``false``, numbers as decimal digits, ``None`` dropped (the JSON encoder leaves those out).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from protocol.acl_signature import ACCESS_KEY, SECURITY_TOKEN, SIGNATURE, sign
from protocol.command import RemotingCommand, wire_str

__all__ = ["ACCESS_KEY_ENV", "SECRET_KEY_ENV", "SECURITY_TOKEN_ENV", "Credentials"]

ACCESS_KEY_ENV = "ROCKETMQ_ACCESS_KEY"
SECRET_KEY_ENV = "ROCKETMQ_SECRET_KEY"
SECURITY_TOKEN_ENV = "ROCKETMQ_SECURITY_TOKEN"


def _utf8_safe(text: str) -> str:
    """Lone surrogates are written as '?' by the encoders: sign what the broker will decode."""
    return text.encode("utf-8", "replace").decode("utf-8")


@dataclass(frozen=True)
class Credentials:
    """An ACL account: ``Producer(..., credentials=Credentials("orders_app", "orders-secret-1"))``."""

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.access_key, str) or not self.access_key:
            raise ValueError("credentials need a non-empty access key")
        if not isinstance(self.secret_key, str) or not self.secret_key:
            raise ValueError("credentials need a non-empty secret key")
        if self.security_token is not None and not isinstance(self.security_token, str):
            raise ValueError("the security token must be a string")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Credentials | None:
        """Credentials from ROCKETMQ_ACCESS_KEY / ROCKETMQ_SECRET_KEY (/ ROCKETMQ_SECURITY_TOKEN); None if either
        key is unset or blank (like the reference tools, which then do not sign)."""
        env = os.environ if environ is None else environ
        access_key = (env.get(ACCESS_KEY_ENV) or "").strip()
        secret_key = (env.get(SECRET_KEY_ENV) or "").strip()
        if not access_key or not secret_key:
            return None
        return cls(access_key, secret_key, (env.get(SECURITY_TOKEN_ENV) or "").strip() or None)

    def sign_fields(self, ext_fields: dict[str, object] | None, body: bytes | None) -> dict[str, str]:
        """A new extFields dict: the request's fields as wire text, plus AccessKey [SecurityToken] and Signature."""
        fields: dict[str, str] = {}
        if ext_fields:
            for key, value in ext_fields.items():
                if value is None or key == SIGNATURE:
                    continue
                fields[key] = value if type(value) is str else wire_str(value)
        fields[ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            fields[SECURITY_TOKEN] = self.security_token
        try:
            fields[SIGNATURE] = sign(self.secret_key, fields, body)
        except UnicodeEncodeError:  # a value with lone surrogates: the encoder will write '?' for them
            fields = {_utf8_safe(k): _utf8_safe(v) for k, v in fields.items()}
            fields[SIGNATURE] = sign(self.secret_key, fields, body)
        return fields

    def sign(self, cmd: RemotingCommand) -> RemotingCommand:
        """Sign a request in place (call it last, after every extField and the body are set); returns cmd."""
        cmd.ext_fields = self.sign_fields(cmd.ext_fields, cmd.body)
        return cmd
