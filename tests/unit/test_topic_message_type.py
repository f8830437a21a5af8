"""Topic attributes and message types (broker/managers/topic_message_type.py), transaction ids (half_ids.py), the
gRPC system property set: the reference's rules and texts."""

import re

import pytest

from broker.grpc.common import SYSTEM_PROPERTY_NAMES, accept_message_types, no_route_remark, record_message
from broker.managers import topic_message_type as t
from broker.transaction.half import to_half
from broker.transaction.half_ids import HalfIds
from broker.store.types import MessageToStore
from protocol.config_bodies import TopicConfig
from protocol.grpc import definition_pb2 as pb
from protocol.ids import pack_host
from protocol.message import decode_record, encode_record
from protocol.properties import MESSAGE_CONST_SYSTEM_SET, decode_properties, encode_properties


def _topic(kind: str | None = None, name: str = "Orders") -> TopicConfig:
    return TopicConfig(name, 4, 4, 6, attributes=None if kind is None else {"message.type": kind})


def test_attribute_changes_parse_as_the_reference():
    assert t.parse_attribute_changes("+message.type=FIFO,-queue.type") == {"+message.type": "FIFO", "-queue.type": ""}
    assert t.parse_attribute_changes("") == {} and t.parse_attribute_changes(None) == {}
    for text, remark in (("message.type=FIFO", "add/alter attribute format is wrong: message.type"),
                         ("message.type", "delete attribute format is wrong: message.type"),
                         ("+a=1,+a=2", "key duplication: +a")):
        with pytest.raises(t.AttributeError_, match=re.escape(remark)):
            t.parse_attribute_changes(text)


def test_created_and_updated_attributes():
    created = t.attributes_after(None, "+message.type=FIFO")
    assert created == {"message.type": "FIFO"}
    changed = t.attributes_after(_topic("FIFO"), "+message.type=DELAY")
    assert changed == {"message.type": "DELAY"}
    assert t.attributes_after(_topic("FIFO"), "-message.type") == {}
    assert t.attributes_after(_topic("FIFO"), None) == {"message.type": "FIFO"}  # no change list: kept
    assert t.attributes_after(_topic(None), None) is None  # topics.json keeps its shape for untyped topics
    assert t.attributes_after(None, "+queue.type=SimpleCQ,+cleanup.policy=DELETE") == {
        "queue.type": "SimpleCQ", "cleanup.policy": "DELETE"}
    refused = {
        (None, "-message.type"): "only add attribute is supported while creating topic. key: message.type",
        (None, "+no.such=1"): "unsupported key: no.such",
        (None, "+message.type=LITE"): "value is not in set: ",
        (None, "+message.type=MIXED"): "MIXED message type is not supported.",
        (None, "+reserve.time=10"): "Update topic reserveTime not supported",
        (None, "+queue.type=BatchCQ"): "not supported",
        ("FIFO", "-queue.type"): "attempt to delete a nonexistent key: queue.type",
        ("FIFO", "+queue.type=SimpleCQ"): "attempt to update an unchangeable attribute. key: queue.type",
    }
    for (kind, text), remark in refused.items():
        with pytest.raises(t.AttributeError_, match=re.escape(remark)):
            t.attributes_after(None if kind is None else _topic(kind), text)
    assert t.attributes_after(None, "+message.type=MIXED", allow_mixed=True) == {"message.type": "MIXED"}


def test_message_types_and_the_send_check():
    assert t.message_type_of({}) == "NORMAL"
    assert t.message_type_of({"__SHARDINGKEY": "g"}) == "FIFO"
    for key in ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"):
        assert t.message_type_of({key: "1", "__SHARDINGKEY": "g"}) == "DELAY"
    assert t.message_type_of({"TRAN_MSG": "true", "DELAY": "3"}) == "TRANSACTION"
    assert t.topic_message_type(_topic(None)) == "NORMAL"  # topics made before types existed
    assert t.message_type_problem(_topic("FIFO"), "FIFO") is None
    assert t.message_type_problem(_topic("MIXED"), "DELAY") is None
    assert t.message_type_problem(_topic("FIFO"), "NORMAL") == (
        "TopicMessageType validate failed, the expected type is FIFO, but actual type is NORMAL")
    assert t.send_type_problem(True, _topic(None), {"__SHARDINGKEY": "g"}) is not None
    assert t.send_type_problem(False, _topic(None), {"__SHARDINGKEY": "g"}) is None  # check off
    assert t.send_type_problem(True, None, {"__SHARDINGKEY": "g"}) is None  # unknown: auto-creation decides
    assert t.send_type_problem(True, _topic("FIFO", "%RETRY%g"), {}) is None  # retry topics are not checked
    assert t.send_type_problem(True, _topic("FIFO"), {"TRANSFER_FLAG": "true"}) is None
    # the remoting port checks typed topics only: an untyped topic takes what 4.x producers send, as before
    assert t.remoting_type_problem(True, _topic(None), {"TRAN_MSG": "true"}) is None
    assert t.remoting_type_problem(True, _topic("NORMAL"), {"TRAN_MSG": "true"}) is not None


