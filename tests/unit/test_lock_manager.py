"""RebalanceLockManager: one holder per (group, queue), renewal, expiry, unlock by holder only."""

from __future__ import annotations

from protocol.bodies import MessageQueue

from broker.managers.rebalance_lock import RebalanceLockManager


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


Q0 = MessageQueue("T", "b", 0)
Q1 = MessageQueue("T", "b", 1)


def test_first_client_wins_until_unlock():
    clock = Clock()
    locks = RebalanceLockManager(60_000, clock)
    assert locks.try_lock_batch("g", [Q0, Q1], "A") == [Q0, Q1]
    assert locks.try_lock_batch("g", [Q0, Q1], "B") == []
    assert locks.holder("g", Q0) == "A" and locks.is_locked_by("g", Q0, "A")
    assert locks.unlock_batch("g", [Q0], "B") == 0  # not B's lock
    assert locks.try_lock_batch("g", [Q0], "B") == []
    assert locks.unlock_batch("g", [Q0], "A") == 1
    assert locks.try_lock_batch("g", [Q0, Q1], "B") == [Q0]
    assert locks.holder("g", Q1) == "A"


def test_groups_are_independent():
    locks = RebalanceLockManager(60_000, Clock())
    assert locks.try_lock_batch("g1", [Q0], "A") == [Q0]
    assert locks.try_lock_batch("g2", [Q0], "B") == [Q0]


def test_lock_expires_without_renewal_and_renewal_keeps_it():
    clock = Clock()
    locks = RebalanceLockManager(60_000, clock)
    locks.try_lock_batch("g", [Q0, Q1], "A")
    clock.now += 50_000
    assert locks.try_lock_batch("g", [Q0], "A") == [Q0]  # renew Q0 only
    clock.now += 20_000  # Q1: 70 s without renewal; Q0: 20 s
    assert locks.try_lock_batch("g", [Q0, Q1], "B") == [Q1]
    assert locks.holder("g", Q1) == "B" and locks.holder("g", Q0) == "A"
    clock.now += 60_001
    assert locks.holder("g", Q0) is None and not locks.has_live_locks("g")
    assert locks.try_lock_batch("g", [Q0], "B") == [Q0]
