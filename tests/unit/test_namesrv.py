"""Name server: route bookkeeping, request handlers, broker registration (embedded and over TCP)."""

from __future__ import annotations

import asyncio
import json

import pytest

from broker.config import BrokerConfig
from broker.managers.topic_config import TopicConfig, TopicConfigManager
from broker.namesrv.processor import NamesrvProcessor, body_crc32
from broker.namesrv.route_info import RouteInfoManager
from broker.namesrv.registrar import BrokerRegistrar
from protocol.bodies import TopicRouteData
from protocol.command import RemotingCommand


def topics(**queues: int) -> dict[str, dict]:
    return {
        name: {"topicName": name, "readQueueNums": n, "writeQueueNums": n, "perm": 6, "topicSysFlag": 0}
        for name, n in queues.items()
    }


def version(counter: int) -> dict:
    return {"counter": counter, "timestamp": 1000 + counter, "stateVersion": 0}


# -- RouteInfoManager ----------------------------------------------------------------------------------
def test_two_brokers_share_a_topic():
    ri = RouteInfoManager()
    ri.register_broker("C", "broker-a", "10.0.0.1:10911", 0, "10.0.0.1:10912", topics(T=4, OnlyA=1), version(1), now_ms=0)
    ri.register_broker("C", "broker-b", "10.0.0.2:10911", 0, "10.0.0.2:10912", topics(T=8), version(1), now_ms=0)
    route = ri.pick_topic_route_json("T")
    assert [q["brokerName"] for q in route["queueDatas"]] == ["broker-a", "broker-b"]
    assert [q["writeQueueNums"] for q in route["queueDatas"]] == [4, 8]
    assert {b["brokerName"]: b["brokerAddrs"] for b in route["brokerDatas"]} == {
        "broker-a": {"0": "10.0.0.1:10911"},
        "broker-b": {"0": "10.0.0.2:10911"},
    }
    assert all(b["cluster"] == "C" for b in route["brokerDatas"])
    assert [b["brokerName"] for b in ri.pick_topic_route_json("OnlyA")["brokerDatas"]] == ["broker-a"]
    assert ri.pick_topic_route_json("Nope") is None
    assert ri.get_all_topic_list() == ["OnlyA", "T"]
    info = ri.get_cluster_info()
    assert info["clusterAddrTable"] == {"C": ["broker-a", "broker-b"]}
    assert info["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": "10.0.0.2:10911"}
    parsed = ri.pick_topic_route("T")
    assert isinstance(parsed, TopicRouteData) and len(parsed.queue_datas) == 2


def test_expiry_removes_broker_and_its_queues():
    ri = RouteInfoManager()
    ri.register_broker("C", "broker-a", "a:1", 0, None, topics(T=4), version(1), now_ms=0)
    ri.register_broker("C", "broker-b", "b:1", 0, None, topics(T=4), version(1), now_ms=100_000)
    assert ri.scan_not_active_broker(now_ms=110_000) == []
    assert ri.scan_not_active_broker(now_ms=130_000) == ["a:1"]
    route = ri.pick_topic_route_json("T")
    assert [q["brokerName"] for q in route["queueDatas"]] == ["broker-b"]
    assert ri.get_cluster_info()["clusterAddrTable"] == {"C": ["broker-b"]}
    # a re-registration refreshes the timer
    ri.register_broker("C", "broker-b", "b:1", 0, None, topics(T=4), version(1), now_ms=200_000)
    assert ri.scan_not_active_broker(now_ms=250_000) == []
    assert ri.scan_not_active_broker(now_ms=400_000) == ["b:1"]
    assert ri.pick_topic_route_json("T") is None and ri.get_cluster_info()["clusterAddrTable"] == {}


def test_topic_table_replaced_only_when_version_changes():
    ri = RouteInfoManager()
    ri.register_broker("C", "a", "a:1", 0, None, topics(T1=4, T2=4), version(1), now_ms=0)
    # same version: topic table not re-read (just a heartbeat)
    ri.register_broker("C", "a", "a:1", 0, None, topics(T1=4), version(1), now_ms=1)
    assert ri.pick_topic_route_json("T2") is not None
    # new version: T2 dropped, T1 resized
    ri.register_broker("C", "a", "a:1", 0, None, topics(T1=2), version(2), now_ms=2)
    assert ri.pick_topic_route_json("T2") is None
    assert ri.pick_topic_route_json("T1")["queueDatas"][0]["readQueueNums"] == 2


