"""Broker fault isolation for producers: the reference client's latency fault tolerance (`sendLatencyFaultEnable`,
the >= 5.1.4 tables) plus its detector, so that a hung or failing broker costs one timeout, not one per send.

After every unordered send attempt the producer reports the broker's latency (or a failure) here. A latency looked up
in `latency_max` gives how long the broker is "not available" (`not_available_duration`, largest threshold reached
wins); a failure counts as `ISOLATION_LATENCY` (10 s -> 10 s). Queue choice then prefers available brokers.

One deliberate difference from the reference: when the detector runs, a broker that failed (network error, timeout,
retryable broker code) is *unreachable* and stays avoided until a probe (GET_MAX_OFFSET with a short timeout) gets an
answer, even after its time ran out. The reference makes it available again after 10 s, so a broker that stays hung
costs one more send timeout every ~13 s; here it costs one in all.

Hot path: `blocked` maps a broker name to the monotonic time it may be used again (`inf`: until a probe answers);
brokers without trouble are absent, so the check is one dict lookup on a usually empty dict.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from client.errors import RemotingError
from protocol.codes import RequestCode
from protocol.command import RemotingCommand

if TYPE_CHECKING:
    from client.instance import ClientInstance

log = logging.getLogger(__name__)

__all__ = [
    "ISOLATION_LATENCY",
    "LATENCY_MAX",
    "NOT_AVAILABLE_DURATION",
    "BrokerDetector",
    "BrokerFault",
    "LatencyFaultTolerance",
]

# The reference's >= 5.1.4 tables (MQFaultStrategy), in seconds.
LATENCY_MAX: tuple[float, ...] = (0.05, 0.1, 0.55, 1.8, 3.0, 5.0, 15.0)
NOT_AVAILABLE_DURATION: tuple[float, ...] = (0.0, 0.0, 2.0, 5.0, 6.0, 10.0, 30.0)
ISOLATION_LATENCY = 10.0  # what a failed attempt counts as (the reference's 10000 ms)
_INF = math.inf


@dataclass(frozen=True, slots=True)
class BrokerFault:
    """What the producer currently holds against one broker (see Producer.isolated_brokers)."""

    broker_name: str
    latency: float  # seconds the last attempt took (ISOLATION_LATENCY for a failure)
    available_in: float  # seconds until its time runs out (0 when only a probe is awaited)
    reachable: bool  # False: avoided until a probe gets an answer


class _Item:
    __slots__ = ("available_at", "check_at", "latency", "reachable")

    def __init__(self, latency: float, available_at: float, reachable: bool) -> None:
        self.latency = latency
        self.available_at = available_at
        self.reachable = reachable
        self.check_at = 0.0


def check_seconds(optional: frozenset[str] = frozenset(), **options: float | None) -> None:
    """ValueError naming the option unless each is a positive number of seconds (None allowed for `optional`)."""
    for name, value in options.items():
        if value is None and name in optional:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")


def check_tables(latency_max: Sequence[float], not_available: Sequence[float]) -> tuple[tuple, tuple]:
    """Validated copies of the two tables: same non-zero length, non-negative, thresholds increasing."""
    lat = tuple(float(x) for x in latency_max)
    dur = tuple(float(x) for x in not_available)
    if not lat or len(lat) != len(dur):
        raise ValueError(f"latency_max ({len(lat)} entries) and not_available_duration ({len(dur)} entries) must be "
                         "non-empty and of the same length")
    if any(x < 0 for x in lat + dur) or any(b <= a for a, b in itertools.pairwise(lat)):
        raise ValueError(f"latency_max must be increasing and non-negative, not_available_duration non-negative: "
                         f"{lat} / {dur}")
    return lat, dur


class LatencyFaultTolerance:
    """Per-broker "not available until" times and reachability, fed by the producer's attempts and probes."""

    def __init__(self, latency_max: Sequence[float] = LATENCY_MAX,
                 not_available_duration: Sequence[float] = NOT_AVAILABLE_DURATION, *, detector: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.latency_max, self.not_available = check_tables(latency_max, not_available_duration)
        # Latencies below this isolate nobody: a send faster than it only needs recording if the broker had an item.
        self.first_threshold = next((lat for lat, dur in zip(self.latency_max, self.not_available) if dur > 0), _INF)
        self.detector = detector
        self.clock = clock
        self.blocked: dict[str, float] = {}
        self._items: dict[str, _Item] = {}

    def not_available_duration(self, latency: float) -> float:
        """Seconds a broker is avoided after an attempt that took `latency` seconds (largest threshold reached)."""
        lat = self.latency_max
        for i in range(len(lat) - 1, -1, -1):
            if latency >= lat[i]:
                return self.not_available[i]
        return 0.0

    def update(self, broker: str, latency: float, isolation: bool = False, reachable: bool = True) -> None:
        """Record an attempt: `isolation` for a failure (counts as ISOLATION_LATENCY); `reachable=False` (only
        honoured when the detector runs) keeps the broker avoided until a probe answers."""
        if isolation:
            latency = ISOLATION_LATENCY
        if not self.detector:
            reachable = True
        duration = self.not_available_duration(latency)
        if duration <= 0 and reachable:
            if broker in self._items:
                del self._items[broker]
                self.blocked.pop(broker, None)
            return
        now = self.clock()
        item = self._items.get(broker)
        if item is None:
            item = self._items[broker] = _Item(latency, now + duration, reachable)
            item.check_at = now
        else:
            item.latency = latency
            item.available_at = now + duration
            if item.reachable and not reachable:
                item.check_at = now
            item.reachable = reachable
        self.blocked[broker] = item.available_at if reachable else _INF

    def is_available(self, broker: str, now: float | None = None) -> bool:
        until = self.blocked.get(broker)
        return until is None or until <= (self.clock() if now is None else now)

    def is_reachable(self, broker: str) -> bool:
        return self.blocked.get(broker) != _INF

    def unreachable_due(self, interval: float, now: float | None = None) -> list[str]:
        """Unreachable brokers whose last probe (or failure) is at least `interval` seconds old; marks them checked."""
        now = self.clock() if now is None else now
        due = []
        for name, item in self._items.items():
            if not item.reachable and now - item.check_at >= interval:
                item.check_at = now
                due.append(name)
        return due

    def has_unreachable(self) -> bool:
        return any(not item.reachable for item in self._items.values())

    def mark_reachable(self, broker: str) -> None:
        """A probe got an answer: the broker is used again once its time has run out (at once if it has)."""
        item = self._items.get(broker)
        if item is None or item.reachable:
            return
        item.reachable = True
        if item.available_at <= self.clock():
            del self._items[broker]
            self.blocked.pop(broker, None)
        else:
            self.blocked[broker] = item.available_at

    def remove(self, broker: str) -> None:
        self._items.pop(broker, None)
        self.blocked.pop(broker, None)

    def isolated(self) -> dict[str, BrokerFault]:
        """Brokers avoided right now (time not run out, or waiting for a probe)."""
        now = self.clock()
        return {
            name: BrokerFault(name, item.latency, max(0.0, item.available_at - now), item.reachable)
            for name, item in sorted(self._items.items())
            if not item.reachable or item.available_at > now
        }


class BrokerDetector:
    """The reference's detector (`startDetectorEnable`): while some broker is unreachable, every `interval` seconds
    send it GET_MAX_OFFSET (queue 0 of a topic it serves) with a `timeout`-second deadline; any answer makes it
    reachable again. Runs only while there is something to probe."""

    def __init__(self, faults: LatencyFaultTolerance, instance: ClientInstance,
                 topic_for: Callable[[str], str], interval: float = 2.0, timeout: float = 0.5) -> None:
        self.faults = faults
        self.instance = instance
        self.topic_for = topic_for
        self.interval = interval
        self.timeout = timeout
        self._task: asyncio.Task | None = None
        self._opening: set[asyncio.Future] = set()
        self.probes = 0  # probes sent (tests and curiosity)

    def wake(self) -> None:
        """Start probing if some broker is unreachable and no probe loop runs (called after a failure)."""
        if self._task is None and self.faults.has_unreachable():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="producer-broker-detector")

    async def close(self) -> None:
        task, self._task = self._task, None
        for fut in (task, *self._opening):
            if fut is not None:
                fut.cancel()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        faults = self.faults
        step = self.interval / 4
        while True:
            await asyncio.sleep(step)
            if not faults.has_unreachable():
                self._task = None
                return
            due = faults.unreachable_due(self.interval)
            if due:
                await asyncio.gather(*(self._probe(name) for name in due), return_exceptions=True)

    async def _probe(self, broker: str) -> None:
        addr = self.instance.master_addr(broker)
        if addr is None:  # the broker left the routes: nothing to avoid or probe any more
            self.faults.remove(broker)
            return
        brokers = self.instance.brokers
        self.probes += 1
        try:
            if brokers.connected(addr) is None:
                # A connection attempt shared with sends must not be cancelled by the probe's deadline.
                opening = asyncio.ensure_future(brokers.connection(addr))
                self._opening.add(opening)
                opening.add_done_callback(_forget_result(self._opening))
                await asyncio.wait_for(asyncio.shield(opening), self.timeout)
            cmd = RemotingCommand(code=RequestCode.GET_MAX_OFFSET,
                                  ext_fields={"topic": self.topic_for(broker), "queueId": 0})
            await brokers.invoke(addr, cmd, self.timeout)
        except (RemotingError, TimeoutError, OSError) as exc:
            log.debug("probe of broker %s at %s failed: %s", broker, addr, exc)
            return
        if not self.faults.is_reachable(broker):
            log.info("broker %s at %s answers again; producers may use it", broker, addr)
        self.faults.mark_reachable(broker)


def _forget_result(pending: set) -> Callable[[asyncio.Future], None]:
    def done(fut: asyncio.Future) -> None:
        pending.discard(fut)
        if not fut.cancelled():
            fut.exception()  # retrieved: a failed background connection attempt is not an unhandled error
    return done
