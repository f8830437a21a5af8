"""The services only a master runs: delayed delivery (schedule), the 5.x timer, transaction checks and POP.

One owner for their start and stop, used by the Broker (a master from the start) and by the controller-mode role
changes (broker/replicas/roles.py), which start them on becoming master and stop them on stepping down."""

from __future__ import annotations

import logging
from typing import Any

from broker.timer.timed import TIMER_TOPIC
from broker.transaction.half import CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC

log = logging.getLogger(__name__)

__all__ = ["MasterServices"]


class MasterServices:
    """``store``: where the timer listens for arrivals; ``topics``: the registry the transaction system topics are
    created in; the four services as the Broker built them."""

    def __init__(self, store: Any, topics: Any, schedule: Any, timer: Any, transactions: Any, pop: Any) -> None:
        self.store = store
        self.topics = topics
        self.schedule = schedule
        self.timer = timer
        self.transactions = transactions
        self.pop = pop
        self.running = False
        self.timer_started = False
        self.pop_started = False
        self._loaded = False

    async def start(self) -> None:
        """Load (the first time: also the timer's arrival listener; later: the timer and POP state again) and run
        them; a no-op when they run."""
        if self.running:
            return
        if not self._loaded:
            self.schedule.load()
            self.timer.load()
            self.store.add_arrival_listener(self.timer.on_message_arrival, TIMER_TOPIC)
            self.pop.load()
            self._loaded = True
        else:
            self.timer.load()
            self.pop.load()
        await self.schedule.start()
        self.timer.start()
        self.timer_started = True
        for topic in (HALF_TOPIC, OP_TOPIC, CHECK_MAX_TOPIC):  # as 5.x: the system topics exist from the start
            self.topics.create_topic_if_absent(topic, 1)
        self.transactions.start()
        self.pop.start()
        self.pop_started = True
        self.running = True

    async def stop(self) -> None:
        """A step down: stop them (they may start again on the next promotion)."""
        if not self.running:
            return
        self.running = False
        await self.schedule.stop()
        await self.timer.stop()
        self.timer_started = False
        await self.transactions.stop()
        await self.pop.stop()
        self.pop_started = False

    async def shutdown(self) -> None:
        """The broker's shutdown: stop whatever runs, each failure logged so the rest still stops."""
        self.running = False
        try:
            await self.schedule.stop()
        except Exception:
            log.exception("stopping the schedule service failed")
        if self.timer_started:
            try:
                await self.timer.stop()
            except Exception:
                log.exception("stopping the timer service failed")
        await self.transactions.stop()
        if self.pop_started:
            try:
                await self.pop.stop()
            except Exception:
                log.exception("stopping the POP service failed")