def test_slave_registration_and_unregister():
    ri = RouteInfoManager()
    ri.register_broker("C", "a", "m:1", 0, "m:2", topics(T=4), version(1))
    result = ri.register_broker("C", "a", "s:1", 1, "s:2", topics(T=4), version(1))
    assert result.master_addr == "m:1" and result.ha_server_addr == "m:2"
    assert ri.pick_topic_route_json("T")["brokerDatas"][0]["brokerAddrs"] == {"0": "m:1", "1": "s:1"}
    assert ri.unregister_broker("C", "s:1", "a", 1)
    assert ri.pick_topic_route_json("T")["brokerDatas"][0]["brokerAddrs"] == {"0": "m:1"}
    assert ri.unregister_broker("C", "m:1", "a", 0)
    assert ri.pick_topic_route_json("T") is None
    assert not ri.unregister_broker("C", "m:1", "a", 0)


def test_channel_close_forgets_broker():
    ri = RouteInfoManager()
    ch = object()
    ri.register_broker("C", "a", "a:1", 0, None, topics(T=1), version(1), channel=ch)
    assert ri.on_channel_closed(object()) == []
    assert ri.on_channel_closed(ch) == ["a:1"]
    assert ri.pick_topic_route_json("T") is None


# -- NamesrvProcessor -------------------------------------------------------------------------------
def request(code: int, ext: dict | None = None, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, ext, body, opaque=77)


def register_request(broker_name: str, addr: str, table: dict, crc: bool = True, counter: int = 1) -> RemotingCommand:
    body = json.dumps(
        {"topicConfigSerializeWrapper": {"topicConfigTable": table, "dataVersion": version(counter)},
         "filterServerList": []}
    ).encode()
    ext = {"brokerName": broker_name, "brokerAddr": addr, "clusterName": "DefaultCluster",
           "haServerAddr": addr, "brokerId": "0", "compressed": "false",
           "bodyCrc32": str(body_crc32(body) if crc else 0)}
    return request(103, ext, body)


