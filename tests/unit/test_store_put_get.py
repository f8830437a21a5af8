"""MessageStore put/get: record bytes, file rolling, BLANK markers, statuses, caps, queries."""

from __future__ import annotations

import os
import struct

import pytest

from protocol.hashing import tags_code
from protocol.ids import offset_msg_id, pack_host
from protocol.message import BLANK_MAGIC, decode_record, encode_record, iter_records

from broker.store import GetStatus, PutStatus
from broker.store.consume_queue import UNIT_SIZE

from tests.support.store import BORN_HOST, CL_SIZE, CQ_UNITS, STORE_HOST, FakeClock, make_msg, open_store, small_config

FRAME4_RECORD = bytes.fromhex(
    "000000e5daa320a777d18982000000000000000000000000000000000000000000000000000000000000018bcfe56800c0a8000a"
    "0000d4310000018bcfe5687bc0a8001400002a9f0000000000000000000000000000000548656c6c6f09546f7069635465737400"
    "7c4d53475f524547494f4e0144656661756c74526567696f6e0254524143455f4f4e017472756502554e49515f4b455901433041"
    "383030304133303339313842344141433230424542433230303030303002434c55535445520144656661756c74436c7573746572"
    "025741495401747275650254414753015461674102")
FRAME4_PROPS = ("MSG_REGION\x01DefaultRegion\x02TRACE_ON\x01true\x02UNIQ_KEY\x01C0A8000A303918B4AAC20BEBC2000000\x02"
                "CLUSTER\x01DefaultCluster\x02WAIT\x01true\x02TAGS\x01TagA\x02")


def records_of(result) -> list:
    return list(iter_records(result.body()))


async def drain(store, topic="TopicTest", queue_id=0, offset=0, batch=32):
    out = []
    for _ in range(10_000):
        g = store.get_messages(topic, queue_id, offset, batch)
        if g.status is not GetStatus.FOUND:
            return out, g
        out.extend(records_of(g))
        offset = g.next_begin_offset
    raise AssertionError("drain did not finish")


async def test_record_bytes_match_wire_vector(tmp_path):
    store = open_store(tmp_path, clock=FakeClock(1_700_000_000_123))
    msg = make_msg(0, body=b"Hello")
    msg.properties = FRAME4_PROPS
    msg.uniq_key = "C0A8000A303918B4AAC20BEBC2000000"
    r = await store.put_message(msg)
    assert r.status is PutStatus.PUT_OK
    assert (r.physical_offset, r.queue_offset, r.wrote_bytes) == (0, 0, 229)
    assert r.msg_ids == ["C0A8001400002A9F0000000000000000"]
    with open(tmp_path / "commitlog" / "00000000000000000000", "rb") as f:
        assert f.read(229) == FRAME4_RECORD
    with open(tmp_path / "consumequeue" / "TopicTest" / "0" / "00000000000000000000", "rb") as f:
        assert f.read(20) == bytes.fromhex("0000000000000000000000e5000000000027a807")
    g = store.get_messages("TopicTest", 0, 0, 32)
    assert g.status is GetStatus.FOUND and g.body() == FRAME4_RECORD
    assert (g.next_begin_offset, g.min_offset, g.max_offset) == (1, 0, 1)
    assert store.look_message_by_offset(0) == FRAME4_RECORD
    store.close()


async def test_fast_path_equals_reference_packer_and_slow_path(tmp_path):
    """The inlined IPv4 packer must produce exactly what protocol.message.pack_record_into does."""
    clock = FakeClock()
    store = open_store(tmp_path, clock=clock)
    msgs = [make_msg(i, body=b"x" * i, keys="k%d other" % i) for i in range(20)]
    r = await store.put_messages(msgs)
    v6 = make_msg(99, born_host=pack_host("::1", 7))
    r6 = await store.put_message(v6)
    assert r6.status is PutStatus.PUT_OK
    for i, (m, phys) in enumerate(zip(msgs, r.physical_offsets)):
        expected = encode_record(
            queue_id=0, flag=0, queue_offset=i, physical_offset=phys, sys_flag=0, born_timestamp=m.born_timestamp,
            born_host=BORN_HOST, store_timestamp=clock.now, store_host=STORE_HOST, reconsume_times=0,
            prepared_transaction_offset=0, body=m.body, topic=b"TopicTest", properties=m.properties.encode())
        assert store.look_message_by_offset(phys) == expected
    rec6 = decode_record(store.look_message_by_offset(r6.physical_offset))
    assert rec6.born_host == ("::1", 7) and rec6.sys_flag & 0x10 and rec6.queue_offset == 20
    store.close()


