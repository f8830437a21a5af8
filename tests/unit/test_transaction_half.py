"""Pure half/op record rules of broker.transaction.half."""

from broker.store.types import MessageToStore
from broker.transaction.half import (
    HALF_TOPIC,
    committed_message,
    is_half_send,
    op_message,
    parse_op_body,
    to_half,
)
from protocol.ids import pack_host
from protocol.message import decode_record, encode_record
from protocol.properties import decode_properties, encode_properties


def test_the_property_decides_and_retries_of_committed_messages_are_not_half():
    assert is_half_send({"TRAN_MSG": "TRUE"}, 0)
    assert not is_half_send({"TRAN_MSG": "false"}, 0) and not is_half_send({}, 0)
    assert not is_half_send({"TRAN_MSG": "true", "DELAY": "3"}, 1)  # a retry of a committed message
    assert is_half_send({"TRAN_MSG": "true", "DELAY": "3"}, 0)  # its delay is dropped instead


def test_to_half_keeps_the_real_destination_and_clears_transaction_bits():
    props = {"TRAN_MSG": "true", "PGROUP": "pg", "DELAY": "2", "UNIQ_KEY": "U"}
    message = MessageToStore("Orders", 3, 0, 0x4 | 0x1, 1, pack_host("127.0.0.1", 1), 0, b"b", "", 0)
    to_half(message, props)
    stored = decode_properties(message.properties)
    assert (message.topic, message.queue_id, message.sys_flag) == (HALF_TOPIC, 0, 0x1)
    assert stored["REAL_TOPIC"] == "Orders" and stored["REAL_QID"] == "3" and "DELAY" not in stored


def test_op_bodies_in_both_formats():
    assert parse_op_body(b"17") == [17] and parse_op_body(b"17,18,") == [17, 18] and parse_op_body(b"x,,3") == [3]
    op = op_message([20, 5], b"\x7f\x00\x00\x01\x00\x00\x00\x01", 1, {})
    assert op.body == b"20,5," and decode_properties(op.properties)["TAGS"] == "d"


def test_committed_message_goes_to_the_real_queue_with_commit_bits():
    props = {"TRAN_MSG": "true", "PGROUP": "pg", "REAL_TOPIC": "Orders", "REAL_QID": "2", "TAGS": "A", "UNIQ_KEY": "U"}
    raw = encode_record(queue_id=0, flag=7, queue_offset=4, physical_offset=1000, sys_flag=0, born_timestamp=5,
                        born_host=pack_host("127.0.0.1", 9), store_timestamp=6, store_host=pack_host("127.0.0.1", 10),
                        reconsume_times=0, prepared_transaction_offset=0, body=b"pay", topic=HALF_TOPIC.encode(),
                        properties=encode_properties(props).encode())
    message = committed_message(decode_record(raw))
    stored = decode_properties(message.properties)
    assert (message.topic, message.queue_id, message.sys_flag & 0xC, message.flag) == ("Orders", 2, 0x8, 7)
    assert message.prepared_transaction_offset == 1000 and message.body == b"pay"
    assert "REAL_TOPIC" not in stored and stored["TRAN_MSG"] == "true" and stored["PGROUP"] == "pg"
