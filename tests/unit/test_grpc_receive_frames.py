"""broker/grpc/consumer.py: a receive's frames built from a template (``message_frames``) equal the plain
definition (``message_frame``: fill_message + receipt handle + invisible time) for every kind of stored message;
receipt handles written by a receive parse back (broker/pop/handle.py)."""

from __future__ import annotations

import pytest

from broker.grpc.consumer import message_frame, message_frames
from broker.pop.handle import InvalidHandle, ReceiptHandle, handle_middle, handle_text, parse_handle
from broker.pop.types import Delivery
from protocol.ids import pack_host
from protocol.message import decode_record, encode_record
from protocol.properties import encode_properties


def _record(props: dict[str, str], *, sys_flag: int = 0, born: tuple[str, int] = ("10.0.0.7", 41000),
            store: tuple[str, int] = ("127.0.0.1", 10911), body: bytes = b"payload", stamp: int = 1_700_000_000_123):
    raw = encode_record(queue_id=1, flag=0, queue_offset=5, physical_offset=4096, sys_flag=sys_flag,
                        born_timestamp=stamp, born_host=pack_host(*born), store_timestamp=stamp + 7,
                        store_host=pack_host(*store), reconsume_times=0, prepared_transaction_offset=0, body=body,
                        topic=b"Orders", properties=encode_properties(props).encode())
    return decode_record(raw)


def _delivery(record, n: int, *, attempt: int = 1, invisible_ms: int = 30_000, topic: str = "Orders") -> Delivery:
    text = handle_text(1_700_000_000_500, invisible_ms, 0, "broker-a", 1, 100 + n, 4096 + n)
    return Delivery(record, text, invisible_ms, attempt, topic, n % 4, 100 + n)


KINDS = [
    {"UNIQ_KEY": "ID1", "TAGS": "TagA"},
    {"UNIQ_KEY": "ID2"},  # no tag
    {"TAGS": "TagB"},  # no UNIQ_KEY: the offset message id
    {"UNIQ_KEY": "ID3", "TAGS": "A", "KEYS": "k1 k2", "__BORNHOST": "1.2.3.4:5", "CLUSTER": "c", "WAIT": "true"},
    {"UNIQ_KEY": "ID4", "__SHARDINGKEY": "g1", "app": "x", "TRACE_CONTEXT": "t"},
    {"UNIQ_KEY": "ID5", "TIMER_DELIVER_MS": "1700000009999", "DELAY": "3"},
    {"UNIQ_KEY": "ID6", "TRAN_MSG": "true", "__transactionId__": "ID6"},
    {"UNIQ_KEY": "ID7", "DLQ_ORIGIN_TOPIC": "Orders", "DLQ_ORIGIN_MESSAGE_ID": "ID0", "RETRY_TOPIC": "Orders"},
    {"UNIQ_KEY": "ID8", "POP_ORIGIN_QUEUE_ID": "2", "POP_ORIGIN_QUEUE_OFFSET": "9", "ORIGIN_MESSAGE_ID": "X"},
]


def test_template_frames_equal_the_plain_definition():
    deliveries = [_delivery(_record(props), n) for n, props in enumerate(KINDS)]
    deliveries.append(_delivery(_record({"UNIQ_KEY": "G"}, sys_flag=1, born=("::1", 7)), 20, attempt=3))
    deliveries.append(_delivery(_record({"UNIQ_KEY": "H"}, store=("10.9.9.9", 10911), stamp=0), 21,
                                invisible_ms=12_345, topic="Other"))
    deliveries.append(_delivery(_record({"UNIQ_KEY": "I", "TAGS": ""}, body=b""), 22))
    for first in range(len(deliveries)):  # each delivery as the template's source, too
        batch = deliveries[first:] + deliveries[:first]
        frames = message_frames(batch)
        assert len(frames) == len(batch)
        for frame, delivery in zip(frames, batch):
            expected = message_frame(delivery)
            assert frame == expected
            assert frame.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
    assert message_frames([]) == []


def test_handle_texts_round_trip_and_forgeries_are_refused():
    handle = ReceiptHandle(1_700_000_000_000, 30_000, 1, "broker-a", 2, 41, 123_456)
    text = handle.encode()
    assert text == "41 1700000000000 30000 0 1 broker-a 2 41 123456"
    assert text == f"41{handle_middle(1_700_000_000_000, 30_000, 1, 'broker-a', 2)}41 123456"
    assert parse_handle(text) == (1_700_000_000_000, 30_000, 1, "broker-a", 2, 41, 123_456)
    assert _delivery(_record({}), 3).handle == ReceiptHandle(1_700_000_000_500, 30_000, 0, "broker-a", 1, 103, 4099)
    for bad in ("", "1 2", "41 1 2 0 1 b 2 41", "41 1 2 0 1 b 2 41 9 9", "x 1 2 0 1 b 2 41 9", "41 1 2 0 2 b 2 41 9",
                "41 1 2 0 1 b -2 41 9", "41 -1 2 0 1 b 2 41 9", "41 1 2 0 1 b 2 41 1.5", None):
        with pytest.raises(InvalidHandle):
            parse_handle(bad)
