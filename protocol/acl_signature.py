"""Request signing of RocketMQ's plain ACL (4.x): the exact content a client signs and a broker verifies.

The signed text is the values of the request's extFields (``Signature`` left out) in ascending Java ``String``
order of their keys (UTF-16 code units), concatenated with no separators, encoded as UTF-8, followed by the body
bytes as sent. The signature is the standard Base64 (with padding) of HMAC-SHA1 keyed with the secret key's UTF-8
bytes. Values are hashed as text: strings as they are, JSON numbers as their decimal digits, booleans as
``true``/``false`` (what the Java broker's string map holds after decoding the header).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Collection, Mapping

__all__ = ["ACCESS_KEY", "SIGNATURE", "SECURITY_TOKEN", "ONS_CHANNEL", "value_text", "signed_content", "sign",
           "signature_matches"]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"


def value_text(value: object) -> str:
    """An extField value as the Java side's ``Map<String, String>`` holds it."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    return str(value)


def _java_order(key: str) -> bytes:
    # Java's String.compareTo compares UTF-16 code units; UTF-16-BE bytes sort the same way.
    return key.encode("utf-16-be", "surrogatepass")


def signed_content(ext_fields: Mapping[str, object] | None, body: bytes | bytearray | memoryview | None,
                   exclude: Collection[str] = ()) -> bytes:
    """The bytes the HMAC covers: sorted values (less ``Signature`` and ``exclude``) then the body."""
    fields = ext_fields or {}
    keys = [k for k in fields if k != SIGNATURE and k not in exclude]
    # ASCII keys (every real header) sort the same by code point: skip the UTF-16 key function (hot path).
    keys.sort(key=None if all(k.isascii() for k in keys) else _java_order)
    text = "".join([v if type(v) is str else value_text(v) for v in map(fields.__getitem__, keys)]).encode("utf-8")
    return text + bytes(body) if body else text


def sign(secret_key: str, ext_fields: Mapping[str, object] | None,
         body: bytes | bytearray | memoryview | None = None, exclude: Collection[str] = ()) -> str:
    """Base64 HMAC-SHA1 of ``signed_content`` keyed with ``secret_key``."""
    digest = hmac.digest(secret_key.encode("utf-8"), signed_content(ext_fields, body, exclude), hashlib.sha1)
    return base64.b64encode(digest).decode("ascii")


def signature_matches(secret_key: str, ext_fields: Mapping[str, object] | None,
                      body: bytes | bytearray | memoryview | None = None, exclude: Collection[str] = ()) -> bool:
    """Whether the request's ``Signature`` field is the one ``secret_key`` gives (constant-time comparison)."""
    given = (ext_fields or {}).get(SIGNATURE)
    if not isinstance(given, str):
        return False
    return hmac.compare_digest(given.encode("ascii", "replace"), sign(secret_key, ext_fields, body, exclude).encode())
