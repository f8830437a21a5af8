"""Client value types, routes, send-header templates and pull decoding: pure unit tests (no sockets)."""

import json
import zlib

import msgpack
import pytest

from client.consumer_ops import decode_messages
from client.errors import MessageValidationError, MQClientError
from client.message import (
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    MessageSelector,
    PullResult,
    PullStatus,
)
from client.producer import Producer
from client.route import TopicPublishInfo, TopicRoute
from client.wire import frame, make_send_header_builder
from protocol.codes import SerializeType
from protocol.command import decode_command
from protocol.hashing import java_string_hash
from protocol.headers import SendMessageRequestHeader
from protocol.ids import pack_host
from protocol.message import decode_batch_body, encode_record
from protocol.properties import decode_properties


# ----------------------------------------------------------------------------------------------- value types
def test_message_normalises_keys_and_body():
    m = Message("T", "héllo", tags="A", keys="k1")
    assert m.body == "héllo".encode() and m.keys == ["k1"]
    assert Message("T", b"x", keys=["a", "b"]).keys == ["a", "b"]
    assert Message("T", b"x").keys == [] and Message("T", b"x").properties == {}


def test_selector_tag_expression():
    s = MessageSelector.tag("TagA || TagB ||  ")
    assert s.expression_type == "TAG"
    assert s.tags_set == {"TagA", "TagB"}
    assert s.code_set == sorted({java_string_hash("TagA"), java_string_hash("TagB")})
    assert s.matches_tag("TagA") and not s.matches_tag("TagC") and not s.matches_tag(None)
    star = MessageSelector.tag("*")
    assert star.matches_all and star.matches_tag(None) and star.code_set == []
    assert MessageSelector.tag("").expression == "*" and MessageSelector.tag(None).matches_all
    assert MessageSelector.of("TagA") == MessageSelector.tag("TagA")


def test_selector_sql():
    s = MessageSelector.sql("a > 2")
    assert s.expression_type == "SQL92" and s.expression == "a > 2"
    assert s.matches_tag("anything")  # the broker's SQL decision is final
    with pytest.raises(ValueError):
        MessageSelector.sql("  ")


def test_pull_result_next_offset_alias_and_consume_result():
    r = PullResult(PullStatus.NO_NEW_MSG, [], 7, 0, 7)
    assert r.next_offset == 7 == r.next_begin_offset
    assert ConsumeResult.SUCCESS.value == "CONSUME_SUCCESS"
    assert {ConsumeResult.SUCCESS, ConsumeResult.RECONSUME_LATER}


# ----------------------------------------------------------------------------------------------- routes
ROUTE_BARE_KEYS = (
    '{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"b","cluster":"C"},'
    '{"brokerAddrs":{"0":"127.0.0.1:20911"},"brokerName":"a","cluster":"C"},'
    '{"brokerAddrs":{"1":"127.0.0.1:30911"},"brokerName":"slaveonly","cluster":"C"}],'
    '"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,"writeQueueNums":2,"topicSysFlag":0},'
    '{"brokerName":"a","perm":"6","readQueueNums":"3","writeQueueNums":"3"},'
    '{"brokerName":"slaveonly","perm":6,"readQueueNums":2,"writeQueueNums":2},'
    '{"brokerName":"ro","perm":4,"readQueueNums":1,"writeQueueNums":1}],"filterServerTable":{}}'
)


def test_route_parse_publish_and_subscribe_lists():
    route = TopicRoute.parse(ROUTE_BARE_KEYS)
    assert route.broker("b").addrs == {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}
    pub = route.publish_queues("T")
    # sorted by broker name; slave-only and read-only brokers are not writable targets
    assert [(q.broker_name, q.queue_id) for q in pub] == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    sub = route.subscribe_queues("T")
    assert len(sub) == 3 + 4 + 2 + 1 and all(q.topic == "T" for q in sub)


def test_route_from_default_topic_uses_min_of_default_nums_and_read_nums():
    route = TopicRoute.parse(
        '{"brokerDatas":[{"brokerAddrs":{"0":"h:1"},"brokerName":"b","cluster":"C"}],'
        '"queueDatas":[{"brokerName":"b","perm":7,"readQueueNums":8,"writeQueueNums":8}]}'
    )
    assert len(route.publish_queues("New", max_queue_nums=4)) == 4
    assert all(q.topic == "New" for q in route.publish_queues("New", max_queue_nums=4))


def test_route_order_topic_conf():
    route = TopicRoute.parse('{"orderTopicConf":"b1:2;b2:1","brokerDatas":[],"queueDatas":[]}')
    assert [(q.broker_name, q.queue_id) for q in route.publish_queues("T")] == [("b1", 0), ("b1", 1), ("b2", 0)]


