"""Commit-log record codec against the wire-examples.md vector, plus round trips and robustness."""

import os
import zlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from protocol.ids import pack_host
from protocol.message import (
    BLANK_MAGIC,
    BORNHOST_V6_FLAG,
    MAGIC_V1,
    MAGIC_V2,
    STOREHOST_V6_FLAG,
    MessageRecord,
    RecordError,
    body_crc,
    check_record,
    record_names_problem_at,
    decode_record,
    encode_record,
    iter_records,
    pack_blank_marker_into,
    pack_record_into,
    record_size,
)
from protocol.names import record_names_problem

# wire-examples.md Frame 4 body (bytes 0x00fd-0x01e1): the CommitLog record at file position 0.
FRAME4_RECORD = bytes.fromhex(
    "000000e5daa320a777d18982000000000000000000000000000000000000000000000000000000000000018bcfe56800"
    "c0a8000a0000d4310000018bcfe5687bc0a8001400002a9f0000000000000000000000000000000548656c6c6f09546f"
    "70696354657374007c4d53475f524547494f4e0144656661756c74526567696f6e0254524143455f4f4e017472756502"
    "554e49515f4b455901433041383030304133303339313842344141433230424542433230303030303002434c55535445"
    "520144656661756c74436c7573746572025741495401747275650254414753015461674102"
)
FRAME4_PROPS = (
    b"MSG_REGION\x01DefaultRegion\x02TRACE_ON\x01true\x02UNIQ_KEY\x01C0A8000A303918B4AAC20BEBC2000000\x02"
    b"CLUSTER\x01DefaultCluster\x02WAIT\x01true\x02TAGS\x01TagA\x02"
)


def frame4_fields(**overrides):
    fields = dict(
        queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0, born_timestamp=1700000000000,
        born_host=pack_host("192.168.0.10", 54321), store_timestamp=1700000000123,
        store_host=pack_host("192.168.0.20", 10911), reconsume_times=0, prepared_transaction_offset=0,
        body=b"Hello", topic=b"TopicTest", properties=FRAME4_PROPS,
    )
    fields.update(overrides)
    return fields


def test_frame4_record_bytes_exact():
    assert len(FRAME4_RECORD) == 229
    buf = bytearray(300)
    size = pack_record_into(buf, 10, **frame4_fields())
    assert size == 229 == record_size(5, 9, 124, False, False)
    assert bytes(buf[10 : 10 + size]) == FRAME4_RECORD
    assert encode_record(**frame4_fields()) == FRAME4_RECORD


def test_frame4_record_decodes_every_field():
    rec = decode_record(FRAME4_RECORD)
    assert rec.total_size == 229
    assert rec.magic == MAGIC_V1
    assert rec.body_crc == 0x77D18982 == body_crc(b"Hello")
    assert rec.queue_id == 0 and rec.flag == 0 and rec.queue_offset == 0 and rec.physical_offset == 0
    assert rec.sys_flag == 0
    assert rec.born_timestamp == 1700000000000
    assert rec.born_host == ("192.168.0.10", 54321)
    assert rec.store_timestamp == 1700000000123
    assert rec.store_host == ("192.168.0.20", 10911)
    assert rec.reconsume_times == 0 and rec.prepared_transaction_offset == 0
    assert rec.body == b"Hello"
    assert rec.topic == "TopicTest"
    assert rec.properties == {
        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true", "UNIQ_KEY": "C0A8000A303918B4AAC20BEBC2000000",
        "CLUSTER": "DefaultCluster", "WAIT": "true", "TAGS": "TagA",
    }
    assert rec.raw_properties == FRAME4_PROPS
    assert rec.tags == "TagA"
    assert rec.keys == []
    assert rec.uniq_key == rec.msg_id == "C0A8000A303918B4AAC20BEBC2000000"
    assert rec.offset_msg_id == "C0A8001400002A9F0000000000000000"
    assert rec.transaction_type == 0


def test_frame4_check_record_and_iter():
    assert check_record(FRAME4_RECORD, 0, len(FRAME4_RECORD)) == 229
    assert check_record(memoryview(FRAME4_RECORD), 0, 229, verify_crc=True) == 229
    assert [r.topic for r in iter_records(FRAME4_RECORD * 3)] == ["TopicTest"] * 3
    assert list(iter_records(b"")) == []


def test_decode_from_bytearray_mmap_like_and_offset():
    buf = bytearray(1000)
    buf[100:329] = FRAME4_RECORD
    assert decode_record(buf, 100).body == b"Hello"
    assert decode_record(memoryview(buf), 100).uniq_key == "C0A8000A303918B4AAC20BEBC2000000"
    assert list(iter_records(memoryview(FRAME4_RECORD)))[0].topic == "TopicTest"


