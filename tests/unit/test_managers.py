"""Topic / subscription-group / consumer-offset persistence and the client registries."""

from __future__ import annotations

import asyncio
import json
import os
from types import SimpleNamespace

import pytest

from broker.config import BrokerConfig
from broker.managers.consumer_manager import ClientInfo, ConsumerManager
from broker.managers.consumer_offset import ConsumerOffsetManager
from broker.managers.producer_manager import ProducerManager
from broker.managers.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager
from broker.managers.topic_config import (
    TopicConfig,
    TopicConfigManager,
    validate_topic,
)


def make_config(tmp_path, **kw) -> BrokerConfig:
    kw.setdefault("broker_name", "broker-a")
    kw.setdefault("broker_ip1", "127.0.0.1")
    return BrokerConfig(store_path_root_dir=str(tmp_path), **kw)


# -- topics ------------------------------------------------------------------------------------------
def test_fresh_broker_has_system_topics(tmp_path):
    mgr = TopicConfigManager(make_config(tmp_path, default_topic_queue_nums=4))
    assert not mgr.load()
    tbw = mgr.get("TBW102")
    assert tbw.perm == 7 and tbw.read_queue_nums == 4 and tbw.write_queue_nums == 4
    assert mgr.get("SCHEDULE_TOPIC_XXXX").read_queue_nums == 18
    for name in ("SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "DefaultCluster", "broker-a"):
        assert name in mgr


def test_no_tbw102_without_auto_create(tmp_path):
    mgr = TopicConfigManager(make_config(tmp_path, auto_create_topic_enable=False))
    assert "TBW102" not in mgr
    assert mgr.create_topic_in_send_callback("NewTopic", "TBW102", None, 4) is None


def test_auto_create_in_send(tmp_path):
    mgr = TopicConfigManager(make_config(tmp_path, default_topic_queue_nums=8))
    changes = []
    mgr.add_change_listener(lambda: changes.append(1))
    version = mgr.data_version.counter
    tc = mgr.create_topic_in_send_callback("TopicTest", "TBW102", "127.0.0.1:5555", 4)
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (4, 4, 6)
    assert mgr.data_version.counter == version + 1 and changes == [1]
    # limited by the default topic's queues
    tc2 = mgr.create_topic_in_send_callback("Topic16", "TBW102", None, 16)
    assert tc2.write_queue_nums == 8
    # existing topic: returned unchanged, no version bump
    assert mgr.create_topic_in_send_callback("TopicTest", "TBW102", None, 1) is tc
    assert mgr.data_version.counter == version + 2
    # default topic without INHERIT, or unknown default topic
    assert mgr.create_topic_in_send_callback("X1", "SELF_TEST_TOPIC", None, 4) is None
    assert mgr.create_topic_in_send_callback("X2", "NoSuchDefault", None, 4) is None
    # illegal name
    assert mgr.create_topic_in_send_callback("bad topic", "TBW102", None, 4) is None
    # unknown retry topic: 1 queue, perm 6
    retry = mgr.create_topic_in_send_callback("%RETRY%g1", "TBW102", None, 4)
    assert (retry.read_queue_nums, retry.perm) == (1, 6)


def test_retry_and_dlq_topics(tmp_path):
    mgr = TopicConfigManager(make_config(tmp_path))
    retry = mgr.create_retry_topic("GroupA", 1)
    assert retry.topic_name == "%RETRY%GroupA" and retry.perm == 6 and retry.write_queue_nums == 1
    dlq = mgr.create_dlq_topic("GroupA")
    assert dlq.topic_name == "%DLQ%GroupA" and dlq.read_queue_nums == 1
    assert mgr.create_retry_topic("GroupA", 3) is retry


def test_topic_validation():
    assert validate_topic("TopicTest_1-%|") is None
    assert validate_topic("") is not None
    assert validate_topic("a b") is not None
    assert validate_topic("x" * 127) is None
    assert validate_topic("x" * 128) is not None
    assert validate_topic("%RETRY%" + "g" * 200) is None
    assert validate_topic("%DLQ%" + "g" * 251) is not None


def test_update_delete_bump_version(tmp_path):
    mgr = TopicConfigManager(make_config(tmp_path))
    v0 = mgr.data_version.counter
    mgr.update_topic(TopicConfig("T", 2, 3, 6))
    assert mgr.data_version.counter == v0 + 1
    mgr.update_topic(TopicConfig("T", 2, 3, 6))  # identical: no change
    assert mgr.data_version.counter == v0 + 1
    assert mgr.delete_topic("T") and not mgr.delete_topic("T")
    assert mgr.data_version.counter == v0 + 2
    with pytest.raises(ValueError):
        mgr.update_topic(TopicConfig("bad/name"))


def test_topics_round_trip(tmp_path):
    cfg = make_config(tmp_path)
    mgr = TopicConfigManager(cfg)
    mgr.update_topic(TopicConfig("T1", 3, 5, 6, order=True))
    mgr.persist()
    data = json.loads(open(os.path.join(cfg.config_dir, "topics.json")).read())
    assert set(data) == {"dataVersion", "topicConfigTable"}
    assert data["topicConfigTable"]["T1"] == {
        "order": True, "perm": 6, "readQueueNums": 3, "topicFilterType": "SINGLE_TAG",
        "topicName": "T1", "topicSysFlag": 0, "writeQueueNums": 5,
    }
    again = TopicConfigManager(cfg)
    assert again.load()
    assert again.get("T1") == mgr.get("T1")
    assert again.data_version.counter > mgr.data_version.counter  # a restart looks like a change


def test_topics_fastjson_file_and_bak_fallback(tmp_path):
    cfg = make_config(tmp_path)
    os.makedirs(cfg.config_dir)
    fastjson = (
        '{\n\t"dataVersion":{\n\t\t"counter":7,\n\t\t"timestamp":1700000000000\n\t},\n'
        '\t"topicConfigTable":{\n\t\t"Old":{\n\t\t\t"order":false,\n\t\t\t"perm":6,\n\t\t\t"readQueueNums":4,\n'
        '\t\t\t"topicFilterType":"SINGLE_TAG",\n\t\t\t"topicName":"Old",\n\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":4\n\t\t}\n\t}\n}'
    )
    path = os.path.join(cfg.config_dir, "topics.json")
    with open(path + ".bak", "w") as f:
        f.write(fastjson)
    with open(path, "w") as f:
        f.write('{"dataVersion": {"coun')  # torn write
    mgr = TopicConfigManager(cfg)
    assert mgr.load()
    assert mgr.get("Old").write_queue_nums == 4
    assert "TBW102" in mgr  # system topics kept


def test_persist_keeps_bak(tmp_path):
    cfg = make_config(tmp_path)
    mgr = TopicConfigManager(cfg)
    mgr.update_topic(TopicConfig("A"))
    mgr.persist()
    mgr.update_topic(TopicConfig("B"))
    mgr.persist()
    path = os.path.join(cfg.config_dir, "topics.json")
    assert "A" in json.load(open(path + ".bak"))["topicConfigTable"]
    assert "B" not in json.load(open(path + ".bak"))["topicConfigTable"]
    assert "B" in json.load(open(path))["topicConfigTable"]


async def test_debounced_persist(tmp_path):
    cfg = make_config(tmp_path)
    mgr = TopicConfigManager(cfg)
    for i in range(20):
        mgr.create_topic_in_send_callback(f"T{i}", "TBW102", None, 4)
    assert mgr.dirty
    path = os.path.join(cfg.config_dir, "topics.json")
    for _ in range(100):
        if os.path.exists(path):
            break
        await asyncio.sleep(0.02)
    assert not mgr.dirty
    assert "T19" in json.load(open(path))["topicConfigTable"]


# -- subscription groups -----------------------------------------------------------------------------
def test_subscription_groups(tmp_path):
    cfg = make_config(tmp_path)
    mgr = SubscriptionGroupManager(cfg.config_dir, auto_create=True)
    assert mgr.find("TOOLS_CONSUMER") is not None
    group = mgr.find_or_create("G1")
    assert group.retry_queue_nums == 1 and group.retry_max_times == 16
    assert group.consume_enable and group.notify_consumer_ids_changed_enable
    mgr.update(SubscriptionGroupConfig("G2", retry_max_times=3))
    mgr.persist()
    raw = json.load(open(os.path.join(cfg.config_dir, "subscriptionGroup.json")))
    assert raw["subscriptionGroupTable"]["G2"]["retryMaxTimes"] == 3
    assert raw["subscriptionGroupTable"]["G2"]["groupName"] == "G2"
    again = SubscriptionGroupManager(cfg.config_dir, auto_create=False)
    assert again.load()
    assert again.find("G2").retry_max_times == 3
    assert again.find_or_create("Unknown") is None
    assert again.delete("G2") and again.find("G2") is None


def test_subscription_group_liberal_load(tmp_path):
    os.makedirs(tmp_path / "config")
    (tmp_path / "config" / "subscriptionGroup.json").write_text(
        '{"subscriptionGroupTable":{"G":{"groupName":"G","retryMaxTimes":"5","consumeEnable":"false",'
        '"groupRetryPolicy":{"type":"CUSTOMIZED"}}}}'
    )
    mgr = SubscriptionGroupManager(str(tmp_path / "config"))
    assert mgr.load()
    group = mgr.find("G")
    assert group.retry_max_times == 5 and group.consume_enable is False


# -- consumer offsets --------------------------------------------------------------------------------
def test_offsets_commit_query(tmp_path):
    mgr = ConsumerOffsetManager(str(tmp_path))
    assert mgr.query_offset("g", "t", 0) == -1
    mgr.commit_offset("g", "t", 0, 10)
    mgr.commit_offset("g", "t", 1, 5)
    mgr.commit_offset("g", "t", 1, -1)  # idle queue report ignored
    assert mgr.query_offset("g", "t", 0) == 10 and mgr.query_offset("g", "t", 1) == 5
    assert mgr.query_offsets("g", "t") == {0: 10, 1: 5}
    assert mgr.topics_of_group("g") == {"t"} and mgr.groups_of_topic("t") == {"g"}
    assert mgr.dirty


def test_offsets_round_trip_and_fastjson(tmp_path):
    mgr = ConsumerOffsetManager(str(tmp_path))
    mgr.commit_offset("g", "t", 3, 42)
    mgr.commit_offset("g", "%RETRY%g", 0, 1)
    assert mgr.persist_if_dirty()
    assert not mgr.persist_if_dirty()
    raw = json.load(open(tmp_path / "consumerOffset.json"))
    assert raw == {"offsetTable": {"t@g": {"3": 42}, "%RETRY%g@g": {"0": 1}}}
    again = ConsumerOffsetManager(str(tmp_path))
    assert again.load()
    assert again.query_offset("g", "%RETRY%g", 0) == 1

    (tmp_path / "consumerOffset.json").write_text(
        '{\n\t"offsetTable":{\n\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:249,2:251,3:250\n\t\t}\n\t}\n}'
    )
    java = ConsumerOffsetManager(str(tmp_path))
    assert java.load()
    assert java.query_offsets("please_rename_unique_group_name_4", "TopicTest") == {0: 250, 1: 249, 2: 251, 3: 250}


def test_offsets_bak_fallback(tmp_path):
    (tmp_path / "consumerOffset.json").write_text("")
    (tmp_path / "consumerOffset.json.bak").write_text('{"offsetTable":{"t@g":{0:7}}}')
    mgr = ConsumerOffsetManager(str(tmp_path))
    assert mgr.load()
    assert mgr.query_offset("g", "t", 0) == 7


async def test_offsets_persist_async(tmp_path):
    mgr = ConsumerOffsetManager(str(tmp_path))
    mgr.commit_offset("g", "t", 0, 1)
    assert await mgr.persist_async()
    assert not await mgr.persist_async()
    assert json.load(open(tmp_path / "consumerOffset.json"))["offsetTable"]["t@g"] == {"0": 1}


def test_offsets_remove(tmp_path):
    mgr = ConsumerOffsetManager(str(tmp_path))
    mgr.commit_offset("g1", "t1", 0, 1)
    mgr.commit_offset("g2", "t1", 0, 1)
    mgr.commit_offset("g1", "t2", 0, 1)
    mgr.remove_group("g1")
    assert mgr.groups_of_topic("t1") == {"g2"} and not mgr.topics_of_group("g1")
    mgr.remove_topic("t1")
    assert mgr.offset_table == {}


# -- consumer / producer registries ------------------------------------------------------------------
def sub(topic, expr="*", version=1):
    return SimpleNamespace(topic=topic, sub_string=expr, expression_type="TAG", sub_version=version)


def channel(name):
    return SimpleNamespace(remote_addr=name)


def test_consumer_register_notifies_on_change():
    calls = []
    mgr = ConsumerManager(lambda group, chans: calls.append((group, sorted(c.remote_addr for c in chans))))
    a, b = channel("a:1"), channel("b:1")
    args = ("CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET")
    assert mgr.register("G", ClientInfo(a, "ca"), *args, [sub("T"), sub("%RETRY%G")])
    assert calls == [("G", ["a:1"])]
    # same heartbeat again: nothing changed
    assert not mgr.register("G", ClientInfo(a, "ca"), *args, [sub("T"), sub("%RETRY%G")])
    assert len(calls) == 1
    # new member: all channels notified
    assert mgr.register("G", ClientInfo(b, "cb"), *args, [sub("T"), sub("%RETRY%G")])
    assert calls[-1] == ("G", ["a:1", "b:1"])
    # expression changed with newer subVersion
    assert mgr.register("G", ClientInfo(b, "cb"), *args, [sub("T", "TagA", 2), sub("%RETRY%G")])
    assert mgr.find_subscription("G", "T").sub_string == "TagA"
    # older subVersion ignored
    assert not mgr.register("G", ClientInfo(a, "ca"), *args, [sub("T", "*", 1), sub("%RETRY%G")])
    assert mgr.find_subscription("G", "T").sub_string == "TagA"
    assert sorted(mgr.client_ids("G")) == ["ca", "cb"]
    calls.clear()
    assert mgr.unregister("G", "ca")
    assert calls == [("G", ["b:1"])]
    assert mgr.on_channel_closed(b) == ["G"]
    assert mgr.get_group("G") is None


def test_broadcasting_register_does_not_notify():
    calls = []
    mgr = ConsumerManager(lambda g, c: calls.append(g))
    assert mgr.register("B", ClientInfo(channel("a:1"), "ca"), "CONSUME_PASSIVELY", "BROADCASTING",
                        "CONSUME_FROM_LAST_OFFSET", [sub("T")])
    assert calls == []


def test_consumer_expiry_and_reconnect():
    calls = []
    mgr = ConsumerManager(lambda g, c: calls.append(g))
    args = ("CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [sub("T")])
    old, new = channel("a:1"), channel("a:2")
    mgr.register("G", ClientInfo(old, "ca", last_update=1_000), *args)
    mgr.register("G", ClientInfo(channel("b:1"), "cb", last_update=100_000), *args)
    # reconnect under the same client id: not a membership change, old channel closing is harmless
    assert not mgr.register("G", ClientInfo(new, "ca", last_update=1_000), *args)
    assert mgr.on_channel_closed(old) == []
    expired = mgr.scan_not_active(120_000, now_ms=130_000)
    assert [c.client_id for c in expired] == ["ca"]
    assert mgr.client_ids("G") == ["cb"]
    assert calls[-1] == "G"


def test_producer_manager():
    mgr = ProducerManager()
    a = channel("a:1")
    assert mgr.register("PG", ClientInfo(a, "c1", last_update=1))
    assert not mgr.register("PG", ClientInfo(a, "c1", last_update=2))
    mgr.register("CLIENT_INNER_PRODUCER", ClientInfo(a, "c1"))
    assert mgr.group_names() == ["PG"]
    assert mgr.find_channel("PG") is a
    assert sorted(mgr.on_channel_closed(a)) == ["CLIENT_INNER_PRODUCER", "PG"]
    assert mgr.find_channel("PG") is None
    mgr.register("PG", ClientInfo(a, "c1", last_update=0))
    assert len(mgr.scan_not_active(120_000, now_ms=200_000)) == 1
    assert not mgr.unregister("PG", "c1")
