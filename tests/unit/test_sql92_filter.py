"""Broker filter plumbing around the SQL92 evaluator: raw-record property reading, MessageFilter,
retry-topic filtering, consumerFilter.json, and long-poll wake-up checks."""

from __future__ import annotations

import time

import pytest

from broker.filter import (
    MessageFilter,
    SelectorError,
    UnsupportedExpressionType,
    build_filter,
    record_properties,
    retry_filter,
)
from broker.filter.tags import parse_tag_expression, tags_of_expression
from broker.long_polling import HeldPull
from broker.managers.consumer_filter import DEAD_ENTRY_TTL_MS, ConsumerFilterManager
from protocol.hashing import java_string_hash
from protocol.ids import pack_host
from protocol.message import encode_record
from protocol.properties import encode_properties


def _record(props: dict[str, str], *, topic: str = "T", body: bytes = b"body", v6: bool = False) -> bytes:
    host = pack_host("::1", 10911) if v6 else pack_host("127.0.0.1", 10911)
    return encode_record(queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0, born_timestamp=1,
                         born_host=host, store_timestamp=2, store_host=host, reconsume_times=0,
                         prepared_transaction_offset=0, body=body, topic=topic.encode(),
                         properties=encode_properties(props).encode())


@pytest.mark.parametrize("topic,v6", [("T", False), ("T" * 200, False), ("T", True)])
def test_record_properties_reads_only_the_properties(topic: str, v6: bool) -> None:
    props = {"TAGS": "TagA", "a": "2", "KEYS": "k1 k2", "UNIQ_KEY": "U1"}
    raw = _record(props, topic=topic, v6=v6, body=b"\x01\x02" * 1000)
    assert record_properties(raw) == props
    assert record_properties(memoryview(raw)) == props
    assert record_properties(_record({})) == {}


def test_selector_matches_raw_records() -> None:
    selector = build_filter("SQL92", "a BETWEEN 1 AND 3 AND TAGS = 'TagA'").selector
    assert selector.matches_record(_record({"TAGS": "TagA", "a": "2"}))
    assert not selector.matches_record(_record({"TAGS": "TagA", "a": "4"}))
    assert not selector.matches_record(b"\x00" * 10)  # malformed record: no match, no exception


def test_build_filter() -> None:
    assert build_filter("TAG", "*") is None
    assert build_filter(None, "") is None
    assert build_filter("tag", "  ") is None
    tag_filter = build_filter("TAG", " TagA || TagB ||  ")
    assert tag_filter.tag_codes == {java_string_hash("TagA"), java_string_hash("TagB")}
    assert tag_filter.tag_filter(java_string_hash("TagB")) and not tag_filter.tag_filter(0)
    assert tag_filter.record_filter is None
    sql = build_filter("sql92", "a > 1")
    assert sql.tag_filter is None and sql.record_filter is not None
    with pytest.raises(SelectorError):
        build_filter("SQL92", "a >")
    with pytest.raises(UnsupportedExpressionType):
        build_filter("CLASS", "x")


def test_tag_expression_parsing() -> None:
    assert parse_tag_expression(None) is None
    assert parse_tag_expression(" * ") is None
    assert parse_tag_expression("A||B") == {java_string_hash("A"), java_string_hash("B")}
    assert tags_of_expression(" A || B ||") == ["A", "B"]
    assert tags_of_expression("*") == []


def test_matches_properties_combines_stages() -> None:
    tags = MessageFilter(tag_codes=frozenset({java_string_hash("A")}))
    assert tags.matches_properties({"TAGS": "A"})
    assert not tags.matches_properties({"TAGS": "B"})
    assert not tags.matches_properties({})  # no tag: only '*' matches
    sql = build_filter("SQL92", "a = 'x'")
    assert sql.matches_properties({"a": "x"}) and not sql.matches_properties({})


