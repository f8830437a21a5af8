"""Admin bodies (fastjson shapes with MessageQueue keys), mqadmin argument parsing, metrics helpers."""

from __future__ import annotations

import argparse

import pytest

from broker.metrics import LatencyHistogram
from client.admin.cli import build_parser, parse_time_ms
from protocol.admin_bodies import (
    ConsumeStats,
    Connection,
    ConsumerConnection,
    KVTable,
    OffsetWrapper,
    TopicOffset,
    TopicStatsTable,
    loads_fastjson,
)
from protocol.bodies import MessageQueue, SubscriptionData


def test_fastjson_reader_accepts_object_and_number_keys():
    data = b'{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:{"maxOffset":3}},"n":{0:1,2:-3.5e1}}'
    parsed = loads_fastjson(data)
    (key, value), = parsed["offsetTable"].items()
    assert dict(key) == {"brokerName": "b", "queueId": 1, "topic": "T"}
    assert value == {"maxOffset": 3}
    assert parsed["n"] == {0: 1, 2: -35.0}
    assert loads_fastjson('  [true, false, null, "x\\u00e9"]  ') == [True, False, None, "x\u00e9"]


@pytest.mark.parametrize("bad", [b"{", b'{"a" 1}', b"[1,]", b"{} x", b"nope"])
def test_fastjson_reader_rejects_garbage(bad):
    with pytest.raises(ValueError):
        loads_fastjson(bad)


def test_topic_stats_table_round_trip_in_reference_shape():
    table = TopicStatsTable({MessageQueue("T", "broker-a", q): TopicOffset(0, q * 10, 1700000000000 + q)
                             for q in range(3)})
    raw = table.encode()
    assert raw.startswith(b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
                          b'{"lastUpdateTimestamp":1700000000000,"maxOffset":0,"minOffset":0}')
    assert TopicStatsTable.decode(raw) == table


def test_consume_stats_round_trip_and_totals():
    stats = ConsumeStats({MessageQueue("T", "b", 0): OffsetWrapper(10, 4, 5),
                          MessageQueue("T", "b", 1): OffsetWrapper(3, 3, 0)}, consume_tps=2.5)
    raw = stats.encode()
    assert b'"consumeTps":2.5' in raw
    back = ConsumeStats.decode(raw)
    assert back == stats
    assert back.total_diff() == 6
    assert back.offset_table[MessageQueue("T", "b", 0)].lag == 6


def test_consumer_connection_and_kv_table():
    conn = ConsumerConnection([Connection("127.0.0.1@1", "127.0.0.1:5000", "PYTHON", 479)],
                              {"T": SubscriptionData(topic="T", sub_string="a || b")},
                              "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET")
    assert ConsumerConnection.decode(conn.encode()) == conn
    # Java writes LanguageCode / enums as names, older tools as ordinals: both accepted
    legacy = ConsumerConnection.decode(b'{"connectionSet":[{"clientId":"c","clientAddr":"a","language":0,'
                                       b'"version":1}],"messageModel":1,"consumeType":1}')
    assert legacy.connection_set[0].language == "JAVA"
    assert legacy.message_model == "CLUSTERING" and legacy.consume_type == "CONSUME_PASSIVELY"
    kv = KVTable.of([("b", 2), ("a", "x")])
    assert kv.encode() == b'{"table":{"a":"x","b":"2"}}'
    assert KVTable.decode(kv.encode()).table == {"a": "x", "b": "2"}


def test_parse_time_ms_formats():
    assert parse_time_ms("1700000000000") == 1700000000000
    iso = parse_time_ms("2024-05-01 12:00:00")
    assert parse_time_ms("2024-05-01T12:00:00") == iso
    assert parse_time_ms("2024-05-01#12:00:00:250") == iso + 250
    with pytest.raises(argparse.ArgumentTypeError):
        parse_time_ms("yesterday")


def test_parser_requires_sub_command_options():
    parser = build_parser()
    args = parser.parse_args(["updateTopic", "-t", "T", "-w", "4", "-c", "DefaultCluster", "--json"])
    assert (args.topic, args.write_queues, args.cluster, args.json) == ("T", 4, "DefaultCluster", True)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["topicStatus"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["resendDlq", "-g", "G"])  # needs -i or --all
    with pytest.raises(SystemExit):
        parser.parse_args(["updateTopic", "-t", "T", "-b", "h:1", "-c", "C"])  # exclusive


def test_latency_histogram_buckets_are_cumulative():
    hist = LatencyHistogram((0.001, 0.01))
    for value in (0.0005, 0.001, 0.005, 2.0):
        hist.observe(value)
    family = hist.family("x_seconds", "doc")
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    assert buckets == {"0.001": 2, "0.01": 3, "+Inf": 4}
    assert abs(hist.sum - 2.0065) < 1e-9


