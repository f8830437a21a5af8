"""The last hour of the broker's counters, sampled every few seconds, for the console's charts.

Each sample holds the messages put and got since boot, the messages written per topic and the lag per consumer group.
Rates are differences between neighbouring samples; a chart asks for the stored samples plus one taken now, so it
has a line from the first page view on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 10.0
KEEP_S = 3600.0


@dataclass(slots=True)
class Sample:
    at_ms: int
    put: int
    got: int
    topics: dict[str, int] = field(default_factory=dict)  # messages written (sum of max offsets)
    lags: dict[str, int] = field(default_factory=dict)


class CounterHistory:
    """A ring of samples over the last hour, filled by `run()` (a task the console owns)."""

    def __init__(self, take_sample: Callable[[], Sample], interval_s: float = SAMPLE_INTERVAL_S,
                 keep_s: float = KEEP_S) -> None:
        self.take_sample = take_sample
        self.interval_s = interval_s
        self.samples: deque[Sample] = deque(maxlen=max(2, int(keep_s / interval_s) + 1))

    async def run(self) -> None:
        while True:
            try:
                self.samples.append(self.take_sample())
            except Exception:  # noqa: BLE001 - a failed sample costs a point, never the console
                log.exception("console: sampling the broker's counters failed")
            await asyncio.sleep(self.interval_s)

    def _with_now(self) -> list[Sample]:
        samples = list(self.samples)
        now = self.take_sample()
        if not samples or now.at_ms > samples[-1].at_ms:
            samples.append(now)
        return samples

    def broker_rates(self) -> list[dict[str, float]]:
        """[{t, in, out}] messages per second between neighbouring samples."""
        points = []
        samples = self._with_now()
        for before, after in zip(samples, samples[1:]):
            seconds = max(0.001, (after.at_ms - before.at_ms) / 1000)
            points.append({"t": after.at_ms, "in": round(max(0, after.put - before.put) / seconds, 2),
                           "out": round(max(0, after.got - before.got) / seconds, 2)})
        return points

    def topic_rates(self) -> dict[str, float]:
        """Messages per second written to each topic over the latest interval."""
        samples = self._with_now()
        if len(samples) < 2:
            return {}
        after = samples[-1]
        before = samples[-2]
        if len(samples) > 2 and after.at_ms - before.at_ms < self.interval_s * 500:  # too short to be steady
            before = samples[-3]
        seconds = max(0.001, (after.at_ms - before.at_ms) / 1000)
        return {topic: max(0, count - before.topics.get(topic, count)) / seconds
                for topic, count in after.topics.items()}

    def lag_series(self, group: str) -> list[dict[str, int]]:
        return [{"t": s.at_ms, "lag": s.lags[group]} for s in self._with_now() if group in s.lags]


def now_ms() -> int:
    return time.time_ns() // 1_000_000
