"""broker/timer/timed.py: which messages are timed, and the copy written back when they are due."""

from __future__ import annotations

import pytest

from broker.store.types import MessageToStore
from broker.timer.timed import (TIMER_TOPIC, TimerPropertyError, deliver_ms_of, restore_from_timer, timer_deliver_ms,
                                to_timer_topic)
from protocol.message import decode_record, encode_record
from protocol.properties import decode_properties, encode_properties


def test_delivery_time_from_each_property():
    assert timer_deliver_ms({}, 1_000) is None
    assert timer_deliver_ms({"TIMER_DELIVER_MS": "5000"}, 1_000) == 5_000
    assert timer_deliver_ms({"TIMER_DELAY_MS": "250"}, 1_000) == 1_250
    assert timer_deliver_ms({"TIMER_DELAY_SEC": " 3 "}, 1_000) == 4_000
    with pytest.raises(TimerPropertyError, match="TIMER_DELAY_SEC"):
        timer_deliver_ms({"TIMER_DELAY_SEC": "soon"}, 1_000)


def test_a_timed_message_goes_to_the_timer_topic_and_comes_back_as_sent():
    props = {"TAGS": "TagA", "KEYS": "k1", "UNIQ_KEY": "ID1", "TIMER_DELAY_SEC": "3", "color": "red"}
    message = MessageToStore(topic="Orders", queue_id=3, flag=7, sys_flag=0, born_timestamp=123,
                             born_host=b"\x7f\x00\x00\x01\x00\x00\x04\xd2", reconsume_times=0, body=b"body",
                             properties=encode_properties(props), tags_code=0, keys="k1", uniq_key="ID1")
    to_timer_topic(message, props, 4_000)
    assert (message.topic, message.queue_id) == (TIMER_TOPIC, 0)
    stored = decode_properties(message.properties)
    assert stored["REAL_TOPIC"] == "Orders" and stored["REAL_QID"] == "3" and stored["TIMER_OUT_MS"] == "4000"
    assert "TIMER_DELAY_SEC" not in stored and stored["TIMER_DELIVER_MS"] == "4000"
    host = b"\x7f\x00\x00\x01\x00\x00\x04\xd2"
    record = decode_record(encode_record(
        topic=TIMER_TOPIC.encode(), queue_id=0, body=b"body", flag=7, properties=message.properties.encode(),
        queue_offset=0, physical_offset=0, sys_flag=0, born_timestamp=123, born_host=host, store_timestamp=456,
        store_host=host, reconsume_times=0, prepared_transaction_offset=0))
    assert deliver_ms_of(record) == 4_000
    copy = restore_from_timer(record)
    back = decode_properties(copy.properties)
    assert (copy.topic, copy.queue_id, copy.flag, copy.body, copy.born_timestamp) == ("Orders", 3, 7, b"body", 123)
    assert "TIMER_OUT_MS" not in back and back["TIMER_DELIVER_MS"] == "4000" and back["color"] == "red"
    assert copy.uniq_key == "ID1" and copy.keys == "k1"
