"""Producers route around a sick broker (issue 28): two broker processes behind one name server, a producer sending
continuously, one master SIGSTOPped (hung: its connections stay open, nothing answers) or killed with -9.

With fault isolation (the default) a hung broker costs one send timeout: the first timeout isolates it, sends go to
the other broker, and a probe brings it back after SIGCONT. The control (send_latency_fault_enable=False) shows the old
behaviour: a send timeout every few sends for as long as the broker hangs.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time

import pytest

from client import Message, MQBrokerError, Producer
from client.instance import NameServerClient

from tests.support.client_helpers import wait_for
from tests.support.broker_process import NamesrvProcess
from tests.support.wire import create_topic

TIMEOUT = 3.0
SENDERS = 4
# How long the master stays stopped (the README's figures: ISOLATION_STOP_S=20).
STOP_S = float(os.environ.get("ISOLATION_STOP_S", "14"))
CONTROL_STOP_S = float(os.environ.get("ISOLATION_STOP_S", "8"))


@pytest.fixture
def namesrv():
    server = NamesrvProcess()
    yield server
    server.stop()


async def two_brokers(namesrv, broker_factory):
    a = broker_factory("broker-a", embedded_namesrv=False, namesrv_addr=namesrv.addr)
    b = broker_factory("broker-b", embedded_namesrv=False, namesrv_addr=namesrv.addr)
    lookup = NameServerClient(namesrv.addr)

    async def both_registered():
        try:
            route = await lookup.get_route("TBW102")
        except MQBrokerError:
            return False
        return sorted({q.broker_name for q in route.queues}) == ["broker-a", "broker-b"]

    try:
        await wait_for(both_registered, "both brokers registered")
    finally:
        await lookup.close()
    return a, b


async def routed_on_both(producer: Producer, topic: str, brokers) -> None:
    """Create topic (4 queues) on both brokers and wait until the name server routes it on both."""
    for broker in brokers:
        await create_topic(broker.addr, topic, queues=4)

    async def check():
        try:
            route = await producer._instance.update_route(topic)
        except MQBrokerError:
            return False
        return sorted({q.broker_name for q in route.queues}) == ["broker-a", "broker-b"]

    await wait_for(check, f"topic {topic} routed on both brokers", timeout=20)
    queues = await producer.fetch_publish_message_queues(topic)
    assert {q.broker_name for q in queues} == {"broker-a", "broker-b"}


class Traffic:
    """SENDERS coroutines each sending one message at a time; acks and failures timestamped."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.acks: list[tuple[float, str]] = []  # (monotonic time, broker name)
        self.failures: list[tuple[float, str]] = []  # (monotonic time, error type)
        self._stop = False
        self._tasks: list[asyncio.Task] = []
        self._n = 0

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run()) for _ in range(SENDERS)]

    async def stop(self) -> None:
        self._stop = True
        await asyncio.gather(*self._tasks)

    async def _run(self) -> None:
        while not self._stop:
            self._n += 1
            try:
                result = await self.producer.send(Message(self.topic, f"m-{self._n}".encode()))
            except Exception as exc:  # noqa: BLE001 (what the test counts: any failed send)
                self.failures.append((time.monotonic(), type(exc).__name__))
                continue
            self.acks.append((time.monotonic(), result.message_queue.broker_name))

    def between(self, start: float, end: float) -> tuple[list, list]:
        return ([a for a in self.acks if start <= a[0] < end], [f for f in self.failures if start <= f[0] < end])

    def max_gap(self, start: float, end: float) -> float:
        """Longest time without an ack in [start, end] (start and end count as ticks)."""
        times = [start] + [t for t, _ in self.acks if start <= t <= end] + [end]
        return max(b - a for a, b in itertools.pairwise(times))