async def test_round_trip_across_files_with_blank_markers(tmp_path):
    store = open_store(tmp_path)
    bodies = [os.urandom(100 + (i * 37) % 900) for i in range(600)]
    for start in range(0, 600, 7):  # mix of batches and single puts
        chunk = [make_msg(i, body=bodies[i]) for i in range(start, min(600, start + 7))]
        r = await (store.put_messages(chunk) if len(chunk) > 1 else store.put_message(chunk[0]))
        assert r.status is PutStatus.PUT_OK and r.queue_offset == start
    files = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(files) > 5 and all(int(n) % CL_SIZE == 0 for n in files)
    # every full file ends with a BLANK marker covering exactly the remaining bytes
    for name in files[:-1]:
        data = (tmp_path / "commitlog" / name).read_bytes()
        pos = 0
        while True:
            size, magic = struct.unpack_from(">ii", data, pos)
            if magic == BLANK_MAGIC:
                assert size == CL_SIZE - pos and size >= 8
                assert data[pos + 8:] == bytes(len(data) - pos - 8)
                break
            pos += size
    recs, last = await drain(store)
    assert last.status is GetStatus.OFFSET_OVERFLOW_ONE and last.next_begin_offset == 600
    assert [r.body for r in recs] == bodies
    assert [r.queue_offset for r in recs] == list(range(600))
    for r in recs:  # PHYSICALOFFSET is global and points at the record itself
        assert store.look_message_by_offset(r.physical_offset)[:8] == struct.pack(">i", r.total_size) + \
            struct.pack(">i", r.magic)
    store.close()


async def test_batch_put_consecutive_offsets_and_single_notification(tmp_path):
    store = open_store(tmp_path)
    calls = []
    store.add_arrival_listener(lambda *args: calls.append(args))
    await store.put_message(make_msg(0))
    r = await store.put_messages([make_msg(i, tag="T%d" % i) for i in range(1, 6)])
    assert (r.count, r.queue_offset) == (5, 1)
    assert len(r.msg_ids) == 5 and r.msg_ids[0] == offset_msg_id(STORE_HOST, r.physical_offset)
    assert calls == [("TopicTest", 0, 1, tags_code("TagA")),
                     ("TopicTest", 0, 6, [tags_code("T%d" % i) for i in range(1, 6)])]
    g = store.get_messages("TopicTest", 0, 0, 32)
    assert g.message_count == 6 and len(g.buffers) == 1  # contiguous records -> one slice
    assert store.topics_and_queues() == {"TopicTest": [0]}
    store.close()


async def test_get_caps_and_cq_file_boundary(tmp_path):
    store = open_store(tmp_path)
    for start in range(0, 260, 20):
        await store.put_messages([make_msg(i, body=b"z" * 50) for i in range(start, start + 20)])
    g = store.get_messages("TopicTest", 0, 0, 10)
    assert (g.message_count, g.next_begin_offset) == (10, 10)
    size = len(records_of(g)[0].body) and g.buffer_total_size // 10
    g = store.get_messages("TopicTest", 0, 0, 32, max_bytes=size * 3 + 1)
    assert (g.message_count, g.next_begin_offset) == (3, 3)
    g = store.get_messages("TopicTest", 0, 5, 32, max_bytes=1)  # the first message always goes out
    assert (g.message_count, g.next_begin_offset) == (1, 6)
    g = store.get_messages("TopicTest", 0, CQ_UNITS - 5, 32)  # never crosses a CQ file
    assert (g.message_count, g.next_begin_offset) == (5, CQ_UNITS)
    g = store.get_messages("TopicTest", 0, CQ_UNITS, 32)
    assert records_of(g)[0].queue_offset == CQ_UNITS
    store.close()