def test_retry_filter_uses_the_original_topics_filter() -> None:
    filters = {"Orders": build_filter("SQL92", "a > 2"), "Tagged": build_filter("TAG", "A")}
    retry = retry_filter(filters.get)
    assert retry.tag_filter is None
    check = retry.record_filter
    assert check(_record({"RETRY_TOPIC": "Orders", "a": "3"}, topic="%RETRY%g"))
    assert not check(_record({"RETRY_TOPIC": "Orders", "a": "1"}, topic="%RETRY%g"))
    assert not check(_record({"RETRY_TOPIC": "Orders"}, topic="%RETRY%g"))
    assert check(_record({"RETRY_TOPIC": "Tagged", "TAGS": "A"}, topic="%RETRY%g"))
    assert not check(_record({"RETRY_TOPIC": "Tagged", "TAGS": "B"}, topic="%RETRY%g"))
    assert check(_record({"RETRY_TOPIC": "Unfiltered"}, topic="%RETRY%g"))  # no filter known: deliver
    assert check(_record({"a": "1"}, topic="%RETRY%g"))  # not a retried message


def test_consumer_filter_manager_persists(tmp_path) -> None:
    manager = ConsumerFilterManager(str(tmp_path))
    assert manager.register("g", "T", "TagA", "TAG", 1) is None  # TAG filters are not kept
    data = manager.register("g", "T", "a > 1", "SQL92", 5)
    assert data.error is None and data.message_filter.selector.evaluate({"a": "2"})
    broken = manager.register("g", "U", "a LIKE 'x'", "SQL92", 5)
    assert "unexpected 'LIKE'" in broken.error and broken.message_filter is None
    assert manager.register("g", "T", "a > 9", "SQL92", 4) is data  # an older version does not win
    newer = manager.register("g", "T", "a > 9", "SQL92", 6)
    assert manager.get("T", "g") is newer and newer.expression == "a > 9"
    manager.persist()
    assert (tmp_path / "consumerFilter.json").exists()

    loaded = ConsumerFilterManager(str(tmp_path))
    assert loaded.load()
    again = loaded.get("T", "g")
    assert (again.expression, again.expression_type, again.client_version) == ("a > 9", "SQL92", 6)
    assert loaded.get("U", "g").error is not None
    loaded.unregister("g", now_ms=1000)
    assert loaded.get("T", "g").is_dead
    assert loaded.clean_expired(now_ms=1000 + DEAD_ENTRY_TTL_MS + 1) == 2
    assert loaded.get("T", "g") is None
    revived = ConsumerFilterManager(str(tmp_path))
    revived.load()
    revived.unregister("g")
    assert revived.register("g", "T", "a > 9", "SQL92", 6).is_dead is False


class _Channel:
    closed = False


def test_held_pull_wakes_only_when_the_record_check_matches() -> None:
    held = HeldPull(_Channel(), None, None, "T", 0, 5, None)
    seen = []

    def check(h, max_offset, count):
        seen.append((max_offset, count))
        return max_offset >= 8

    held.record_check = check
    assert not held.arrival_matches(5, 0)  # nothing new beyond the held offset
    assert not held.arrival_matches(6, 0)
    assert held.arrival_matches(8, [0, 0])
    assert seen == [(6, 1), (8, 2)]
    tagged = HeldPull(_Channel(), None, None, "T", 0, 5, {7}.__contains__)
    assert not tagged.arrival_matches(6, 3) and tagged.arrival_matches(6, [1, 7])


def test_record_evaluation_rate_is_reported() -> None:
    """Whole candidate path: read properties from the raw record, then evaluate."""
    selector = build_filter("SQL92", "(TAGS is not null and TAGS in ('TagA', 'TagB')) and "
                                     "(a is not null and a between 0 and 3)").selector
    records = [memoryview(_record({"TAGS": ("TagA", "TagC")[i % 2], "a": str(i % 5), "KEYS": f"k{i}",
                                   "UNIQ_KEY": f"7F0000010001{i:020d}"}, body=b"x" * 512)) for i in range(500)]
    start = time.perf_counter()
    rounds = 20
    matched = 0
    for _ in range(rounds):
        for record in records:
            matched += selector.matches_record(record)
    rate = rounds * len(records) / (time.perf_counter() - start)
    print(f"SQL92 record checks per second (properties decoded from raw records): {rate:,.0f}")
    assert matched == rounds * 200
    assert rate > 20_000
