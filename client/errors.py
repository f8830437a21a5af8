"""Exceptions raised by the client, so callers can tell broker refusals from transport trouble."""

from __future__ import annotations


class MQClientError(Exception):
    """Base class of every error the client raises on purpose."""


class MessageValidationError(MQClientError, ValueError):
    """The message cannot be sent as given (empty topic, body too large, bad batch, ...). Never retried."""


class RemotingError(MQClientError):
    """Transport-level failure: the request may or may not have reached the peer."""


class RemotingConnectError(RemotingError):
    """Could not open a connection to the address."""


class RemotingClosedError(RemotingError):
    """The connection closed while the request was waiting for its response."""


class RemotingTimeoutError(RemotingError, TimeoutError):
    """No response arrived within the timeout."""


class MQBrokerError(MQClientError):
    """The broker (or name server) answered with an error response code."""

    def __init__(self, code: int, remark: str | None, addr: str | None = None) -> None:
        self.code = code
        self.remark = remark
        self.addr = addr
        where = f" from {addr}" if addr else ""
        super().__init__(f"response code {code}{where}: {remark or ''}")
