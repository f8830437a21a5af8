"""wait_event must never swallow a cancellation (Python 3.11's wait_for does when the event is set in the same
loop iteration as the cancel, which kept PushConsumer.shutdown() waiting on its rebalance loop forever)."""

from __future__ import annotations

import asyncio

import pytest

from client.waiting import wait_event


async def _service_loop(event: asyncio.Event) -> None:
    while True:
        await wait_event(event, 20)
        event.clear()


async def test_cancel_in_the_same_iteration_as_set_still_cancels():
    event = asyncio.Event()
    task = asyncio.create_task(_service_loop(event))
    await asyncio.sleep(0)  # the loop is now waiting on the event
    event.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)


async def test_returns_true_when_set_and_false_on_timeout():
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_event(event, 2) is True
    assert await wait_event(event, 0) is True  # already set: no wait