def test_publish_info_round_robin_and_avoid_broker():
    queues = [MessageQueue("T", "a", 0), MessageQueue("T", "a", 1), MessageQueue("T", "b", 0)]
    info = TopicPublishInfo("T", queues, TopicRoute())
    picked = [info.select() for _ in range(6)]
    assert sorted(picked, key=str) == sorted(queues * 2, key=str)
    for _ in range(5):
        assert info.select(avoid_broker="a").broker_name == "b"
    single = TopicPublishInfo("T", queues[:1], TopicRoute())
    assert single.select(avoid_broker="a") == queues[0]  # nothing else available


# ----------------------------------------------------------------------------------------------- send headers
PROPS = "TAGS\x01TagA\x02UNIQ_KEY\x01C0A8000A303918B4AAC20BEBC2000000\x02"


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.MSGPACK])
@pytest.mark.parametrize("batch", [False, True])
def test_send_header_template_decodes_like_a_normal_command(serialize_type, batch):
    build = make_send_header_builder(
        serialize_type=serialize_type, producer_group="pg", topic="TopicTest", broker_name="broker-a", batch=batch
    )
    header = build(3, 1, 1700000000000, 5, PROPS + "k\x01vé\"\\\x02", 77, 0)
    raw = frame(serialize_type, header, b"Hello")
    assert int.from_bytes(raw[:4], "big") == len(raw) - 4
    cmd = decode_command(raw[4:])
    assert cmd.code == (320 if batch else 310) and cmd.opaque == 77 and cmd.flag == 0
    assert cmd.serialize_type == serialize_type and cmd.body == b"Hello" and cmd.language == "PYTHON"
    h = SendMessageRequestHeader.decode_v2(cmd.ext_fields)
    assert (h.producer_group, h.topic, h.default_topic, h.default_topic_queue_nums) == ("pg", "TopicTest", "TBW102", 4)
    assert (h.queue_id, h.sys_flag, h.born_timestamp, h.flag) == (3, 1, 1700000000000, 5)
    assert h.batch is batch and h.reconsume_times == 0
    assert decode_properties(h.properties)["k"] == 'vé"\\'
    if serialize_type == SerializeType.JSON:
        # stock brokers: every extField is a JSON string
        ext = json.loads(raw[8 : 8 + (int.from_bytes(raw[4:8], "big") & 0xFFFFFF)])["extFields"]
        assert all(isinstance(v, str) for v in ext.values())
    else:
        assert msgpack.unpackb(header)["extFields"]["e"] == 3


def test_oneway_flag_in_template():
    build = make_send_header_builder(
        serialize_type=SerializeType.JSON, producer_group="pg", topic="T", broker_name="b"
    )
    assert decode_command(frame(0, build(0, 0, 1, 0, PROPS, 1, 2), b"x")[4:]).flag == 2


# ----------------------------------------------------------------------------------------------- producer encoding
@pytest.fixture
def producer():
    return Producer("pg", "127.0.0.1:9876", compress_msg_body_over_howmuch=64, max_message_size=1024)


def test_prepare_common_case(producer):
    p = producer._encoder.prepare(Message("T", b"body", tags="TagA"), None)
    props = decode_properties(p.props)
    assert props == {"TAGS": "TagA", "UNIQ_KEY": p.msg_id} and p.sys_flag == 0 and p.body == b"body"
    assert len(p.msg_id) == 32


def test_prepare_keys_user_props_delay(producer):
    m = Message("T", b"b", tags="A", keys=["k1", "k2"], properties={"a": "1"}, delay_level=2)
    p = producer._encoder.prepare(m, 3)
    props = decode_properties(p.props)
    assert props["KEYS"] == "k1 k2" and props["a"] == "1" and props["DELAY"] == "3" and props["TAGS"] == "A"
    assert props["UNIQ_KEY"] == p.msg_id
    assert "DELAY" not in decode_properties(producer._encoder.prepare(Message("T", b"b"), None).props)


def test_prepare_compresses_over_threshold(producer):
    body = b"a" * 500
    p = producer._encoder.prepare(Message("T", body), None)
    assert p.sys_flag == 1 and zlib.decompress(p.body) == body
    assert producer._encoder.prepare(Message("T", b"a" * 64), None).sys_flag == 0


def test_prepare_validation_errors(producer):
    with pytest.raises(MessageValidationError, match="max_message_size"):
        producer._encoder.prepare(Message("T", b"x" * 1025), None)
    with pytest.raises(MessageValidationError, match="empty"):
        producer._encoder.prepare(Message("T", b""), None)
    with pytest.raises(MessageValidationError, match="characters"):
        producer._encoder.prepare(Message("bad topic", b"x"), None)
    with pytest.raises(MessageValidationError):
        producer._encoder.prepare(Message("", b"x"), None)
    with pytest.raises(MessageValidationError, match="separator"):
        producer._encoder.prepare(Message("T", b"x", properties={"a": "x\x01y"}), None)
    with pytest.raises(MessageValidationError, match="separator"):
        producer._encoder.prepare(Message("T", b"x", tags="a\x02"), None)
    with pytest.raises(MessageValidationError):
        producer._encoder.prepare(Message("T", b"x", properties={"a": 1}), None)
    with pytest.raises(MessageValidationError):
        producer._encoder.prepare(Message("TBW102", b"x"), None)


