"""Typed custom headers: liberal decoding, required fields, V2 short names, encoding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import headers as H
from protocol.headers import F, Header, HeaderError

V2_EXT = {
    "a": "pg1",
    "b": "TopicTest",
    "c": "TBW102",
    "d": "4",
    "e": "0",
    "f": "0",
    "g": "1700000000000",
    "h": "0",
    "i": "TAGS\x01TagA\x02",
    "j": "0",
    "k": "false",
    "m": "false",
    "n": "broker-a",
}


def test_send_v2_decoding_and_types():
    h = H.SendMessageRequestHeader.decode_v2(V2_EXT)
    assert h.producer_group == "pg1" and h.topic == "TopicTest" and h.default_topic == "TBW102"
    assert h.default_topic_queue_nums == 4 and h.queue_id == 0 and h.sys_flag == 0
    assert h.born_timestamp == 1700000000000 and h.flag == 0
    assert h.properties == "TAGS\x01TagA\x02"
    assert h.reconsume_times == 0 and h.unit_mode is False and h.batch is False
    assert h.max_reconsume_times is None and h.broker_name == "broker-a"


def test_send_v1_and_v2_are_equivalent():
    v2 = H.SendMessageRequestHeader.decode_v2(V2_EXT)
    v1 = H.SendMessageRequestHeader.decode(v2.encode())
    assert v1 == v2
    assert v1.encode_v2() == V2_EXT
    assert v2.encode()["producerGroup"] == "pg1"


def test_send_v2_missing_required_names_short_and_long_key():
    ext = dict(V2_EXT)
    del ext["b"]
    with pytest.raises(HeaderError, match=r"missing required header field 'b' \(topic\)"):
        H.SendMessageRequestHeader.decode_v2(ext)


def test_send_v2_accepts_long_names_as_fallback():
    ext = dict(V2_EXT)
    ext["topic"] = ext.pop("b")
    assert H.SendMessageRequestHeader.decode_v2(ext).topic == "TopicTest"


def test_missing_required_field_names_it():
    with pytest.raises(HeaderError) as info:
        H.PullMessageRequestHeader.decode({"consumerGroup": "g", "queueId": "1"})
    assert str(info.value) == "missing required header field 'topic'"
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("ext", [None, {}])
def test_no_ext_fields_at_all(ext):
    with pytest.raises(HeaderError, match="consumerGroup"):
        H.GetConsumerListByGroupRequestHeader.decode(ext)
    assert H.RegisterBrokerResponseHeader.decode(ext) == H.RegisterBrokerResponseHeader()


def test_numbers_bools_and_strings_are_all_accepted():
    # what the JavaScript and C++ clients send: JSON numbers and booleans
    js = {
        "a": "pg",
        "b": "T",
        "c": "TBW102",
        "d": 4,
        "e": 1,
        "f": 0,
        "g": 1700000000000,
        "h": 0,
        "k": True,
        "m": False,
        "unknownKey": [1, 2],
        "AccessKey": "",
        "OnsChannel": "ALIYUN",
    }
    h = H.SendMessageRequestHeader.decode_v2(js)
    assert (h.default_topic_queue_nums, h.queue_id, h.born_timestamp) == (4, 1, 1700000000000)
    assert h.unit_mode is True and h.batch is False


@pytest.mark.parametrize(
    "raw,expected",
    [("12", 12), (12, 12), (12.0, 12), ("-1", -1), (" 7 ", 7), ("3.0", 3), (True, 1), ("2147483647", 2**31 - 1),
     ("-2147483648", -(2**31))],
)
def test_int_conversion(raw, expected):
    h = H.GetMaxOffsetRequestHeader.decode({"topic": "t", "queueId": raw})
    assert h.queue_id == expected and type(h.queue_id) is int


@pytest.mark.parametrize("raw", ["2147483648", "-2147483649", 2**31, "1e12", str(2**70), 2.0**80])
def test_int32_field_out_of_range_names_field_and_type(raw):
    """queueId is a Java Integer: a value it cannot hold is a header error, not a later struct.error."""
    with pytest.raises(HeaderError, match=r"'queueId'.*does not fit a Java int$"):
        H.GetMaxOffsetRequestHeader.decode({"topic": "t", "queueId": raw})


@pytest.mark.parametrize("raw,ok", [("9223372036854775807", True), ("-9223372036854775808", True),
                                    ("9223372036854775808", False), ("-9223372036854775809", False),
                                    ("1" * 4000, False)])
def test_int64_field_range(raw, ok):
    """offset is a Java Long: the full int64 range decodes, one past it is refused naming the field."""
    if ok:
        assert H.ViewMessageRequestHeader.decode({"offset": raw}).offset == int(raw)
    else:
        with pytest.raises(HeaderError, match=r"'offset'.*does not fit a Java long"):
            H.ViewMessageRequestHeader.decode({"offset": raw})


def test_v2_short_key_range_error_names_both_keys():
    ext = {"a": "g", "b": "t", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": str(2**70)}
    with pytest.raises(HeaderError, match=r"'h \(flag\)'.*does not fit a Java int"):
        H.SendMessageRequestHeader.decode_v2(ext)


@pytest.mark.parametrize("raw", ["abc", "1x", 1.5, [1], {"a": 1}])
def test_int_conversion_failure_names_field(raw):
    with pytest.raises(HeaderError, match="queueId"):
        H.GetMaxOffsetRequestHeader.decode({"topic": "t", "queueId": raw})


@pytest.mark.parametrize(
    "raw,expected",
    [("true", True), ("TRUE", True), ("True", True), ("false", False), ("yes", False), ("1", False), (True, True), (False, False), (1, True), (0, False), (2.5, True)],
)
def test_bool_conversion_follows_java_parse_boolean(raw, expected):
    h = H.QueryConsumerOffsetRequestHeader.decode({"consumerGroup": "g", "topic": "t", "queueId": 0, "setZeroIfNotFound": raw})
    assert h.set_zero_if_not_found is expected


def test_bool_conversion_failure():
    with pytest.raises(HeaderError, match="setZeroIfNotFound"):
        H.QueryConsumerOffsetRequestHeader.decode(
            {"consumerGroup": "g", "topic": "t", "queueId": 0, "setZeroIfNotFound": [True]}
        )


def test_string_fields_accept_numbers_and_bools():
    h = H.UnregisterClientRequestHeader.decode({"clientID": 123, "producerGroup": True, "consumerGroup": 1.5})
    assert (h.client_id, h.producer_group, h.consumer_group) == ("123", "true", "1.5")


def test_empty_values_count_as_missing_for_numbers():
    # the binary header turns "" into None; JSON may carry "" directly
    for ext in ({"topic": "t", "queueId": None}, {"topic": "t", "queueId": ""}, {"topic": "t", "queueId": "  "}):
        with pytest.raises(HeaderError, match="queueId"):
            H.GetMinOffsetRequestHeader.decode(ext)
    h = H.GetMaxOffsetRequestHeader.decode({"topic": "t", "queueId": "0", "committed": ""})
    assert h.committed is True  # default


def test_defaults_are_filled():
    h = H.SearchOffsetRequestHeader.decode({"topic": "t", "queueId": "0", "timestamp": "5"})
    assert h.boundary_type == "LOWER"
    msgback = H.ConsumerSendMsgBackRequestHeader.decode({"offset": "10", "group": "g", "delayLevel": "0"})
    assert msgback.unit_mode is False and msgback.max_reconsume_times is None and msgback.origin_msg_id is None
    pull = H.PullMessageRequestHeader.decode(
        {"consumerGroup": "g", "topic": "t", "queueId": 0, "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 2}
    )
    # no commitOffset means nothing to commit (a default of 0 would reset the group's offset)
    assert pull.commit_offset is None and pull.sub_version == 0 and pull.expression_type is None


def test_encode_writes_strings_and_omits_none():
    resp = H.PullMessageResponseHeader(suggest_which_broker_id=0, next_begin_offset=5, min_offset=0, max_offset=5)
    assert resp.encode() == {"suggestWhichBrokerId": "0", "nextBeginOffset": "5", "minOffset": "0", "maxOffset": "5"}
    req = H.QueryConsumerOffsetRequestHeader(consumer_group="g", topic="t", queue_id=1, set_zero_if_not_found=False)
    assert req.encode() == {"consumerGroup": "g", "topic": "t", "queueId": "1", "setZeroIfNotFound": "false"}


def test_constructor_is_keyword_only_with_defaults():
    h = H.GetMaxOffsetRequestHeader(topic="t", queue_id=1)
    assert h.committed is True
    with pytest.raises(TypeError):
        H.GetMaxOffsetRequestHeader("t", 1)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        h.unknown = 1  # slots


def test_repr_and_to_dict():
    h = H.DeleteTopicRequestHeader(topic="t")
    assert repr(h) == "DeleteTopicRequestHeader(topic='t')"
    assert h.to_dict() == {"topic": "t"}


def test_custom_header_class_and_inheritance():
    class Base(Header):
        topic = F("topic", str, required=True)

    class Child(Base):
        queue_id = F("queueId", int, default=-1)
        ratio = F("ratio", float)
        legacy = F("newName", str, aliases=("oldName",))

    c = Child.decode({"topic": "t", "ratio": "0.5", "oldName": "x"})
    assert (c.topic, c.queue_id, c.ratio, c.legacy) == ("t", -1, 0.5, "x")
    assert Child.decode({"topic": "t", "newName": "y", "oldName": "x"}).legacy == "y"
    with pytest.raises(HeaderError, match="ratio"):
        Child.decode({"topic": "t", "ratio": "nan?"})
    with pytest.raises(HeaderError, match="'topic'"):
        Child.decode({})
    assert Child(topic="t", queue_id=3).encode() == {"topic": "t", "queueId": "3"}


def test_all_declared_classes_roundtrip_through_encode():
    for name in H.__all__:
        cls = getattr(H, name)
        if not (isinstance(cls, type) and issubclass(cls, Header) and cls is not Header):
            continue
        values = {}
        for f in cls._fields:
            values[f.attr] = {str: "v", int: 7, bool: True, float: 1.5}[f.type]
        obj = cls(**values)
        assert cls.decode(obj.encode()) == obj, name
        assert all(type(v) is str for v in obj.encode().values()), name


_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=12))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(list(V2_EXT) + ["l", "zz", "topic"]), _scalar))
def test_decoding_arbitrary_values_raises_only_header_error(ext):
    try:
        H.SendMessageRequestHeader.decode_v2(ext)
    except HeaderError:
        pass
    try:
        H.PullMessageRequestHeader.decode(ext)
    except HeaderError:
        pass