async def test_tag_filter_scan_cap_and_statuses(tmp_path):
    store = open_store(tmp_path, mapped_file_size_consume_queue=2000 * 20)
    for start in range(0, 1000, 100):
        await store.put_messages([make_msg(i, tag="B" if i != 950 else "A") for i in range(start, start + 100)])
    want = tags_code("A")
    g = store.get_messages("TopicTest", 0, 0, 32, tag_filter=lambda t: t == want)
    assert g.status is GetStatus.NO_MATCHED_MESSAGE and g.next_begin_offset == 800  # scan cap max(800, 32)
    g = store.get_messages("TopicTest", 0, 800, 32, tag_filter=lambda t: t == want)
    assert g.status is GetStatus.FOUND and g.message_count == 1 and g.next_begin_offset == 1000
    assert records_of(g)[0].queue_offset == 950
    g = store.get_messages("TopicTest", 0, 0, 900, tag_filter=lambda t: t == want)
    assert (g.status, g.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 900)  # scan cap max(800, 900)
    g = store.get_messages("TopicTest", 0, 0, 960, tag_filter=lambda t: t == want)
    assert (g.status, g.message_count, g.next_begin_offset) == (GetStatus.FOUND, 1, 960)
    # record filter sees the raw record
    g = store.get_messages("TopicTest", 0, 0, 5, record_filter=lambda rec: decode_record(rec).queue_offset % 2 == 1)
    assert [r.queue_offset for r in records_of(g)] == [1, 3, 5, 7, 9]
    store.close()


async def test_offset_statuses(tmp_path):
    store = open_store(tmp_path)
    g = store.get_messages("Nope", 0, 5, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0)
    store.get_or_create_consume_queue("Empty", 0)
    g = store.get_messages("Empty", 0, 3, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0)
    await store.put_messages([make_msg(i) for i in range(10)])
    g = store.get_messages("TopicTest", 0, 10, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 10)
    g = store.get_messages("TopicTest", 0, 25, 32)
    assert (g.status, g.next_begin_offset, g.max_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 10, 10)
    cq = store.get_consume_queue("TopicTest", 0)
    cq.min_offset = 4  # as after retention
    g = store.get_messages("TopicTest", 0, 1, 32)
    assert (g.status, g.next_begin_offset, g.min_offset) == (GetStatus.OFFSET_TOO_SMALL, 4, 4)
    store.close()


async def test_offset_found_null_and_message_was_removing(tmp_path):
    store = open_store(tmp_path)
    for start in range(0, 450, 50):
        await store.put_messages([make_msg(i, body=b"q" * 400) for i in range(start, start + 50)])
    cq = store.get_consume_queue("TopicTest", 0)
    # a CQ file missing in the middle of the valid range
    missing = cq.mfq.files.pop(1)
    g = store.get_messages("TopicTest", 0, CQ_UNITS + 3, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_FOUND_NULL, 2 * CQ_UNITS)
    cq.mfq.files.insert(1, missing)
    # CQ units pointing at deleted commit-log data (min offset not corrected yet)
    cl_files = store.commit_log.mfq
    for mf in cl_files.remove_first(2):
        mf.destroy()
    g = store.get_messages("TopicTest", 0, 0, 32)
    assert g.status is GetStatus.MESSAGE_WAS_REMOVING and g.next_begin_offset == 32
    cq.correct_min_offset(store.commit_log.min_offset)
    assert cq.min_offset > 0
    g = store.get_messages("TopicTest", 0, 0, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, cq.min_offset)
    g = store.get_messages("TopicTest", 0, cq.min_offset, 1)
    assert records_of(g)[0].physical_offset >= store.commit_log.min_offset
    store.close()


async def test_validation_errors(tmp_path):
    store = open_store(tmp_path, max_message_size=1000)
    r = await store.put_message(make_msg(0, body=b"x" * 1001))
    assert r.status is PutStatus.MESSAGE_ILLEGAL and "maxMessageSize" in r.remark
    big_props = make_msg(1)
    big_props.properties = "K\x01" + "v" * 40000 + "\x02"
    assert (await store.put_message(big_props)).status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert (await store.put_messages([])).status is PutStatus.MESSAGE_ILLEGAL
    assert store.get_max_offset("TopicTest", 0) == 0
    store.close()


async def test_long_topic_uses_v2_magic(tmp_path):
    store = open_store(tmp_path)
    topic = "%RETRY%" + "g" * 150
    r = await store.put_message(make_msg(0, topic=topic))
    assert r.status is PutStatus.PUT_OK
    rec = decode_record(store.look_message_by_offset(r.physical_offset))
    assert rec.topic == topic and rec.magic == -626843477
    assert records_of(store.get_messages(topic, 0, 0, 1))[0].topic == topic
    store.close()


