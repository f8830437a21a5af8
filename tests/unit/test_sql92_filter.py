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
from broker.managers.consumer_filter import DEAD_ENTRY_TTL_MS, ConsumerFilterManager
from protocol.hashing import java_string_hash
from protocol.ids import pack_host
from protocol.message import encode_record
from protocol.properties import encode_properties
from tests.support.broker_process import free_port as _free_port


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


async def test_held_pull_wakes_only_when_an_arrived_record_matches(tmp_path) -> None:
    """The held pull's arrival check (broker/core/consume.py): past its offset, a matching tag, and for SQL92 one of
    the records that just arrived must match."""
    from broker.core.arrivals import Arrivals
    from broker.core.consume import Puller, PullRequest
    from tests.support.store import make_msg, open_store

    store = open_store(tmp_path)
    try:
        puller = Puller(None, store, None, None, None, None, None, Arrivals())
        held = PullRequest("g", "T", 0, 5)
        sql = puller._arrival_matches(held, build_filter("SQL92", "a > 5"))
        for i in range(8):  # offsets 0..7: a = i
            await store.put_message(make_msg(i, topic="T", extra={"a": str(i)}))
        assert not sql(5, 0)  # nothing new beyond the held offset
        assert not sql(6, 0)  # offset 5: a = 5
        assert sql(7, [0, 0])  # offsets 5, 6: a = 6 matches
        tagged = puller._arrival_matches(held, build_filter("TAG", "TagB"))
        from protocol.hashing import tags_code
        assert not tagged(6, tags_code("TagA")) and tagged(6, [tags_code("TagA"), tags_code("TagB")])
        assert puller._arrival_matches(held, None)(6, 123)
    finally:
        await store.shutdown()


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


# ---- the pull processor takes SQL pulls one per loop turn ------------------------------------------------------
class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data) -> None:
        self.writes.append(bytes(data))

    def writelines(self, chunks) -> None:
        self.writes.append(b"".join(bytes(c) for c in chunks))

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 40000)

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass



def _opaques(transport: _Transport) -> list[int]:
    from protocol.frame import FrameDecoder

    return [cmd.opaque for cmd in FrameDecoder().feed(b"".join(transport.writes))]


async def test_sql_pulls_are_answered_one_per_loop_turn(tmp_path) -> None:
    """A burst of SQL pulls in one read: the cheap requests of the same read are answered at once, then one SQL
    answer per loop turn; at shutdown, pulls still waiting are answered, not dropped."""
    import asyncio

    from broker.broker import Broker
    from broker.config import BrokerConfig
    from broker.remoting_connection import ServerProtocol
    from protocol.codes import RequestCode
    from protocol.command import RemotingCommand, encode_command
    from protocol.frame import FrameDecoder
    from protocol.message import iter_records

    config = BrokerConfig(
        broker_name="defer", broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=_free_port(),
        namesrv_addr=None, enable_embedded_namesrv=False, enable_vip_channel=False, enable_property_filter=True,
        store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=20_000)
    instance = Broker(config)
    await instance.start()
    transport = _Transport()
    protocol = ServerProtocol(instance.server)
    protocol.connection_made(transport)

    def frame(opaque: int, code: int, fields: dict[str, str], body: bytes = b"") -> bytes:
        return encode_command(RemotingCommand.request(code, fields, body, opaque=opaque))

    def pull(opaque: int, sub: str, kind: str, offset: int = 0) -> bytes:
        return frame(opaque, RequestCode.PULL_MESSAGE, {
            "consumerGroup": "g", "topic": "Deferred", "queueId": "0", "queueOffset": str(offset),
            "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
            "subscription": sub, "subVersion": "0", "expressionType": kind})

    try:
        for i in range(8):
            protocol.data_received(frame(100 + i, RequestCode.SEND_MESSAGE_V2, {
                "a": "pg", "b": "Deferred", "c": "TBW102", "d": "1", "e": "0", "f": "0", "g": "1", "h": "0",
                "i": f"TAGS\x01Tag{'AB'[i % 2]}\x02a\x01{i}\x02", "j": "0", "k": "false", "m": "false"}, b"m%d" % i))
        await asyncio.sleep(0)
        assert len(_opaques(transport)) == 8
        transport.writes.clear()

        sql = "a BETWEEN 2 AND 5"
        protocol.data_received(pull(1, sql, "SQL92") + pull(2, sql, "SQL92", 3) + pull(3, "TagA", "TAG")
                               + pull(4, sql, "SQL92", 5))
        assert _opaques(transport) == [3]  # the tag pull, flushed with the read; the SQL pulls wait their turn
        seen = [3]
        for _ in range(10):
            await asyncio.sleep(0)
            seen = _opaques(transport)
        assert seen == [3, 1, 2, 4]
        answers = {cmd.opaque: cmd for cmd in FrameDecoder().feed(b"".join(transport.writes))}
        assert [r.body for r in iter_records(answers[1].body)] == [b"m2", b"m3", b"m4", b"m5"]
        assert [r.body for r in iter_records(answers[2].body)] == [b"m3", b"m4", b"m5"]
        assert [r.body for r in iter_records(answers[4].body)] == [b"m5"]
        assert [r.body for r in iter_records(answers[3].body)] == [b"m0", b"m2", b"m4", b"m6"]

        transport.writes.clear()
        protocol.data_received(pull(5, sql, "SQL92") + pull(6, sql, "SQL92", 8))  # 8: nothing there yet
        assert _opaques(transport) == []
        instance.processors.pull.release_all()
        await asyncio.sleep(0)
        assert sorted(_opaques(transport)) == [5, 6]
    finally:
        protocol.connection_lost(None)
        await instance.shutdown()
