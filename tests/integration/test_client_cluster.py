"""Producer failover and consumption across two broker processes behind one standalone name server."""

from __future__ import annotations

import pytest

from client import Message, MQBrokerError, Producer, SendStatus
from client.instance import NameServerClient

from tests.support.client_helpers import Recorder, push_consumer, wait_for
from tests.support.broker_process import NamesrvProcess


def async_equals(fn, arg, expected):
    async def check():
        return await fn(arg) == expected
    return check


@pytest.fixture
def namesrv():
    server = NamesrvProcess()
    yield server
    server.stop()


@pytest.mark.parametrize("how", ["sigterm", "kill -9"])
async def test_producer_fails_over_when_a_broker_stops(namesrv, broker_factory, how):
    a = broker_factory("broker-a", embedded_namesrv=False, namesrv_addr=namesrv.addr)
    b = broker_factory("broker-b", embedded_namesrv=False, namesrv_addr=namesrv.addr)
    topic = "CliFailover"
    rec = Recorder()
    consumer = push_consumer("cg-failover", namesrv.addr, topic, rec)
    lookup = NameServerClient(namesrv.addr)

    async def brokers_of(topic_name: str) -> list[str]:
        try:
            route = await lookup.get_route(topic_name)
        except MQBrokerError:
            return []
        return sorted({q.broker_name for q in route.queues})

    try:
        await wait_for(async_equals(brokers_of, "TBW102", ["broker-a", "broker-b"]), "both brokers registered")
    finally:
        await lookup.close()
    async with Producer("pg-failover", namesrv.addr, route_refresh_interval=60) as producer:
        before = [await producer.send(Message(topic, f"before-{i}".encode())) for i in range(40)]
        assert {r.message_queue.broker_name for r in before} == {"broker-a", "broker-b"}

        async def routed_on_both():
            try:  # the brokers register the auto-created topic with the name server shortly after creating it
                route = await producer._instance.update_route(topic)
            except MQBrokerError:
                return False
            return sorted(q.broker_name for q in route.queues) == ["broker-a", "broker-b"]

        await wait_for(routed_on_both, "the topic to be routed on both brokers")
        await consumer.start()
        try:
            await wait_for(lambda: len(rec.deliveries) >= 40, "the 40 messages from both brokers")
            if how == "sigterm":
                assert b.stop() == 0  # graceful stop; the producer still has broker-b's queues in its route
            else:
                b.kill()
            after = []
            for i in range(60):
                after.append(await producer.send(Message(topic, f"after-{i}".encode())))
            assert all(r.status is SendStatus.SEND_OK for r in after)
            assert {r.message_queue.broker_name for r in after} == {"broker-a"}
            await wait_for(lambda: len(rec.deliveries) >= 100, "the 60 messages sent after the stop")
        finally:
            await consumer.shutdown()
    assert rec.bodies == {f"before-{i}".encode() for i in range(40)} | {f"after-{i}".encode() for i in range(60)}
    assert not rec.duplicates()
    assert a.proc.poll() is None