async def test_transactions_and_schedule_topic(tmp_path):
    clock = FakeClock()
    store = open_store(tmp_path, clock=clock)
    prepared = await store.put_message(make_msg(0, sys_flag=0x4))
    assert prepared.status is PutStatus.PUT_OK and prepared.queue_offset == 0
    assert store.get_max_offset("TopicTest", 0) == 0  # half messages are not consumable
    assert decode_record(store.look_message_by_offset(prepared.physical_offset)).queue_offset == 0
    committed = await store.put_message(make_msg(1, sys_flag=0x8))
    assert committed.queue_offset == 0 and store.get_max_offset("TopicTest", 0) == 1
    await store.put_message(make_msg(2, topic="SCHEDULE_TOPIC_XXXX", queue_id=2, extra={"DELAY": "3"}))
    unit = store.get_consume_queue("SCHEDULE_TOPIC_XXXX", 2).get_unit(0)
    assert unit[2] == clock.now + 10_000  # tagsCode = deliver time (level 3 = 10s)
    store.close()


async def test_millisecond_delay_levels(tmp_path):
    """messageDelayLevel accepts "ms" like broker.conf (e.g. short levels in tests)."""
    clock = FakeClock()
    store = open_store(tmp_path, clock=clock, message_delay_level="100ms 250ms 1s 2m 1h 1d")
    assert store.delay_levels_ms == [100, 250, 1000, 120_000, 3_600_000, 86_400_000]
    await store.put_message(make_msg(0, topic="SCHEDULE_TOPIC_XXXX", queue_id=1, extra={"DELAY": "2"}))
    assert store.get_consume_queue("SCHEDULE_TOPIC_XXXX", 1).get_unit(0)[2] == clock.now + 250
    store.close()
    with pytest.raises(ValueError):
        small_config(tmp_path, message_delay_level="1x").delay_levels_ms()


async def test_query_message_by_key_and_uniq_key(tmp_path):
    clock = FakeClock()
    store = open_store(tmp_path, clock=clock, max_index_num=30)  # forces index file rollover
    uniqs = []
    for i in range(60):
        m = make_msg(i, keys="order-%d shared" % i)
        uniqs.append(m.uniq_key)
        await store.put_message(m)
        clock.now += 1000
    assert len(os.listdir(tmp_path / "index")) > 2
    res = store.query_message("TopicTest", "order-7", 32, 0, 2**62)
    assert len(res.records) == 1 and decode_record(res.records[0]).keys == ["order-7", "shared"]
    res = store.query_message("TopicTest", uniqs[42], 32, 0, 2**62)
    assert [decode_record(r).uniq_key for r in res.records] == [uniqs[42]]
    res = store.query_message("TopicTest", "shared", 10, 0, 2**62)
    assert len(res.records) == 10
    assert res.index_last_update_timestamp == clock.now - 1000
    assert res.index_last_update_phyoffset == store.commit_log_max_offset - len(res.records[0])
    assert store.query_message("Other", "order-7", 32, 0, 2**62).records == []
    # time window (index entries have second resolution)
    res = store.query_message("TopicTest", "shared", 100, 1_700_000_010_000, 1_700_000_019_999)
    assert sorted(decode_record(r).queue_offset for r in res.records) == list(range(10, 20))
    # hash collision: same Java hash, different key -> filtered out
    await store.put_message(make_msg(100, keys="Aa"))
    await store.put_message(make_msg(101, keys="BB"))
    res = store.query_message("TopicTest", "BB", 32, 0, 2**62)
    assert [decode_record(r).keys for r in res.records] == [["BB"]]
    store.close()


async def test_delete_topic(tmp_path):
    store = open_store(tmp_path)
    await store.put_messages([make_msg(i, queue_id=1) for i in range(3)])
    store.delete_topic("TopicTest")
    assert not os.path.exists(tmp_path / "consumequeue" / "TopicTest")
    assert store.get_messages("TopicTest", 1, 0, 32).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    r = await store.put_message(make_msg(9, queue_id=1))
    assert r.queue_offset == 0
    store.close()


def test_unit_size_constant():
    assert UNIT_SIZE == 20
