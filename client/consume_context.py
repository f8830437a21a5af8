"""What a push-consumer listener may be given besides its messages, and how it is called.

A listener that takes one parameter is called ``listener(msgs)``; one that takes two is called
``listener(msgs, context)`` with a ConsumeConcurrentlyContext (concurrent consumption) or a ConsumeOrderlyContext
(orderly), as the reference client does. The context is how a listener asks for more than SUCCESS or failure:
partial success of a batch (``ack_index``), where a failed message goes next (``delay_level_when_next_consume``), how
long an orderly queue waits (``suspend_current_queue_time_millis``) and whether its offset moves on by itself
(``auto_commit``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass

from client.message import MessageQueue

log = logging.getLogger(__name__)

__all__ = ["ConsumeConcurrentlyContext", "ConsumeOrderlyContext", "ListenerInfo", "ACK_ALL"]

ACK_ALL = 2**31 - 1  # the reference's Integer.MAX_VALUE: "every message of the batch succeeded"


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    """Given to a two-parameter concurrent listener, one per call.

    ack_index: on SUCCESS, the messages after this index (0-based) are treated as failed and sent back; the default
    acknowledges the whole batch. On RECONSUME_LATER every message is sent back whatever ack_index says.
    delay_level_when_next_consume: for the messages sent back: 0 lets the broker choose (3 + reconsume times),
    -1 sends them straight to %DLQ%<group>, > 0 is that delay level.
    """

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = ACK_ALL


@dataclass(slots=True)
class ConsumeOrderlyContext:
    """Given to a two-parameter orderly listener, one per call.

    auto_commit: True (default) commits the queue's offset past the batch on SUCCESS; False leaves committing to
    the COMMIT result (SUCCESS then only moves consumption on).
    suspend_current_queue_time_millis: when > 0, how long the queue waits after SUSPEND_CURRENT_QUEUE_A_MOMENT
    instead of the consumer's suspend_current_queue_time_millis.
    """

    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


def _positional_capacity(listener: Callable) -> int:
    """How many positional arguments listener accepts (a large number for *args); 1 when it cannot be told."""
    try:
        signature = inspect.signature(listener)
    except (TypeError, ValueError):
        return 1
    count = 0
    for param in signature.parameters.values():
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            return 1 << 16
        if param.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            count += 1
    return count


def _is_async(listener: Callable) -> bool:
    if inspect.iscoroutinefunction(listener):
        return True
    call = getattr(listener, "__call__", None)
    return call is not None and inspect.iscoroutinefunction(call)


class ListenerInfo:
    """A listener examined once: its name for log lines, whether it is async and whether it takes a context; also
    remembers that the 'returned None' warning was already given (one warning per consumer)."""

    __slots__ = ("listener", "name", "is_async", "takes_context", "_warned_none")

    def __init__(self, listener: Callable) -> None:
        self.listener = listener
        self.name = getattr(listener, "__qualname__", None) or getattr(type(listener), "__qualname__", repr(listener))
        self.is_async = _is_async(listener)
        self.takes_context = _positional_capacity(listener) >= 2
        self._warned_none = False

    def warn_none_once(self, group: str, treated_as: str) -> None:
        """A listener returned None (a forgotten return): say so once, naming the listener and what None means."""
        if self._warned_none:
            return
        self._warned_none = True
        log.warning("listener %s of group %s returned None; treating it as %s (return a result explicitly; "
                    "this warning is given once)", self.name, group, treated_as)
