"""The network source's pure parts: options, checkpoint offsets, read limits, range splits, pull answer trimming."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("numba")

from protocol.ids import pack_host  # noqa: E402
from protocol.message import pack_record_into, record_size  # noqa: E402
from spark_export.cluster.options import ClusterOptions  # noqa: E402
from spark_export.cluster.planning import from_json, limit_rows, pack_ranges, split_ranges, to_json  # noqa: E402
from spark_export.cluster.pull_reader import RangePuller  # noqa: E402
from spark_export.cluster.remote import QueueRef  # noqa: E402

A0, A1, B0 = QueueRef("T", "broker-a", 0), QueueRef("T", "broker-a", 1), QueueRef("T", "broker-b", 0)


def _opts(**extra: str) -> ClusterOptions:
    return ClusterOptions.parse({"nameServer": "127.0.0.1:9876", "topic": "T", **extra})


def test_options_defaults_and_aliases():
    o = ClusterOptions.parse({"NAMESERVER": "h1:1;h2:2", "topics": "T, U,T", "failOnDataLoss": "false"})
    assert o.name_servers == "h1:1;h2:2" and o.topics == ("T", "U") and not o.fail_on_data_loss
    assert o.starting_offsets is None and o.ending_offsets == "latest" and o.sub_expression == "*"
    assert not o.filtered and _opts(subExpression="A || B").filtered


@pytest.mark.parametrize("extra, words", [
    ({"nameServer": "nohost"}, "nameServer"),
    ({"topic": " "}, "option topic"),
    ({"startingOffsets": "{bad"}, "startingOffsets"),
    ({"startingOffsets": '{"Other":{"b":{"0":1}}}'}, "'Other'"),
    ({"startingOffsets": '{"T":{"b":{"x":1}}}'}, "queue id"),
    ({"startingOffsets": '{"T":{"b":{"0":-3}}}'}, "-2 (earliest)"),
    ({"endingOffsets": '{"T":{"b":{"0":-2}}}'}, "not allowed"),
    ({"endingOffsets": "earliest"}, "endingOffsets"),
    ({"maxOffsetsPerTrigger": "0"}, "positive"),
    ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
    ({"accessKey": "ak"}, "go together"),
    ({"failOnDataLoss": "maybe"}, "true or false"),
    ({"path": "/store"}, "not both"),
])
def test_bad_options_name_the_option(extra, words):
    with pytest.raises(ValueError, match="^rocketmq: ") as info:
        _opts(**extra)
    assert words in str(info.value)


def test_offset_json_is_parsed_with_numeric_queue_ids():
    o = _opts(startingOffsets='{"T":{"broker-a":{"0":5,"1":-2}}}')
    assert o.starting_offsets == {"T": {"broker-a": {0: 5, 1: -2}}}


def test_checkpoint_json_is_sorted_and_round_trips():
    offsets = {B0: 7, A1: 3, A0: 10, QueueRef("T", "broker-a", 10): 1}
    nested = to_json(offsets)
    assert json.dumps(nested) == json.dumps(to_json(dict(reversed(list(offsets.items())))))
    assert list(nested["T"]["broker-a"]) == ["0", "1", "10"]
    assert from_json(json.loads(json.dumps(nested))) == offsets


def test_limit_shares_by_backlog_and_keeps_unreachable_queues():
    start = {A0: 0, A1: 90, B0: 5}
    latest = {A0: 100, A1: 100}  # B0's broker did not answer: it stays where it was
    assert limit_rows(start, latest, None) == {A0: 100, A1: 100, B0: 5}
    limited = limit_rows(start, latest, 22)
    assert limited[B0] == 5 and limited[A0] == 20 and limited[A1] == 92
    assert limit_rows(start, {A0: 100, A1: 91}, 1) == {A0: 1, A1: 91, B0: 5}  # each queue with backlog gets >= 1
    new = QueueRef("T", "broker-c", 0)
    assert limit_rows(start, {new: 4}, None)[new] == 4  # a queue new to the query starts at 0


def test_ranges_are_split_to_reach_min_partitions():
    assert split_ranges({A0: 0}, {A0: 0, A1: 3}, None) == [(A1, 0, 3)]
    pieces = split_ranges({A0: 0, A1: 0}, {A0: 100, A1: 10}, 6)
    assert len(pieces) >= 6
    for queue, total in ((A0, 100), (A1, 10)):
        mine = [(lo, hi) for q, lo, hi in pieces if q == queue]
        assert mine[0][0] == 0 and mine[-1][1] == total
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))


def _queues(broker: str, count: int) -> list[QueueRef]:
    return [QueueRef("T", broker, q) for q in range(count)]


def test_small_ranges_of_a_broker_share_a_task():
    # a micro-batch of 200,000 offsets in 10 queues on two brokers: one task per broker, not ten
    ranges = [(q, 1000, 21_000) for b in ("broker-a", "broker-b") for q in _queues(b, 5)]
    groups = pack_ranges(ranges, 100_000)
    assert len(groups) == 2
    for group in groups:
        assert len({q.broker for q, _, _ in group}) == 1 and len(group) == 5
    assert sorted(r for g in groups for r in g) == sorted(ranges)  # every range once, unchanged


def test_packing_keeps_big_ranges_alone_and_balances_the_rest():
    big = (A0, 0, 500)
    small = [(q, 0, size) for q, size in zip(_queues("broker-b", 6), (90, 80, 70, 40, 10, 10))]
    groups = pack_ranges([big, *small], 150)
    assert [big] in groups
    b_groups = [g for g in groups if g != [big]]
    assert len(b_groups) == 2  # 300 offsets, about 150 per task
    sizes = sorted(sum(hi - lo for _, lo, hi in g) for g in b_groups)
    assert sizes == [150, 150]
    assert all(g == sorted(g) for g in b_groups)  # each group reads its queues in order


def test_packing_respects_min_partitions_and_can_be_turned_off():
    ranges = [(q, 0, 10) for q in _queues("broker-a", 4)]
    assert len(pack_ranges(ranges, 100)) == 1
    assert pack_ranges(ranges, 1) == [[r] for r in ranges]  # minOffsetsPerPartition=1: one range per task
    assert pack_ranges(ranges, 100, 2) == [[r] for r in ranges]  # packing would leave fewer than minPartitions
    assert len(pack_ranges(ranges + [(B0, 0, 10)], 100, 2)) == 2  # one per broker meets minPartitions=2
    pieces = split_ranges({A0: 0}, {A0: 1000}, 8)  # minPartitions cut one queue into 8 tasks: they stay 8
    assert pack_ranges(pieces, 100_000, 8) == [[p] for p in pieces]
    assert pack_ranges([], 100) == []


def test_the_packing_option():
    assert _opts().min_offsets_per_partition == 100_000
    assert _opts(minOffsetsPerPartition="1").min_offsets_per_partition == 1
    with pytest.raises(ValueError, match="minOffsetsPerPartition"):
        _opts(minOffsetsPerPartition="-5")


def _records(queue_offsets: list[int]) -> bytes:
    host = pack_host("127.0.0.1", 10911)
    out = bytearray()
    for qo in queue_offsets:
        size = record_size(3, 1, 0, False, False)
        chunk = bytearray(size)
        pack_record_into(chunk, 0, queue_id=0, flag=0, queue_offset=qo, physical_offset=1000 * qo, sys_flag=0,
                         born_timestamp=1, born_host=host, store_timestamp=2, store_host=host, reconsume_times=0,
                         prepared_transaction_offset=0, body=b"abc", topic=b"T", properties=b"")
        out += chunk
    return bytes(out)


def test_pull_answers_are_cut_at_the_range_end():
    body = _records([5, 6, 9, 12])
    assert RangePuller.keep_below(body, 100) == (body, 4)
    kept, count = RangePuller.keep_below(body, 10)
    assert count == 3 and kept == body[:len(_records([5, 6, 9]))]
    assert RangePuller.keep_below(body, 5) == (b"", 0)
    assert RangePuller.keep_below(b"", 5) == (b"", 0)


@pytest.mark.parametrize("expression", ["*", 'TagA || "TagB"', "QOFFSETMARKQ"])
def test_a_spliced_pull_frame_equals_the_encoded_command(expression):
    from protocol.codes import RequestCode
    from protocol.command import RemotingCommand, encode_command
    from spark_export.cluster.remote import ClusterClient, PullFrames

    with ClusterClient(_opts(subExpression=expression)) as client:
        fields = client._pull_fields(B0, 0, 0)
        frames = PullFrames.make(fields)
        if expression == "QOFFSETMARKQ":  # a marker inside a fixed value: no template, the command is built
            assert frames is None
            return
        for offset, count, opaque in ((0, 1, 1), (123_456_789_012, 852, 2_147_483_647)):
            command = RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=opaque,
                                      ext_fields=client._pull_fields(B0, offset, count))
            assert frames.frame(offset, count, opaque) == encode_command(command)
