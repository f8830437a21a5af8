"""The rates GET_BROKER_RUNTIME_INFO and GET_CONSUME_STATS report (putTps, getTransferedTps, per-group consume TPS),
sampled every few seconds from the store's counters and the committed offsets."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from typing import Any

log = logging.getLogger(__name__)

RATE_SAMPLE_INTERVAL_S = 5.0


class RateSampler:
    """`store`: its ``stats`` counters (put_messages, get_messages); `offsets`: its ``offset_table`` of committed
    offsets (``topic@group -> {queue: offset}``; replaced when loaded, so read through the manager)."""

    def __init__(self, store: Any, offsets: Any) -> None:
        self._store = store
        self._offsets = offsets
        self._rates: dict[str, float] = {}
        self._group_rates: dict[str, float] = {}
        self._last_sample: tuple[float, int, int, dict[str, int]] | None = None
        self._task: asyncio.Task | None = None

    def _group_consumed_totals(self) -> dict[str, int]:
        totals: dict[str, int] = defaultdict(int)
        for key, queues in self._offsets.offset_table.items():
            group = key.rpartition("@")[2]
            totals[group] += sum(queues.values())
        return totals

    def sample(self, now: float | None = None) -> None:
        """Update put/get TPS and per-group consume TPS from the counters since the previous sample."""
        now = time.monotonic() if now is None else now
        stats = self._store.stats
        puts, gets = int(stats.get("put_messages", 0)), int(stats.get("get_messages", 0))
        groups = self._group_consumed_totals()
        previous = self._last_sample
        self._last_sample = (now, puts, gets, groups)
        if previous is None:
            return
        elapsed = now - previous[0]
        if elapsed <= 0:
            return
        self._rates = {"putTps": round(max(0, puts - previous[1]) / elapsed, 2),
                       "getTransferedTps": round(max(0, gets - previous[2]) / elapsed, 2)}
        old_groups = previous[3]
        self._group_rates = {g: round(max(0, total - old_groups.get(g, total)) / elapsed, 2)
                             for g, total in groups.items()}

    def runtime_rates(self) -> dict[str, float]:
        return dict(self._rates)

    def consume_tps(self, group: str) -> float:
        return float(self._group_rates.get(group, 0.0))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._sample_forever(), name="ops-rate-sampler")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _sample_forever(self) -> Any:
        while True:
            try:
                self.sample()
            except Exception:
                log.exception("sampling broker rates failed")
            await asyncio.sleep(RATE_SAMPLE_INTERVAL_S)
