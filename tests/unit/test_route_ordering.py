"""Issue 27: a name server never lets an older topic-table snapshot replace a newer change.

The rule (``is_older_data_version``), RouteInfoManager applying it to full registrations and deltas, and the
embedded name server's actual race replayed step by step: a REGISTER_BROKER snapshot built before a topic was
created, answered after that topic's delta.
"""

from __future__ import annotations

import json

import pytest

from broker.config import BrokerConfig
from broker.managers.persistence import data_version_key, is_older_data_version
from broker.managers.topic_config import TopicConfigManager
from broker.namesrv.processor import NamesrvProcessor, body_crc32
from broker.namesrv.registrar import BrokerRegistrar
from broker.namesrv.route_info import RouteInfoManager
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config_bodies import TopicConfig


def key(counter: int, timestamp: int, state: int = 0) -> tuple[int, int, int]:
    return data_version_key({"counter": counter, "timestamp": timestamp, "stateVersion": state})


@pytest.mark.parametrize("candidate, known, older", [
    (key(4, 1004), key(5, 1005), True),     # a snapshot from before the last change
    (key(4, 1005), key(5, 1005), True),     # two changes within one millisecond (Java's nextVersion)
    (key(5, 1005), key(5, 1005), False),    # the same version: a heartbeat
    (key(6, 1006), key(5, 1005), False),    # newer
    (key(1, 9000), key(5, 1005), False),    # restarted without its topics.json: counter lost, clock later
    (key(6, 900), key(5, 1005), False),     # clock set back, counter still growing (Java brokers)
    (key(9, 9000, 1), key(5, 1005, 2), True),   # 5.x: a lower stateVersion (master epoch) is older
    (key(1, 1, 3), key(5, 1005, 2), False),     # ... and a higher one newer, whatever the rest
])
def test_older_data_version_rule(candidate, known, older):
    assert is_older_data_version(candidate, known) is older


def topics(*names: str) -> dict[str, dict]:
    return {n: {"topicName": n, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0} for n in names}


def version(counter: int) -> dict:
    return {"counter": counter, "timestamp": 1000 + counter, "stateVersion": 0}


def test_an_older_full_registration_keeps_the_newer_topics():
    ri = RouteInfoManager()
    ri.register_broker("C", "a", "a:1", 0, None, topics("T1", "T2"), version(5), now_ms=0)
    ri.register_broker("C", "a", "a:1", 0, None, topics("T1"), version(4), now_ms=10)  # late snapshot
    assert ri.pick_topic_route_json("T2") is not None
    assert ri.broker_live_table["a:1"].data_version == data_version_key(version(5))
    assert ri.broker_live_table["a:1"].last_update_ms == 10  # still a sign of life
    # Control: the broker's newer table replaces the routes (T2 deleted on the broker).
    ri.register_broker("C", "a", "a:1", 0, None, topics("T1"), version(6), now_ms=20)
    assert ri.pick_topic_route_json("T2") is None and ri.pick_topic_route_json("T1") is not None


def test_an_older_delta_is_ignored_and_a_newer_one_applied():
    ri = RouteInfoManager()
    ri.register_broker("C", "a", "a:1", 0, None, topics("T1"), version(5))
    assert ri.apply_topic_changes("a:1", {"T1": None}, version(4))  # superseded: handled, nothing changes
    assert ri.pick_topic_route_json("T1") is not None
    assert ri.apply_topic_changes("a:1", {"T1": None, "T3": topics("T3")["T3"]}, version(6))
    assert ri.pick_topic_route_json("T1") is None and ri.pick_topic_route_json("T3") is not None


def test_a_new_broker_at_the_address_is_not_held_to_the_old_version():
    ri = RouteInfoManager()
    ri.register_broker("C", "a", "a:1", 0, None, topics("T1"), version(5))
    ri.register_broker("C", "b", "a:1", 0, None, topics("T9"), version(1))  # another broker name now
    assert ri.pick_topic_route_json("T9") is not None


def register_command(table: dict, data_version: dict) -> RemotingCommand:
    body = json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table, "dataVersion": data_version},
                       "filterServerList": []}).encode()
    ext = {"brokerName": "a", "brokerAddr": "a:1", "clusterName": "C", "haServerAddr": "a:2", "brokerId": "0",
           "compressed": "false", "bodyCrc32": str(body_crc32(body))}
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=1)


def test_processor_answers_a_late_register_broker_without_applying_it():
    processor = NamesrvProcessor(RouteInfoManager())
    assert processor.register_broker(None, register_command(topics("T1", "T2"), version(5))).code == ResponseCode.SUCCESS
    assert processor.register_broker(None, register_command(topics("T1"), version(4))).code == ResponseCode.SUCCESS
    assert processor.route_info.pick_topic_route_json("T2") is not None


def broker_config(tmp_path) -> BrokerConfig:
    return BrokerConfig(store_path_root_dir=str(tmp_path), broker_name="broker-a", broker_ip1="127.0.0.1",
                        listen_port=10911, namesrv_addr=None)


def test_embedded_routes_keep_a_topic_created_while_a_snapshot_was_on_the_wire(tmp_path):
    """The race of the finding, in order: the registrar builds a full registration for ``namesrvAddr`` (here the
    embedded name server itself); topic Late is created and its delta applied; the registration is answered;
    topic Later is created (its delta carries the newest version); the periodic refresh finds that version."""
    cfg = broker_config(tmp_path)
    tcm = TopicConfigManager(cfg)
    routes = RouteInfoManager()
    registrar = BrokerRegistrar(cfg, tcm, local_route_info=routes, namesrv_addrs=[])
    registrar.register_local()
    processor = NamesrvProcessor(routes)

    on_the_wire = registrar.build_register_request()
    tcm.update_topic(TopicConfig("Late", 4, 4))
    assert processor.register_broker(None, on_the_wire).code == ResponseCode.SUCCESS
    tcm.update_topic(TopicConfig("Later", 4, 4))
    registrar.refresh_local()
    assert processor.register_broker(None, registrar.build_register_request()).code == ResponseCode.SUCCESS

    for topic in ("Late", "Later", "TBW102"):
        assert routes.pick_topic_route_json(topic) is not None, topic
    assert routes.broker_live_table[cfg.broker_addr].data_version == data_version_key(tcm.data_version)
