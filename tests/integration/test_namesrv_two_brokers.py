"""Two broker processes behind one standalone name server process (``python -m broker.namesrv``)."""

from __future__ import annotations

import json

import pytest

from protocol.bodies import TopicRouteData
from protocol.codes import RequestCode as RC, ResponseCode as R

from tests.support.broker_process import NamesrvProcess, free_port
from tests.support.wire import WireClient, wait_until, send_v2_fields


@pytest.fixture
def namesrv():
    server = NamesrvProcess()
    yield server
    server.stop()


async def _route_brokers(ns: WireClient, topic: str) -> tuple[int, dict[str, int], dict[str, str]]:
    """(response code, broker name -> write queue count, broker name -> master address)."""
    resp = await ns.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if resp.code != R.SUCCESS:
        return resp.code, {}, {}
    route = TopicRouteData.decode(resp.body)
    queues = {q.broker_name: q.write_queue_nums for q in route.queue_datas}
    addrs = {b.broker_name: b.broker_addrs[0] for b in route.broker_datas}
    return resp.code, queues, addrs


async def test_two_brokers_behind_a_standalone_namesrv(namesrv, broker_factory):
    a = broker_factory("broker-a", embedded_namesrv=False, namesrv_addr=namesrv.addr)
    b = broker_factory("broker-b", embedded_namesrv=False, namesrv_addr=namesrv.addr)
    topic = "ClusterTopic"
    for broker in (a, b):  # auto-create the topic on both brokers through a send
        async with await WireClient.connect(broker.addr) as client:
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic), b"x")
            assert resp.code == R.SUCCESS, resp.remark

    async with await WireClient.connect(namesrv.addr) as ns:
        async def both_routed():
            code, queues, addrs = await _route_brokers(ns, topic)
            return (queues, addrs) if sorted(queues) == ["broker-a", "broker-b"] else None

        queues, addrs = await wait_until(both_routed, "both brokers in the route")
        assert queues == {"broker-a": 4, "broker-b": 4}
        assert addrs == {"broker-a": a.addr, "broker-b": b.addr}

        cluster = await ns.request(RC.GET_BROKER_CLUSTER_INFO)
        assert cluster.code == R.SUCCESS
        info = json.loads(cluster.body)
        assert sorted(info["clusterAddrTable"]["DefaultCluster"]) == ["broker-a", "broker-b"]
        assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"]["0"] == a.addr
        assert info["brokerAddrTable"]["broker-b"]["brokerAddrs"]["0"] == b.addr
        topics = await ns.request(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert topic in json.loads(topics.body)["topicList"]

        # kill -9 one broker: its registration connection closes and its routes go at once
        b.kill()

        async def only_a_left():
            code, queues, _ = await _route_brokers(ns, topic)
            return code == R.SUCCESS and sorted(queues) == ["broker-a"]

        await wait_until(only_a_left, "broker-b's route to disappear")
        info = json.loads((await ns.request(RC.GET_BROKER_CLUSTER_INFO)).body)
        assert sorted(info["clusterAddrTable"]["DefaultCluster"]) == ["broker-a"]
        assert "broker-b" not in info["brokerAddrTable"]

        # a graceful stop unregisters: the topic has no route left at all
        assert a.stop() == 0

        async def no_route():
            code, _, _ = await _route_brokers(ns, topic)
            return code == R.TOPIC_NOT_EXIST

        await wait_until(no_route, "the last route to disappear")


async def test_broker_registers_when_the_namesrv_starts_later(broker_factory):
    """A broker started before its name server registers on its next attempt (topic change wakes it)."""
    port = free_port()
    broker = broker_factory("broker-late", embedded_namesrv=False, namesrv_addr=f"127.0.0.1:{port}",
                            extra={"registerNameServerPeriod": 300})
    server = NamesrvProcess(port)
    try:
        async with await WireClient.connect(server.addr) as ns:
            async def routed():
                code, queues, _ = await _route_brokers(ns, "TBW102")
                return list(queues) == ["broker-late"] or None

            await wait_until(routed, "the late registration")
    finally:
        server.stop()
    assert broker.proc.poll() is None
