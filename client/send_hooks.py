"""Send hooks: code a producer calls around each ``send``, ``send_async`` and ``send_batch`` (the reference client's
SendMessageHook). Message traces (client/trace.py) register one; a producer without hooks pays one empty-list test
(and one call) per send.

``send_before(context)`` runs before anything is sent; ``send_after(context)`` once the send is over, with
``context.result`` (and ``context.broker_addr``, the master that stored it) or ``context.error`` set (send and
send_batch report a validation error there; send_async raises it at once, before the hooks). Retries inside one
call are one send. A hook that raises is logged (at most once a minute per producer) and never fails the send.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from client.message import Message, SendResult

log = logging.getLogger(__name__)

__all__ = ["SendContext", "SendHook", "SendHooks"]

_WARN_INTERVAL_S = 60.0


@dataclass(slots=True)
class SendContext:
    """One send as its hooks see it: the group, its messages (one unless ``batch``) and how it ended."""

    group: str
    messages: list[Message]
    batch: bool
    delay_level: int | None
    began_ms: int
    result: SendResult | None = None
    error: BaseException | None = None
    broker_addr: str = ""  # the master address that answered (its broker name when the address is unknown)


class SendHook(Protocol):
    def send_before(self, context: SendContext) -> None: ...

    def send_after(self, context: SendContext) -> None: ...


class SendHooks:
    """A producer's registered hooks, called in registration order; ``master_addr(broker_name)`` names the master
    that stored a message (None when the route does not know it)."""

    __slots__ = ("group", "hooks", "master_addr", "_warned_at")

    def __init__(self, group: str, master_addr: Callable[[str], str | None] = lambda _name: None) -> None:
        self.group = group
        self.hooks: list[SendHook] = []
        self.master_addr = master_addr
        self._warned_at = -_WARN_INTERVAL_S

    def register(self, hook: SendHook) -> None:
        self.hooks.append(hook)

    def before(self, messages: list[Message], batch: bool, delay_level: int | None) -> SendContext:
        context = SendContext(self.group, messages, batch, delay_level, int(time.time() * 1000))
        for hook in self.hooks:
            try:
                hook.send_before(context)
            except Exception as exc:
                self._failed(hook, exc)
        return context

    def after(self, context: SendContext, result: SendResult | None, error: BaseException | None,
              broker_addr: str = "") -> None:
        context.result, context.error, context.broker_addr = result, error, broker_addr
        for hook in self.hooks:
            try:
                hook.send_after(context)
            except Exception as exc:
                self._failed(hook, exc)

    def ended(self, context: SendContext, result: SendResult | None, error: BaseException | None) -> None:
        """``after`` with the address of the master that stored ``result``."""
        addr = ""
        if result is not None:
            name = result.message_queue.broker_name
            addr = self.master_addr(name) or name
        self.after(context, result, error, addr)

    def ended_task(self, context: SendContext, task: asyncio.Task) -> None:
        """``ended`` for a send run as a task (send_async): its result, exception or cancellation."""
        if task.cancelled():
            self.ended(context, None, asyncio.CancelledError())
        elif task.exception() is not None:
            self.ended(context, None, task.exception())
        else:
            self.ended(context, task.result(), None)

    async def around(self, send: Awaitable[SendResult], context: SendContext) -> SendResult:
        """Await ``send`` (not started yet: the before hooks ran first), then the after hooks."""
        try:
            result = await send
        except BaseException as exc:
            self.ended(context, None, exc)
            raise
        self.ended(context, result, None)
        return result

    def _failed(self, hook: SendHook, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._warned_at >= _WARN_INTERVAL_S:
            self._warned_at = now
            log.warning("send hook %r of producer group %s failed (said at most once a minute): %s",
                        hook, self.group, exc)