def test_routes_and_console():
    assert accept_message_types(_topic(None)) == [pb.NORMAL]
    assert accept_message_types(_topic("FIFO")) == [pb.FIFO]
    assert accept_message_types(_topic("MIXED")) == [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
    assert accept_message_types(_topic("UNSPECIFIED")) == [pb.MESSAGE_TYPE_UNSPECIFIED]
    assert no_route_remark("X") == "No topic route info in name server for the topic: X"
    assert t.console_attributes({"messageType": "fifo"}, None) == "+message.type=FIFO"
    assert t.console_attributes({"messageType": "NORMAL"}, None) is None  # a new topic is NORMAL anyway
    assert t.console_attributes({"messageType": "NORMAL"}, _topic("FIFO")) == "+message.type=NORMAL"
    assert t.console_attributes({"attributes": " -message.type ", "messageType": "FIFO"}, None) == "-message.type"


def test_grpc_user_properties_are_filtered_by_the_reference_set():
    assert len(MESSAGE_CONST_SYSTEM_SET) == 51 and "__CRC32#" in MESSAGE_CONST_SYSTEM_SET
    for shown in ("__SHARDINGKEY", "__transactionId__", "__STARTDELIVERTIME", "TRACE_CONTEXT"):
        assert shown not in SYSTEM_PROPERTY_NAMES
    props = {"UNIQ_KEY": "ID1", "TAGS": "A", "__SHARDINGKEY": "g1", "__transactionId__": "ID1",
             "__STARTDELIVERTIME": "5", "app": "x", "CLUSTER": "c", "POP_ORIGIN_QUEUE_ID": "1"}
    raw = encode_record(queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0, born_timestamp=1,
                        born_host=pack_host("127.0.0.1", 9), store_timestamp=2, store_host=pack_host("127.0.0.1", 10),
                        reconsume_times=0, prepared_transaction_offset=0, body=b"b", topic=b"Orders",
                        properties=encode_properties(props).encode())
    message = record_message(decode_record(raw), "Orders", 0, 0, 1)
    assert dict(message.user_properties) == {"__SHARDINGKEY": "g1", "__transactionId__": "ID1",
                                             "__STARTDELIVERTIME": "5", "app": "x"}
    assert message.system_properties.message_group == "g1"


def _prepared(props: dict[str, str]) -> MessageToStore:
    return MessageToStore(topic="Orders", queue_id=1, flag=0, sys_flag=4, born_timestamp=1, born_host=b"",
                          reconsume_times=0, body=b"b", properties=encode_properties(props), tags_code=0,
                          keys=None, uniq_key=props.get("UNIQ_KEY"))


def test_half_messages_carry_their_transaction_id():
    props = {"TRAN_MSG": "true", "PGROUP": "P", "UNIQ_KEY": "ID7"}
    message = _prepared(props)
    committed = to_half(message, props)
    stored = decode_properties(message.properties)
    assert stored["__transactionId__"] == "ID7" and stored["REAL_TOPIC"] == "Orders"
    assert decode_properties(committed)["__transactionId__"] == "ID7"  # the committed message keeps it
    stale = {"TRAN_MSG": "true", "UNIQ_KEY": "ID8", "__transactionId__": "other"}
    message = _prepared(stale)
    to_half(message, stale)
    assert decode_properties(message.properties)["__transactionId__"] == "ID8"


def test_half_ids_lead_from_a_transaction_id_to_the_latest_half_record():
    ids = HalfIds(limit=2)
    ids.note("A", 100, 1)
    ids.note("B", 200, 2)
    ids.note("A", 300, 3)  # a check copy: A is the youngest now
    ids.note("C", 400, 4)  # over the limit: the oldest (B) goes
    assert (ids.find("A"), ids.find("B"), ids.find("C")) == ((300, 3), None, (400, 4))
    ids.forget("A")
    assert ids.find("A") is None and len(ids) == 1