def test_processor_route_lookup_and_registration():
    proc = NamesrvProcessor(RouteInfoManager())
    handlers = proc.handlers()
    assert set(handlers) >= {103, 104, 105, 106, 206}

    missing = handlers[105](None, request(105, {"topic": "TopicTest"}))
    assert missing.code == 17 and missing.opaque == 77 and missing.is_response
    assert missing.remark == "No topic route info in name server for the topic: TopicTest"

    ok = handlers[103](None, register_request("broker-a", "127.0.0.1:10911", topics(TopicTest=4, **{"%RETRY%G": 1})))
    assert ok.code == 0 and ok.is_response
    assert json.loads(ok.body) == {"table": {}}

    route = handlers[105](None, request(105, {"topic": "TopicTest"}))
    assert route.code == 0
    data = json.loads(route.body)  # standard JSON: brokerAddrs keys quoted
    assert data["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
    assert data["queueDatas"][0]["writeQueueNums"] == 4
    assert handlers[105](None, request(105, {"topic": "%RETRY%G"})).code == 0

    cluster = json.loads(handlers[106](None, request(106)).body)
    assert cluster["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    assert "broker-a" in cluster["brokerAddrTable"]

    topic_list = json.loads(handlers[206](None, request(206)).body)
    assert sorted(topic_list["topicList"]) == ["%RETRY%G", "TopicTest"]

    unreg = handlers[104](None, request(104, {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911",
                                              "clusterName": "DefaultCluster", "brokerId": 0}))
    assert unreg.code == 0
    assert handlers[105](None, request(105, {"topic": "TopicTest"})).code == 17


def test_processor_register_crc_mismatch_and_unchecked_crc():
    proc = NamesrvProcessor(RouteInfoManager())
    bad = register_request("a", "a:1", topics(T=1))
    bad.ext_fields["bodyCrc32"] = "12345"
    response = proc.register_broker(None, bad)
    assert response.code == 1 and "crc" in response.remark.lower()
    assert proc.route_info.pick_topic_route_json("T") is None
    assert proc.register_broker(None, register_request("a", "a:1", topics(T=1), crc=False)).code == 0
    assert proc.route_info.pick_topic_route_json("T") is not None


def test_processor_fastjson_register_body_and_missing_header():
    proc = NamesrvProcessor(RouteInfoManager())
    body = (b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"timestamp":5},'
            b'"topicConfigTable":{"T":{"perm":6,"readQueueNums":2,"topicName":"T","writeQueueNums":2}}}}')
    ext = {"brokerName": "a", "brokerAddr": "a:1", "clusterName": "C", "haServerAddr": "a:2", "brokerId": 0,
           "compressed": False, "bodyCrc32": 0}
    assert proc.register_broker(None, request(103, ext, body)).code == 0
    assert proc.route_info.pick_topic_route_json("T")["queueDatas"][0]["readQueueNums"] == 2
    from protocol.headers import HeaderError

    with pytest.raises(HeaderError):
        proc.get_route_info_by_topic(None, request(105, {}))


# -- registrar --------------------------------------------------------------------------------------
def broker_config(tmp_path, **kw) -> BrokerConfig:
    return BrokerConfig(store_path_root_dir=str(tmp_path), broker_name="broker-a", broker_ip1="127.0.0.1",
                        listen_port=10911, namesrv_addr=None, **kw)


async def test_embedded_registration_follows_topic_changes(tmp_path):
    cfg = broker_config(tmp_path)
    tcm = TopicConfigManager(cfg)
    ri = RouteInfoManager()
    registrar = BrokerRegistrar(cfg, tcm, local_route_info=ri, namesrv_addrs=[])
    await registrar.start()
    route = ri.pick_topic_route_json("TBW102")
    assert route["queueDatas"][0]["perm"] == 7
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
    assert ri.pick_topic_route_json("%RETRY%G") is None
    tcm.create_retry_topic("G", 1)
    assert ri.pick_topic_route_json("%RETRY%G") is not None  # immediately, no network round trip
    tcm.delete_topic("%RETRY%G")
    assert ri.pick_topic_route_json("%RETRY%G") is None
    await registrar.close()
    assert ri.pick_topic_route_json("TBW102") is None


def test_register_request_shape(tmp_path):
    cfg = broker_config(tmp_path, broker_permission=4)
    tcm = TopicConfigManager(cfg)
    cmd = BrokerRegistrar(cfg, tcm, namesrv_addrs=[]).build_register_request()
    assert cmd.code == 103
    assert cmd.ext_fields["brokerAddr"] == "127.0.0.1:10911"
    assert cmd.ext_fields["haServerAddr"] == "127.0.0.1:10912"
    assert int(cmd.ext_fields["bodyCrc32"]) == body_crc32(cmd.body)
    body = json.loads(cmd.body)
    table = body["topicConfigSerializeWrapper"]["topicConfigTable"]
    assert table["TBW102"]["perm"] == 4  # read-only broker advertises its permission on every topic
    assert tcm.get("TBW102").perm == 7  # ... without changing its own table
    assert body["topicConfigSerializeWrapper"]["dataVersion"]["counter"] == tcm.data_version.counter


async def test_remote_registration_over_tcp(tmp_path):
    from broker.namesrv.__main__ import NameServer

    server = NameServer("127.0.0.1", 0)
    await server.start()
    try:
        cfg = broker_config(tmp_path)
        tcm = TopicConfigManager(cfg)
        addr = f"127.0.0.1:{server.port}"
        registrar = BrokerRegistrar(cfg, tcm, namesrv_addrs=[addr], request_timeout=2.0)
        assert await asyncio.wait_for(registrar.register_remote(addr), 5)
        assert server.route_info.pick_topic_route_json("TBW102") is not None
        await registrar.start()
        tcm.update_topic(TopicConfig("NewTopic", 2, 2, 6))  # change -> immediate re-registration
        for _ in range(100):
            if server.route_info.pick_topic_route_json("NewTopic"):
                break
            await asyncio.sleep(0.02)
        assert server.route_info.pick_topic_route_json("NewTopic")["queueDatas"][0]["writeQueueNums"] == 2
        await asyncio.wait_for(registrar.close(), 5)
        assert server.route_info.pick_topic_route_json("TBW102") is None  # unregistered on close
    finally:
        await server.close()


async def test_remote_registration_failure_is_not_raised(tmp_path):
    cfg = broker_config(tmp_path)
    registrar = BrokerRegistrar(cfg, TopicConfigManager(cfg), namesrv_addrs=["127.0.0.1:1"], request_timeout=0.5)
    assert not await asyncio.wait_for(registrar.register_remote("127.0.0.1:1"), 5)
    await registrar.close()


async def test_embedded_registration_is_refreshed_periodically(tmp_path):
    cfg = broker_config(tmp_path, register_name_server_period=20)
    ri = RouteInfoManager()
    registrar = BrokerRegistrar(cfg, TopicConfigManager(cfg), local_route_info=ri, namesrv_addrs=[])
    await registrar.start()
    try:
        first = ri.broker_live_table[cfg.broker_addr].last_update_ms
        for _ in range(100):
            await asyncio.sleep(0.01)
            if ri.broker_live_table[cfg.broker_addr].last_update_ms > first:
                break
        assert ri.broker_live_table[cfg.broker_addr].last_update_ms > first
    finally:
        await registrar.close()
    registrar.request_register()  # after close: must not resurrect the registration
    assert ri.pick_topic_route_json("TBW102") is None