def test_decode_without_properties():
    rec = decode_record(FRAME4_RECORD, decode_properties=False)
    assert rec.properties == {} and rec.raw_properties == FRAME4_PROPS
    assert rec.decode_properties()["TAGS"] == "TagA"
    assert rec.tags == "TagA"


def test_ipv6_hosts_set_flags_and_shift_layout():
    born = pack_host("2001:db8::10", 5555)
    store = pack_host("2001:db8::20", 10911)
    for b_host, s_host, flags in [
        (born, store, BORNHOST_V6_FLAG | STOREHOST_V6_FLAG),
        (born, pack_host("10.0.0.1", 10911), BORNHOST_V6_FLAG),
        (pack_host("10.0.0.2", 1), store, STOREHOST_V6_FLAG),
    ]:
        # sys_flag passed with the wrong V6 bits: the packer derives them from host lengths.
        raw = encode_record(**frame4_fields(born_host=b_host, store_host=s_host, sys_flag=0x30 ^ flags | 0x8))
        assert len(raw) == 229 + (12 if len(b_host) == 20 else 0) + (12 if len(s_host) == 20 else 0)
        assert len(raw) == record_size(5, 9, 124, len(b_host) == 20, len(s_host) == 20)
        rec = decode_record(raw)
        assert rec.sys_flag == flags | 0x8
        assert pack_host(*rec.born_host) == b_host and pack_host(*rec.store_host) == s_host
        assert rec.body == b"Hello" and rec.topic == "TopicTest" and rec.tags == "TagA"
        assert check_record(raw, 0, len(raw)) == len(raw)
        assert len(rec.offset_msg_id) == (56 if len(s_host) == 20 else 32)


def test_v2_magic_for_long_topic():
    topic = "%RETRY%" + "g" * 193
    assert len(topic) == 200
    raw = encode_record(**frame4_fields(topic=topic.encode()))
    assert int.from_bytes(raw[4:8], "big", signed=True) == MAGIC_V2
    assert len(raw) == record_size(5, 200, 124, False, False) == 229 - 9 + 200 + 1
    assert raw[93:95] == (200).to_bytes(2, "big")
    rec = decode_record(raw)
    assert rec.magic == MAGIC_V2 and rec.topic == topic and rec.tags == "TagA"
    assert check_record(raw, 0, len(raw)) == len(raw)


def test_topic_of_127_bytes_stays_v1():
    raw = encode_record(**frame4_fields(topic=b"t" * 127))
    assert int.from_bytes(raw[4:8], "big", signed=True) == MAGIC_V1
    assert decode_record(raw).topic == "t" * 127


def test_explicit_body_crc_kept():
    raw = encode_record(**frame4_fields(body_crc=12345))
    assert decode_record(raw).body_crc == 12345
    assert check_record(raw, 0, len(raw), verify_crc=False) == len(raw)
    assert check_record(raw, 0, len(raw), verify_crc=True) == 0


def test_pack_rejects_bad_inputs():
    with pytest.raises(ValueError):
        encode_record(**frame4_fields(born_host=b"\x00" * 6))
    with pytest.raises(ValueError):
        encode_record(**frame4_fields(properties=b"x" * 32768))
    with pytest.raises(ValueError):
        encode_record(**frame4_fields(topic=b"x" * 32768))


def test_check_record_end_conditions():
    zeros = bytes(4096)
    assert check_record(zeros, 0, 4096) == 0
    blank = bytearray(4096)
    pack_blank_marker_into(blank, 0, 4096)
    assert bytes(blank[:8]) == bytes.fromhex("00001000cbd43194")
    assert int.from_bytes(blank[4:8], "big", signed=True) == BLANK_MAGIC
    assert check_record(blank, 0, 4096) == -1
    # truncated by the limit
    assert check_record(FRAME4_RECORD, 0, 228) == 0
    assert check_record(FRAME4_RECORD, 0, 4) == 0
    # TOTALSIZE inconsistent with the fields
    bad = bytearray(FRAME4_RECORD + bytes(8))
    bad[0:4] = (237).to_bytes(4, "big")
    assert check_record(bad, 0, len(bad)) == 0
    # corrupted body -> CRC mismatch
    corrupt = bytearray(FRAME4_RECORD)
    corrupt[88] ^= 0xFF
    assert check_record(corrupt, 0, len(corrupt)) == 0
    assert check_record(corrupt, 0, len(corrupt), verify_crc=False) == 229
    # second record follows the first
    two = FRAME4_RECORD + FRAME4_RECORD + bytes(20)
    assert check_record(two, 229, len(two)) == 229
    assert check_record(two, 458, len(two)) == 0


