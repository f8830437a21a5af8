"""Starting the broker's listeners: a port that cannot be bound is a one-line ConfigError naming its key (exit code 2),
or, for an optional listener left at its default port, one warning."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from broker.errors import ConfigError
from broker.preflight import bind_problem

log = logging.getLogger("broker.broker")  # the boot's own logger: messages read as before

__all__ = ["listen", "listen_optional"]


async def listen(key: str, host: str, port: int, start: Callable[[], Awaitable[None]]) -> None:
    """Start one listener; failing to bind is a ConfigError naming its key (one line, exit code 2)."""
    try:
        await start()
    except OSError as exc:
        raise ConfigError(bind_problem(key, host, port, exc), key) from None


async def listen_optional(key: str, configured: int | None, listener: Any, what: str) -> bool:
    """Start an optional listener (`listener.host`, `.port`, `.start()`); False when it did not start.

    A port left unset (`configured` None: the default) is best effort: a second broker on the machine runs without
    it, with one warning. A port set in broker.conf must be free (ConfigError naming the key)."""
    if configured is None:
        try:
            await listener.start()
        except OSError as exc:
            log.warning("%s not started: %s", what, bind_problem(key, listener.host, listener.port, exc))
            return False
        return True
    await listen(key, listener.host, listener.port, listener.start)
    return True
