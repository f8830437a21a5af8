"""The console's sign-in throttle and Host check on their own (the broker-process tests are in
tests/integration/test_console_trust.py): the schedule, the memory bound and the name rules."""

from __future__ import annotations

import pytest

from broker.console.hosts import HostCheck, split_host
from broker.console.throttle import FailureTable, SignInThrottle, ThrottlePolicy, address_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_delays_double_up_to_the_cap_then_lock_and_are_forgotten():
    clock = Clock()
    throttle = SignInThrottle(ThrottlePolicy(2, 8, max_delay_s=4.0, lock_s=60.0),
                              ThrottlePolicy(100, 200, 4.0, 60.0), clock=clock)
    waits = []
    for _ in range(8):
        refusal = throttle.check("10.0.0.1", "acct")
        if refusal is not None:
            waits.append(refusal.retry_after_s)
            clock.now += refusal.retry_after_s
            assert throttle.check("10.0.0.1", "acct") is None
        throttle.failed("10.0.0.1", "acct")
    assert waits == [1, 2, 4, 4, 4, 4]  # none for the first two failures, then doubling, capped at 4 s
    refusal = throttle.check("10.0.0.1", "acct")
    assert refusal.retry_after_s == 60 and "locked" in refusal.message and "from 10.0.0.1" in refusal.message
    assert throttle.check("10.0.0.2", "other") is None  # other addresses and accounts are not touched
    clock.now += 60.0
    assert throttle.check("10.0.0.1", "acct") is None  # the lock ends and the failures are forgotten
    throttle.failed("10.0.0.1", "acct")
    assert throttle.check("10.0.0.1", "acct") is None


def test_the_failure_tables_stay_bounded():
    table = FailureTable(ThrottlePolicy(1, 2, 1.0, 3600.0), max_keys=100)
    for n in range(5000):
        table.fail(f"name-{n}", float(n))
    assert len(table) == 100
    assert table.wait("name-4999", 4999.0) != (0.0, False)  # the newest are the ones kept
    assert table.wait("name-0", 4999.0) == (0.0, False)


def test_a_success_clears_the_account_but_not_the_address():
    clock = Clock()
    throttle = SignInThrottle(ThrottlePolicy(1, 5, 10.0, 60.0), ThrottlePolicy(1, 5, 10.0, 60.0), clock=clock)
    throttle.failed("10.0.0.1", "acct")
    throttle.succeeded("acct")
    assert throttle.check("10.0.0.9", "acct") is None
    assert "from 10.0.0.1" in throttle.check("10.0.0.1", "another").message


def test_ipv6_clients_are_counted_by_their_64_prefix():
    assert address_key("2001:db8:1:2::5") == address_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert address_key("::ffff:10.1.2.3") == "10.1.2.3"


def test_host_names():
    assert split_host("[::1]:8082") == ("::1", 8082)
    assert split_host("Example.COM.") == ("example.com", None)
    assert split_host("a:b") is None and split_host("[::1]x") is None and split_host("h:70000") is None
    loopback = HostCheck("127.0.0.1", 8082, "10.1.1.1", ["ops.example", "pinned.example:9000"])
    assert loopback.allows("localhost:8082", "127.0.0.1") and loopback.allows("10.1.1.1:8082", "127.0.0.1")
    assert loopback.allows("ops.example:443", None) and loopback.allows("pinned.example:9000", None)
    assert not loopback.allows("pinned.example:8082", None) and not loopback.allows("evil.example:8082", None)
    assert not loopback.allows(None, "127.0.0.1") and not loopback.allows("localhost:8083", "127.0.0.1")
    specific = HostCheck("10.2.2.2", 8082, None)
    assert not specific.allows("localhost:8082", "10.2.2.2") and specific.allows("10.2.2.2:8082", "10.2.2.2")
    wildcard = HostCheck("0.0.0.0", 8082, None)
    assert wildcard.allows("192.168.5.5:8082", "192.168.5.5")  # the address the connection arrived on
    assert not wildcard.allows("192.168.5.6:8082", "192.168.5.5")
    assert HostCheck("127.0.0.1", 8082, None, ["*"]).allows("anything.example", None)
    with pytest.raises(ValueError):
        HostCheck("127.0.0.1", 8082, None, ["bad:port:x:"])
