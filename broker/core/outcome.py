"""The one result type of the messaging core, and who asked.

Every core operation answers an :class:`Outcome`: a response code from ``protocol.codes.ResponseCode`` (the
reference's codes, which the gRPC front end maps to its own statuses), a remark that says what is wrong when the code
is not SUCCESS (the text a user reads), and the typed value on success. Front ends branch on ``ok`` only; they never
inspect the core's internals. A refusal may also name a ``reason`` (a short protocol-neutral word such as
``body_too_large``) for front ends whose protocol answers with finer codes than ResponseCode (gRPC's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from protocol.codes import ResponseCode

T = TypeVar("T")

__all__ = ["Outcome", "Requester"]


@dataclass(slots=True)
class Outcome(Generic[T]):
    """A core operation's answer: ``code`` (ResponseCode), ``remark`` (why, when refused), ``value`` (on success),
    and ``reason``: what kind of refusal (the request field at fault, ``"topic"``, ``"group"``, ``"receipt_handle"``...,
    or a ``REASON_*`` of the send and transaction cores), so a front end with finer codes (gRPC's ILLEGAL_TOPIC,
    INVALID_RECEIPT_HANDLE, remoting's forbiddenType...) need not parse remarks."""

    code: int
    remark: str = ""
    value: T | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.code == ResponseCode.SUCCESS

    @classmethod
    def success(cls, value: T | None = None, remark: str = "") -> "Outcome[T]":
        return cls(int(ResponseCode.SUCCESS), remark, value)

    @classmethod
    def refused(cls, code: int, remark: str, reason: str = "") -> "Outcome[T]":
        return cls(int(code), remark, None, reason)


@dataclass(frozen=True, slots=True)
class Requester:
    """Who sent a request, whichever protocol brought it: the peer's address (``host:port``), the protocol
    (``remoting``, ``grpc`` or ``console``), the client's id when it gave one, and the access key it signed with."""

    remote_addr: str
    protocol: str = "remoting"
    client_id: str = ""
    access_key: str | None = None

    @property
    def remote_host(self) -> str:
        host, _, _ = self.remote_addr.rpartition(":")
        return host or self.remote_addr
