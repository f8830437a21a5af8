"""Waiting for an event with a timeout without losing a cancellation.

Python 3.11's ``asyncio.wait_for`` returns normally when the awaited event is set in the same loop iteration as the
task's cancellation, so a service loop built on it can survive ``task.cancel()`` and keep a shutdown waiting forever.
``asyncio.timeout`` counts cancellations per task and does not have that race.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass; True if it was set. Cancellation always propagates."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