async def stall(producer: Producer, a, topic: str, stop_s: float) -> dict:
    """Send continuously, SIGSTOP broker-a for stop_s seconds, SIGCONT; figures of the stopped window."""
    traffic = Traffic(producer, topic)
    traffic.start()
    try:
        await asyncio.sleep(1.0)
        stopped = time.monotonic()
        os.kill(a.proc.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(stop_s / 2)
            isolated_mid_stop = producer.isolated_brokers()
            await asyncio.sleep(stop_s / 2)
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        resumed = time.monotonic()

        def back_on_a():
            return any(t >= resumed and name == "broker-a" for t, name in traffic.acks)

        back = None
        try:
            await wait_for(back_on_a, "sends on broker-a again after SIGCONT", timeout=8.0)
            back = min(t for t, name in traffic.acks if t >= resumed and name == "broker-a") - resumed
        except AssertionError:
            pass
    finally:
        await traffic.stop()
    acks, failures = traffic.between(stopped, resumed)
    figures = {
        "acks": len(acks), "sends_per_s": len(acks) / (resumed - stopped), "failures": len(failures),
        "failure_types": sorted({kind for _, kind in failures}), "max_gap": traffic.max_gap(stopped, resumed),
        "on_a": sum(1 for _, name in acks if name == "broker-a"), "back_after": back,
        "isolated_mid_stop": isolated_mid_stop,
    }
    print(f"\nSIGSTOP {stop_s:.0f}s, fault isolation {'on' if producer.send_latency_fault_enable else 'off'}: "
          f"{figures['acks']} acks ({figures['sends_per_s']:.0f}/s), {figures['failures']} failed "
          f"{figures['failure_types']}, longest gap {figures['max_gap']:.2f}s, back on broker-a after "
          f"{back if back is None else round(back, 2)}s")
    return figures


async def test_a_hung_master_costs_one_timeout_and_is_used_again_after_sigcont(namesrv, broker_factory):
    a, b = await two_brokers(namesrv, broker_factory)
    topic = "FaultIsolationStop"
    async with Producer("pg-isolate-stop", namesrv.addr, send_timeout=TIMEOUT) as producer:
        await routed_on_both(producer, topic, (a, b))
        assert producer.isolated_brokers() == {}
        figures = await stall(producer, a, topic, STOP_S)
        assert set(figures["isolated_mid_stop"]) == {"broker-a"}
        assert not figures["isolated_mid_stop"]["broker-a"].reachable  # waiting for a probe, not a timer
        # At most one timeout's worth of stall: each sender loses at most the send it had on broker-a.
        assert figures["max_gap"] < TIMEOUT + 1.5, figures
        assert figures["failures"] <= SENDERS, figures
        assert figures["failure_types"] in ([], ["RemotingTimeoutError"]), figures
        assert figures["on_a"] <= SENDERS, figures  # nothing acknowledged by the stopped broker but stale answers
        assert figures["acks"] > 50 * STOP_S, figures  # nearly all sends went to broker-b meanwhile
        # The probe (every 2 s, after the 10 s isolation) brings broker-a back soon after SIGCONT.
        assert figures["back_after"] is not None and figures["back_after"] < 4.5, figures
        assert "broker-a" not in producer.isolated_brokers()


async def test_control_without_fault_isolation_a_hung_master_stalls_sends(namesrv, broker_factory):
    """The old behaviour, kept behind send_latency_fault_enable=False: every send that picks the stopped broker
    waits its full timeout, again and again."""
    a, b = await two_brokers(namesrv, broker_factory)
    topic = "FaultIsolationControl"
    async with Producer("pg-isolate-off", namesrv.addr, send_timeout=TIMEOUT,
                        send_latency_fault_enable=False) as producer:
        await routed_on_both(producer, topic, (a, b))
        figures = await stall(producer, a, topic, CONTROL_STOP_S)
        assert producer.isolated_brokers() == {}
    assert figures["isolated_mid_stop"] == {}
    assert figures["failures"] >= 2 * SENDERS, figures  # a timeout per sender per ~3 s, not one in all
    assert figures["max_gap"] >= TIMEOUT - 0.2, figures
    assert figures["back_after"] is not None  # round-robin uses broker-a again at once


async def test_kill_9_of_a_master_loses_no_send(namesrv, broker_factory):
    a, b = await two_brokers(namesrv, broker_factory)
    topic = "FaultIsolationKill"
    async with Producer("pg-isolate-kill", namesrv.addr, send_timeout=TIMEOUT) as producer:
        await routed_on_both(producer, topic, (a, b))
        traffic = Traffic(producer, topic)
        traffic.start()
        try:
            await asyncio.sleep(1.0)
            killed = time.monotonic()
            a.kill()
            await asyncio.sleep(4.0)
            isolated = producer.isolated_brokers()
        finally:
            await traffic.stop()
        acks, failures = traffic.between(killed, time.monotonic())
    assert failures == []  # in-flight sends failed over to broker-b within their time
    assert set(isolated) == {"broker-a"} and not isolated["broker-a"].reachable  # the probes are refused
    assert traffic.max_gap(killed, killed + 4.0) < 1.5
    assert len(acks) > 100 and {name for t, name in acks if t > killed + 0.5} == {"broker-b"}
