"""Producer fault isolation, pure parts: the latency tables (controller.md §14, >= 5.1.4), the reachability rules and
the queue choice that skips avoided brokers."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from client import Producer
from client.fault import ISOLATION_LATENCY, LATENCY_MAX, NOT_AVAILABLE_DURATION, LatencyFaultTolerance
from client.message import MessageQueue
from client.route import TopicPublishInfo, TopicRoute


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def tolerance(detector: bool = True) -> tuple[LatencyFaultTolerance, Clock]:
    clock = Clock()
    return LatencyFaultTolerance(detector=detector, clock=clock), clock


def test_tables_are_the_reference_ones():
    assert LATENCY_MAX == (0.05, 0.1, 0.55, 1.8, 3.0, 5.0, 15.0)
    assert NOT_AVAILABLE_DURATION == (0.0, 0.0, 2.0, 5.0, 6.0, 10.0, 30.0)
    assert ISOLATION_LATENCY == 10.0


@pytest.mark.parametrize("latency, duration", [
    (0.0, 0.0), (0.049, 0.0), (0.05, 0.0), (0.3, 0.0), (0.549, 0.0), (0.55, 2.0), (1.79, 2.0), (1.8, 5.0),
    (3.0, 6.0), (4.99, 6.0), (5.0, 10.0), (ISOLATION_LATENCY, 10.0), (15.0, 30.0), (600.0, 30.0),
])
def test_largest_threshold_reached_wins(latency, duration):
    faults, _ = tolerance()
    assert faults.not_available_duration(latency) == duration


def test_fast_answers_isolate_nobody_and_clear_an_old_item():
    faults, clock = tolerance()
    assert faults.first_threshold == 0.55
    faults.update("a", 0.2)
    assert faults.blocked == {} and faults.isolated() == {}
    faults.update("a", 2.0)  # slow: avoided for 5 s, still reachable
    assert faults.blocked == {"a": clock.now + 5.0}
    assert not faults.is_available("a") and faults.is_reachable("a")
    [fault] = faults.isolated().values()
    assert (fault.broker_name, fault.latency, fault.available_in, fault.reachable) == ("a", 2.0, 5.0, True)
    clock.now += 5.0
    assert faults.is_available("a") and faults.isolated() == {}
    faults.update("a", 0.01)
    assert faults.blocked == {}


def test_a_failure_waits_for_a_probe_even_after_its_time():
    faults, clock = tolerance()
    faults.update("a", 0.0, isolation=True, reachable=False)
    assert faults.blocked == {"a": math.inf}
    assert not faults.is_reachable("a") and faults.has_unreachable()
    clock.now += 60
    assert not faults.is_available("a")  # the reference would use it again after 10 s
    assert faults.isolated()["a"].reachable is False
    faults.mark_reachable("a")
    assert faults.blocked == {} and faults.isolated() == {} and not faults.has_unreachable()


def test_an_early_probe_answer_leaves_the_timer_running():
    faults, clock = tolerance()
    faults.update("a", 0.0, isolation=True, reachable=False)
    clock.now += 3.0
    faults.mark_reachable("a")
    assert faults.blocked == {"a": clock.now + 7.0}
    assert not faults.is_available("a")
    clock.now += 7.0
    assert faults.is_available("a")


def test_without_the_detector_a_failure_is_timed_only():
    faults, clock = tolerance(detector=False)
    faults.update("a", 0.0, isolation=True, reachable=False)
    assert faults.blocked == {"a": clock.now + 10.0} and faults.is_reachable("a")
    assert not faults.has_unreachable()
    clock.now += 10.0
    assert faults.is_available("a")


def test_probes_are_due_once_per_interval():
    faults, clock = tolerance()
    faults.update("a", 0.0, isolation=True, reachable=False)
    faults.update("b", 2.0)  # slow but reachable: nothing to probe
    assert faults.unreachable_due(2.0) == []
    clock.now += 2.0
    assert faults.unreachable_due(2.0) == ["a"]
    assert faults.unreachable_due(2.0) == []  # just checked
    faults.update("a", 0.0, isolation=True, reachable=False)  # a further failure does not postpone the probe
    clock.now += 2.0
    assert faults.unreachable_due(2.0) == ["a"]
    faults.remove("a")
    assert faults.unreachable_due(0.0) == [] and "a" not in faults.blocked


@pytest.mark.parametrize("latency_max, durations", [((), ()), ((1.0, 2.0), (1.0,)), ((2.0, 1.0), (0.0, 1.0)),
                                                     ((0.5,), (-1.0,))])
def test_bad_tables_are_refused(latency_max, durations):
    with pytest.raises(ValueError):
        LatencyFaultTolerance(latency_max, durations)


@pytest.mark.parametrize("option, value", [("detect_interval", 0), ("detect_timeout", -1),
                                           ("send_msg_max_timeout_per_request", 0), ("detect_interval", "2"),
                                           ("detect_timeout", None)])
def test_bad_producer_options_are_refused(option, value):
    with pytest.raises(ValueError, match=option):
        Producer("pg", "127.0.0.1:9876", **{option: value})


def test_producer_option_off_has_no_isolation():
    assert Producer("pg", "127.0.0.1:9876").send_latency_fault_enable
    off = Producer("pg", "127.0.0.1:9876", send_latency_fault_enable=False)
    assert not off.send_latency_fault_enable and off.isolated_brokers() == {}


def test_the_blocking_facade_shows_isolated_brokers():
    from client import sync

    producer = sync.Producer("pg", "127.0.0.1:9876")
    assert producer.isolated_brokers() == {}


# ----------------------------------------------------------------------------------------------- queue choice
def publish_info(**queues_per_broker: int) -> TopicPublishInfo:
    queues = [MessageQueue("T", name, i) for name, n in queues_per_broker.items() for i in range(n)]
    return TopicPublishInfo("T", queues, TopicRoute())


def test_available_brokers_are_chosen_round_robin():
    info = publish_info(a=2, b=2, c=2)
    blocked = {"b": 2000.0}
    picked = [info.select_available(blocked, 1000.0) for _ in range(40)]
    assert Counter(mq.broker_name for mq in picked) == {"a": 20, "c": 20}
    assert len({mq for mq in picked}) == 4  # every queue of a and c
    assert {mq.broker_name for mq in (info.select_available(blocked, 2000.0) for _ in range(6))} == {"a", "b", "c"}


def test_a_retry_avoids_the_previous_broker_when_another_is_available():
    info = publish_info(a=2, b=2)
    for _ in range(10):
        assert info.select_available({}, 0.0, avoid_broker="a").broker_name == "b"
        assert info.select_available({}, 0.0, avoid_broker="a", reset=True).broker_name == "b"
    # b is slow (timed, still reachable): better than a which just failed
    assert info.select_available({"b": 10.0}, 0.0, avoid_broker="a").broker_name == "b"


def test_fallbacks_reachable_then_anything_but_the_previous_broker():
    info = publish_info(a=1, b=1, c=1)
    blocked = {"a": math.inf, "b": 50.0, "c": math.inf}
    assert {info.select_available(blocked, 0.0).broker_name for _ in range(6)} == {"b"}  # reachable beats waiting
    everything = {"a": math.inf, "b": math.inf, "c": math.inf}
    assert "a" not in {info.select_available(everything, 0.0, avoid_broker="a").broker_name for _ in range(6)}
    single = publish_info(a=2)
    assert single.select_available({"a": math.inf}, 0.0, avoid_broker="a").broker_name == "a"  # nothing else