def test_decode_errors():
    with pytest.raises(RecordError):
        decode_record(FRAME4_RECORD[:100])
    with pytest.raises(RecordError):
        decode_record(bytes(300))
    with pytest.raises(RecordError):
        list(iter_records(FRAME4_RECORD + FRAME4_RECORD[:50]))
    bad = bytearray(FRAME4_RECORD)
    bad[0:4] = (228).to_bytes(4, "big")
    with pytest.raises(RecordError):
        decode_record(bytes(bad))
    with pytest.raises(RecordError):
        decode_record(b"\x00\x00")
    with pytest.raises(RecordError):
        decode_record(bytearray(2))


host_st = st.one_of(
    st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).filter(lambda a: a.ipv4_mapped is None).map(str)
)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def record_fields(draw):
    props = draw(st.dictionaries(
        st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1,
                max_size=10),
        st.text(alphabet=st.characters(blacklist_characters="\x02", blacklist_categories=("Cs",)), min_size=1,
                max_size=20),
        max_size=6,
    ))
    topic = draw(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=150))
    return dict(
        queue_id=draw(int32), flag=draw(int32), queue_offset=draw(int64), physical_offset=draw(int64),
        sys_flag=draw(int32), born_timestamp=draw(int64),
        born_host=pack_host(draw(host_st), draw(st.integers(0, 65535))), store_timestamp=draw(int64),
        store_host=pack_host(draw(host_st), draw(st.integers(0, 65535))), reconsume_times=draw(int32),
        prepared_transaction_offset=draw(int64), body=draw(st.binary(max_size=300)),
        topic=topic.encode(), properties="".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode(),
    ), props


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_fields(), min_size=1, max_size=4))
def test_round_trip(items):
    raws = [encode_record(**fields) for fields, _ in items]
    decoded = list(iter_records(b"".join(raws)))
    assert len(decoded) == len(items)
    pos = 0
    joined = b"".join(raws)
    for (fields, props), raw, rec in zip(items, raws, decoded):
        legal = record_names_problem(fields["topic"], fields["queue_id"]) is None  # names become store paths
        assert check_record(joined, pos, len(joined)) == (len(raw) if legal else 0)
        assert (record_names_problem_at(joined, pos, len(joined)) is None) == legal
        assert decode_record(joined, pos) == rec
        pos += len(raw)
        assert isinstance(rec, MessageRecord)
        assert rec.total_size == len(raw)
        assert rec.magic == (MAGIC_V2 if len(fields["topic"]) > 127 else MAGIC_V1)
        v6 = (BORNHOST_V6_FLAG if len(fields["born_host"]) == 20 else 0) | (
            STOREHOST_V6_FLAG if len(fields["store_host"]) == 20 else 0)
        expected_flag = (fields["sys_flag"] & ~0x30) | v6
        assert rec.sys_flag == expected_flag
        for name in ("queue_id", "flag", "queue_offset", "physical_offset", "born_timestamp", "store_timestamp",
                     "reconsume_times", "prepared_transaction_offset", "body"):
            assert getattr(rec, name) == fields[name], name
        assert rec.body_crc == zlib.crc32(fields["body"]) & 0x7FFFFFFF
        assert pack_host(*rec.born_host) == fields["born_host"]
        assert pack_host(*rec.store_host) == fields["store_host"]
        assert rec.topic.encode() == fields["topic"]
        assert rec.properties == props


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400))
def test_garbage_raises_only_record_error(data):
    for candidate in (data, FRAME4_RECORD[:50] + data, data + FRAME4_RECORD):
        try:
            list(iter_records(candidate))
        except RecordError:
            pass
        try:
            decode_record(candidate)
        except RecordError:
            pass
        size = check_record(candidate, 0, len(candidate))
        assert size == -1 or 0 <= size <= len(candidate)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 228), st.integers(0, 255))
def test_corrupted_vector_raises_only_record_error(index, value):
    raw = bytearray(FRAME4_RECORD)
    raw[index] = value
    try:
        rec = decode_record(bytes(raw))
    except RecordError:
        return
    assert rec.total_size == 229
    size = check_record(raw, 0, len(raw))
    assert size in (0, 229)


def test_random_bytes_check_record_never_raises():
    noise = os.urandom(65536)
    for pos in range(0, len(noise) - 8, 97):
        size = check_record(noise, pos, len(noise))
        assert size == -1 or 0 <= size <= len(noise) - pos