def test_prepare_batch(producer):
    msgs = [Message("T", f"m{i}".encode(), tags="A", keys=f"k{i}") for i in range(3)]
    p = producer._encoder.prepare_batch(msgs)
    assert p.batch and p.topic == "T"
    entries = decode_batch_body(p.body)
    ids = p.msg_id.split(",")
    assert len(ids) == 3 and len(set(ids)) == 3
    for i, e in enumerate(entries):
        props = decode_properties(e.properties)
        assert e.body == f"m{i}".encode() and props["UNIQ_KEY"] == ids[i] and props["KEYS"] == f"k{i}"
    assert "UNIQ_KEY" not in decode_properties(p.props)


def test_prepare_batch_validation(producer):
    with pytest.raises(MessageValidationError, match="at least one"):
        producer._encoder.prepare_batch([])
    with pytest.raises(MessageValidationError, match="share one topic"):
        producer._encoder.prepare_batch([Message("T", b"x"), Message("U", b"x")])
    with pytest.raises(MessageValidationError, match="delayed"):
        producer._encoder.prepare_batch([Message("T", b"x", delay_level=1)])
    with pytest.raises(MessageValidationError, match="retry"):
        producer._encoder.prepare_batch([Message("%RETRY%g", b"x")])
    with pytest.raises(MessageValidationError, match="max_message_size"):
        producer._encoder.prepare_batch([Message("T", b"x" * 400) for _ in range(3)])


# ----------------------------------------------------------------------------------------------- received messages
STORE = pack_host("192.168.0.20", 10911)
BORN = pack_host("192.168.0.10", 54321)


def record(queue_offset, props, body=b"Hello", sys_flag=0, topic=b"TopicTest", phys=0):
    return encode_record(
        queue_id=1, flag=9, queue_offset=queue_offset, physical_offset=phys, sys_flag=sys_flag,
        born_timestamp=1700000000000, born_host=BORN, store_timestamp=1700000000123, store_host=STORE,
        reconsume_times=2, prepared_transaction_offset=0, body=body, topic=topic, properties=props.encode(),
    )


def test_message_ext_fields():
    uniq = "C0A8000A303918B4AAC20BEBC2000000"
    body = record(5, f"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01{uniq}\x02a\x011\x02")
    [m] = decode_messages(body, "broker-a", None)
    assert isinstance(m, MessageExt)
    assert (m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.flag) == ("TopicTest", 1, 5, 0, 9)
    assert m.body == b"Hello" and m.tags == "TagA" and m.keys == ["k1", "k2"] and m.properties["a"] == "1"
    assert m.msg_id == uniq and m.offset_msg_id == "C0A8001400002A9F0000000000000000"
    assert m.born_host == "192.168.0.10:54321" and m.store_host == "192.168.0.20:10911"
    assert (m.born_timestamp, m.store_timestamp, m.reconsume_times) == (1700000000000, 1700000000123, 2)
    assert m.broker_name == "broker-a" and m.store_size == len(body)


def test_message_ext_without_uniq_key_uses_offset_id():
    [m] = decode_messages(record(0, "", phys=1234), None, None)
    assert m.msg_id == m.offset_msg_id and m.tags is None and m.keys == []


def test_message_ext_decompresses_zlib_and_reports_missing_codecs():
    raw = b"z" * 1000
    [m] = decode_messages(record(0, "", body=zlib.compress(raw, 5), sys_flag=1), None, None)
    assert m.body == raw
    [m5] = decode_messages(record(0, "", body=zlib.compress(raw), sys_flag=0x301), None, None)
    assert m5.body == raw
    try:
        import lz4.frame  # noqa: F401
    except ImportError:
        [m_lz4] = decode_messages(record(0, "", body=b"junk", sys_flag=0x101), None, None)
        with pytest.raises(MQClientError, match="lz4"):
            _ = m_lz4.body


def test_decode_messages_refilters_tags_exactly():
    body = b"".join(record(i, f"TAGS\x01{t}\x02") for i, t in enumerate(["TagA", "TagB", "TagC"]))
    body += record(3, "")
    got = decode_messages(body, None, MessageSelector.tag("TagA || TagC"))
    assert [m.tags for m in got] == ["TagA", "TagC"]
    assert len(decode_messages(body, None, MessageSelector.tag("*"))) == 4
    assert len(decode_messages(body, None, MessageSelector.sql("a > 1"))) == 4


def test_decode_messages_rejects_garbage():
    with pytest.raises(MQClientError, match="malformed"):
        decode_messages(record(0, "")[:-3], None, None)
