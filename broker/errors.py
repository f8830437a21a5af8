"""Errors shared by the broker's configuration modules (broker.config, broker.tls), kept apart so neither imports
the other for them."""

from __future__ import annotations


class ConfigError(ValueError):
    """A broker.conf problem the operator must fix; the message names the key (and line when known)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.detail = message
