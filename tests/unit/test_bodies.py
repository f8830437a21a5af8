"""JSON bodies and the lenient JSON reader."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.bodies import (
    BrokerData,
    CheckClientRequestBody,
    ClusterInfo,
    ConsumerData,
    ConsumerListBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    ProducerData,
    QueueData,
    SubscriptionData,
    TopicList,
    TopicRouteData,
    UnlockBatchRequestBody,
)
from protocol.config_bodies import (
    DataVersion,
    RegisterBrokerBody,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from protocol.jsonlenient import dumps_compact, loads_lenient

# ---------------------------------------------------------------------------------------------
# jsonlenient


def test_standard_json_fast_path():
    assert loads_lenient(b'{"a":[1,2,{"b":null}]}') == {"a": [1, 2, {"b": None}]}
    assert loads_lenient('"x"') == "x"


def test_fastjson_bare_integer_keys():
    text = '{"offsetTable":{"T@g":{0:12,1:7, -1 :3},"x":{ 10 : "a" }}}'
    assert loads_lenient(text) == {"offsetTable": {"T@g": {"0": 12, "1": 7, "-1": 3}, "x": {"10": "a"}}}


def test_bare_key_lookalikes_inside_strings_are_untouched():
    text = '{0:"{1:2}", "k":"a,3:b", "e":"\\"{4:5}"}'
    assert loads_lenient(text) == {"0": "{1:2}", "k": "a,3:b", "e": '"{4:5}'}


def test_fastjson_pretty_printed_config_with_tabs():
    text = '{\n\t"offsetTable":{\n\t\t"TopicTest@cg1":{0:5,\n\t\t\t1:0\n\t\t}\n\t}\n}'
    assert loads_lenient(text) == {"offsetTable": {"TopicTest@cg1": {"0": 5, "1": 0}}}


@pytest.mark.parametrize("garbage", ["{", "{0:}", "not json", '{"a":1,}x', b"\xff\xfe", ""])
def test_real_garbage_raises_value_error_with_position(garbage):
    with pytest.raises(ValueError) as info:
        loads_lenient(garbage)
    assert "char" in str(info.value) or "byte" in str(info.value)


def test_dumps_compact():
    assert dumps_compact({"a": "ü\x01", "b": [1, True, None]}) == '{"a":"ü\\u0001","b":[1,true,null]}'.encode()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_lenient_never_raises_anything_but_value_error(text):
    try:
        loads_lenient(text)
    except ValueError:
        pass


# ---------------------------------------------------------------------------------------------
# heartbeat

JAVA_HEARTBEAT = {
    "clientID": "192.168.0.10@12345",
    "consumerDataSet": [
        {
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "consumeType": "CONSUME_PASSIVELY",
            "groupName": "cg1",
            "messageModel": "CLUSTERING",
            "subscriptionDataSet": [
                {
                    "classFilterMode": False,
                    "codeSet": [],
                    "expressionType": "TAG",
                    "subString": "*",
                    "subVersion": 1700000000000,
                    "tagsSet": [],
                    "topic": "TopicTest",
                }
            ],
            "unitMode": False,
        }
    ],
    "heartbeatFingerprint": 0,
    "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
    "withoutSub": False,
}


def test_heartbeat_roundtrip_matches_java_shape():
    hb = HeartbeatData.from_json(JAVA_HEARTBEAT)
    assert hb.to_json() == JAVA_HEARTBEAT
    assert HeartbeatData.decode(hb.encode()) == hb
    assert HeartbeatData.from_json(json.dumps(JAVA_HEARTBEAT).encode()) == hb


def test_heartbeat_enums_as_ints_and_string_subversion():
    body = {
        "clientID": "c1",
        "consumerDataSet": [
            {
                "groupName": "g",
                "consumeType": 1,
                "messageModel": 1,
                "consumeFromWhere": 0,
                "subscriptionDataSet": [
                    {"topic": "T", "subString": "TagA || TagB", "tagsSet": ["TagA", "TagB"], "codeSet": [0, 0], "subVersion": "1700000000000"}
                ],
            },
            {"groupName": "g2", "consumeType": "0", "messageModel": 0, "consumeFromWhere": 4},
        ],
    }
    hb = HeartbeatData.from_json(body)
    first, second = hb.consumers
    assert (first.consume_type, first.message_model, first.consume_from_where) == (
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_LAST_OFFSET",
    )
    sub = first.subscriptions[0]
    assert sub.sub_version == 1700000000000 and sub.expression_type == "TAG"
    assert sub.tags_set == ["TagA", "TagB"] and sub.code_set == [0, 0]
    assert sub.class_filter_mode is False
    assert (second.consume_type, second.message_model, second.consume_from_where) == (
        "CONSUME_ACTIVELY",
        "BROADCASTING",
        "CONSUME_FROM_FIRST_OFFSET",
    )
    assert second.subscriptions == []
    assert hb.producers == []
    # written back with names
    assert hb.to_json()["consumerDataSet"][1]["messageModel"] == "BROADCASTING"


@pytest.mark.parametrize("missing", [None, "absent"])
def test_heartbeat_null_or_absent_sets(missing):
    body: dict = {"clientID": "c"}
    if missing is None:
        body.update(consumerDataSet=None, producerDataSet=None)
    hb = HeartbeatData.from_json(body)
    assert hb.consumers == [] and hb.producers == []
    consumer = ConsumerData.from_json({"groupName": "g", "subscriptionDataSet": None})
    assert consumer.subscriptions == []


def test_heartbeat_extra_keys_and_missing_expression_type():
    hb = HeartbeatData.from_json(
        {
            "clientID": "c",
            "somethingNew": {"x": 1},
            "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "T", "subString": "*", "new": 1}]}],
        }
    )
    assert hb.consumers[0].subscriptions[0].expression_type == "TAG"
    sql = SubscriptionData.from_json({"topic": "T", "subString": "a > 1", "expressionType": "sql92"})
    assert sql.expression_type == "SQL92"


def test_odd_numbers_fall_back_to_defaults():
    consumer = ConsumerData.from_json(
        {"groupName": "g", "consumeType": float("inf"), "messageModel": 0.5, "consumeFromWhere": float("nan")}
    )
    assert (consumer.consume_type, consumer.message_model, consumer.consume_from_where) == (
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_LAST_OFFSET",
    )
    assert SubscriptionData.from_json({"subVersion": float("inf"), "codeSet": [float("nan"), 1, "x", 2.0]}).code_set == [1, 2]
    assert QueueData.from_json({"readQueueNums": float("-inf"), "perm": "abc"}).perm == 6


def test_heartbeat_empty_body_and_garbage():
    assert HeartbeatData.decode(b"{}") == HeartbeatData()
    with pytest.raises(ValueError):
        HeartbeatData.decode(b"[1]")
    with pytest.raises(ValueError):
        HeartbeatData.decode(b"{bad")


def test_producer_data():
    assert ProducerData.from_json({"groupName": "pg"}).to_json() == {"groupName": "pg"}


# ---------------------------------------------------------------------------------------------
# routes


def _route() -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[QueueData("broker-a", 4, 4, 6, 0)],
        broker_datas=[BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"})],
    )


def test_route_brokeraddrs_keys_are_quoted_strings():
    raw = _route().encode()
    assert b'"brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.1:10921"}' in raw
    parsed = json.loads(raw)  # standard JSON
    assert parsed["queueDatas"] == [
        {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}
    ]
    assert "orderTopicConf" not in parsed
    assert TopicRouteData.decode(raw) == _route()


def test_route_from_fastjson_bare_keys():
    raw = b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"b","cluster":"c"}],"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":"8","writeQueueNums":8,"topicSysFlag":0}]}'
    route = TopicRouteData.decode(raw)
    assert route.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911"}
    assert route.broker_datas[0].master_addr() == "10.0.0.1:10911"
    assert route.queue_datas[0].read_queue_nums == 8


def test_cluster_info_and_topic_list():
    info = ClusterInfo({"broker-a": BrokerData("c", "broker-a", {0: "h:1"})}, {"c": ["broker-a"]})
    assert ClusterInfo.decode(info.encode()) == info
    assert json.loads(info.encode())["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": "h:1"}
    tl = TopicList(["a", "b"])
    assert TopicList.decode(tl.encode()) == tl and "brokerAddr" not in tl.to_json()


# ---------------------------------------------------------------------------------------------
# consumer list, locks, client check


def test_consumer_list_body():
    body = ConsumerListBody(["c1", "c2"])
    assert body.encode() == b'{"consumerIdList":["c1","c2"]}'
    assert ConsumerListBody.decode(b'{"consumerIdList":null}').consumer_id_list == []


def test_message_queue_is_hashable_and_sorted_like_java():
    a, b, c = MessageQueue("T", "b", 0), MessageQueue("T", "a", 1), MessageQueue("S", "z", 9)
    assert sorted([a, b, c]) == [c, b, a]
    assert {a, MessageQueue("T", "b", 0)} == {a}
    assert MessageQueue.from_json({"topic": "T", "brokerName": "b", "queueId": "0"}) == a


def test_lock_batch_bodies():
    raw = b'{"consumerGroup":"g","clientId":"c","onlyThisBroker":false,"mqSet":[{"topic":"T","brokerName":"b","queueId":0},{"topic":"T","brokerName":"b","queueId":1}]}'
    req = LockBatchRequestBody.decode(raw)
    assert req.consumer_group == "g" and req.client_id == "c" and req.only_this_broker is False
    assert req.mq_set == [MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)]
    assert LockBatchRequestBody.decode(req.encode()) == req
    unlock = UnlockBatchRequestBody.decode(raw)
    assert unlock.mq_set == req.mq_set
    resp = LockBatchResponseBody(req.mq_set[:1])
    assert json.loads(resp.encode()) == {"lockOKMQSet": [{"brokerName": "b", "queueId": 0, "topic": "T"}]}
    assert LockBatchResponseBody.decode(resp.encode()) == resp


def test_check_client_request_body():
    raw = b'{"clientId":"c","group":"g","namespace":null,"subscriptionData":{"topic":"T","subString":"a > 1","expressionType":"SQL92","subVersion":1}}'
    body = CheckClientRequestBody.decode(raw)
    assert body.subscription_data.expression_type == "SQL92" and body.namespace is None
    assert CheckClientRequestBody.decode(body.encode()) == body
    assert CheckClientRequestBody.decode(b'{"clientId":"c"}').subscription_data is None


# ---------------------------------------------------------------------------------------------
# topic configs, registration, subscription groups


def test_topic_config_defaults_and_roundtrip():
    tc = TopicConfig.from_json({"topicName": "T"})
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_filter_type, tc.order) == (16, 16, 6, "SINGLE_TAG", False)
    assert TopicConfig.decode(tc.encode()) == tc
    tc2 = TopicConfig.from_json({"topicName": "T", "topicFilterType": 1, "attributes": {"+message.type": "NORMAL"}})
    assert tc2.topic_filter_type == "MULTI_TAG" and tc2.attributes == {"+message.type": "NORMAL"}
    assert TopicConfig.decode(tc2.encode()) == tc2


def test_topics_json_wrapper_from_fastjson_file():
    text = '{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000000\n\t},\n\t"topicConfigTable":{\n\t\t"TBW102":{\n\t\t\t"order":false,\n\t\t\t"perm":7,\n\t\t\t"readQueueNums":8,\n\t\t\t"topicFilterType":"SINGLE_TAG",\n\t\t\t"topicName":"TBW102",\n\t\t\t"topicSysFlag":0,\n\t\t\t"writeQueueNums":8\n\t\t}\n\t}\n}'
    wrapper = TopicConfigSerializeWrapper.decode(text)
    assert wrapper.data_version == DataVersion(3, 0, 1700000000000)
    assert wrapper.topic_config_table["TBW102"].perm == 7
    assert TopicConfigSerializeWrapper.decode(wrapper.encode()) == wrapper


def test_register_broker_body():
    body = RegisterBrokerBody(
        TopicConfigSerializeWrapper({"T": TopicConfig("T", 4, 4)}, DataVersion(1, 0, 5)), ["f:1"]
    )
    parsed = json.loads(body.encode())
    assert parsed["topicConfigSerializeWrapper"]["dataVersion"] == {"counter": 1, "stateVersion": 0, "timestamp": 5}
    assert parsed["topicConfigSerializeWrapper"]["topicConfigTable"]["T"]["readQueueNums"] == 4
    assert parsed["filterServerList"] == ["f:1"]
    assert RegisterBrokerBody.decode(body.encode()) == body
    assert RegisterBrokerBody.decode(b"{}").topic_config_wrapper.topic_config_table == {}


def test_data_version_next():
    dv = DataVersion(counter=1, timestamp=0)
    dv.next_version()
    assert dv.counter == 2 and dv.timestamp > 0


def test_subscription_group_config():
    cfg = SubscriptionGroupConfig.from_json({"groupName": "g", "retryMaxTimes": "3", "consumeEnable": "false"})
    assert cfg.retry_max_times == 3 and cfg.consume_enable is False and cfg.retry_queue_nums == 1
    assert SubscriptionGroupConfig.decode(cfg.encode()) == cfg


# ---------------------------------------------------------------------------------------------
# fuzz: liberal parsing never raises anything but ValueError on arbitrary JSON

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
_keys = st.sampled_from(
    ["clientID", "consumerDataSet", "producerDataSet", "groupName", "consumeType", "messageModel", "consumeFromWhere",
     "subscriptionDataSet", "topic", "subString", "tagsSet", "codeSet", "subVersion", "expressionType", "unitMode"]
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, _json, max_size=8), st.dictionaries(_keys, _json, max_size=8))
def test_heartbeat_parsing_of_odd_shapes(outer, inner):
    outer = dict(outer)
    outer.setdefault("consumerDataSet", [dict(inner, subscriptionDataSet=[inner])])
    try:
        hb = HeartbeatData.from_json(outer)
    except ValueError:
        return
    HeartbeatData.decode(hb.encode())
