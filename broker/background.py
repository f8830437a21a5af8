"""A service that is one long-running task: start() creates it, stop() cancels it and waits for it to end."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class BackgroundService:
    """Subclasses implement ``run()`` (usually a loop) and may set ``task_name``."""

    task_name = "background-service"
    _task: asyncio.Task | None = None

    def run(self) -> Coroutine[Any, Any, None]:
        raise NotImplementedError

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name=self.task_name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        # Python 3.11's wait_for can lose a cancellation that arrives as the awaited operation fails (a connection
        # lost at the same moment): cancel again until the task really ends.
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.5)
        await asyncio.gather(task, return_exceptions=True)
