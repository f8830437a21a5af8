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


class SubscriptionCheckError(MQBrokerError):
    """A broker refused a consumer's SQL92 subscription at start-up (CHECK_CLIENT_CONFIG): `code` and `remark` are the
    broker's (1 = the broker runs with enablePropertyFilter=false, 23 = the selector does not compile)."""

    def __init__(self, code: int, remark: str | None, addr: str | None, group: str, topic: str, expression: str) -> None:
        super().__init__(code, remark, addr)
        self.group = group
        self.topic = topic
        self.expression = expression
        self.args = (
            f"broker {addr} refused the SQL92 subscription of group {group!r} to topic {topic!r} "
            f"(response code {code}): {remark or 'no remark'}; selector: {_clip(expression)}",
        )


def _clip(text: str, limit: int = 200) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"
