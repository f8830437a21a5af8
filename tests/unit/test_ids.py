"""Host packing, offset message ids and UNIQ_KEY generation."""

import time

import pytest
from hypothesis import given, settings, strategies as st

from protocol.ids import UniqKeyGenerator, _month_bounds_ms, decode_offset_msg_id, offset_msg_id, pack_host, unpack_host


def test_pack_host_ipv4():
    assert pack_host("192.168.0.20", 10911) == bytes.fromhex("c0a8001400002a9f")
    assert unpack_host(bytes.fromhex("c0a8001400002a9f"), 0, False) == ("192.168.0.20", 10911)


def test_pack_host_ipv6():
    packed = pack_host("2001:db8::1", 10911)
    assert len(packed) == 20
    assert packed == bytes.fromhex("20010db8000000000000000000000001") + bytes.fromhex("00002a9f")
    assert unpack_host(b"xx" + packed, 2, True) == ("2001:db8::1", 10911)


def test_pack_host_ipv4_mapped_is_ipv4():
    assert pack_host("::ffff:127.0.0.1", 9876) == pack_host("127.0.0.1", 9876)


def test_unpack_host_truncated():
    with pytest.raises(ValueError):
        unpack_host(b"\x00" * 7, 0, False)


def test_offset_msg_id_example():
    assert offset_msg_id(pack_host("192.168.0.20", 10911), 0) == "C0A8001400002A9F0000000000000000"
    assert decode_offset_msg_id("C0A8001400002A9F0000000000000000") == ("192.168.0.20", 10911, 0)
    assert decode_offset_msg_id("c0a8001400002a9f0000000000000000") == ("192.168.0.20", 10911, 0)


def test_offset_msg_id_ipv6():
    msg_id = offset_msg_id(pack_host("fe80::1", 10911), 1234567)
    assert len(msg_id) == 56 and msg_id == msg_id.upper()
    assert decode_offset_msg_id(msg_id) == ("fe80::1", 10911, 1234567)


@pytest.mark.parametrize("bad", ["", "C0A8", "Z" * 32, "C0A8001400002A9F000000000000000", "0" * 40, None, 123])
def test_decode_offset_msg_id_malformed(bad):
    with pytest.raises(ValueError):
        decode_offset_msg_id(bad)


@settings(max_examples=200, deadline=None)
@given(st.ip_addresses(), st.integers(0, 65535), st.integers(0, 2**63 - 1))
def test_offset_msg_id_round_trip(ip, port, offset):
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    msg_id = offset_msg_id(pack_host(str(ip), port), offset)
    assert len(msg_id) == (32 if ip.version == 4 else 56)
    assert decode_offset_msg_id(msg_id) == (str(ip), port, offset)


def test_uniq_key_layout():
    gen = UniqKeyGenerator("192.168.0.10", 12345, salt=0x18B4AAC2)
    assert gen.prefix == "C0A8000A303918B4AAC2"
    first, second = gen.next(), gen.next()
    assert len(first) == 32 and first == first.upper()
    assert first.startswith("C0A8000A303918B4AAC2")
    assert first.endswith("0000") and second.endswith("0001")
    # ms since month start, local time
    month_start, _ = _month_bounds_ms(time.time())
    elapsed = int(first[20:28], 16)
    assert abs((month_start + elapsed) - time.time() * 1000) < 5000


def test_uniq_key_pid_low_16_bits_and_ipv6():
    gen = UniqKeyGenerator("::1", 0x12345, salt=1)
    key = gen.next()
    assert len(key) == 56
    assert key[32:36] == "2345"
    assert key[36:44] == "00000001"


def test_uniq_key_counter_wraps():
    gen = UniqKeyGenerator("127.0.0.1", 1, salt=2)
    gen._counter = 0xFFFF
    assert gen.next().endswith("FFFF")
    assert gen.next().endswith("0000")


def test_uniq_key_unique_and_month_rollover():
    now = [time.mktime((2024, 1, 31, 23, 59, 59, 0, 0, -1)) + 0.5]
    gen = UniqKeyGenerator("127.0.0.1", 1, salt=2, clock=lambda: now[0])
    before = gen.next()
    assert int(before[20:28], 16) == (30 * 86400 + 86399) * 1000 + 500
    now[0] = time.mktime((2024, 2, 1, 0, 0, 1, 0, 0, -1))
    after = gen.next()
    assert int(after[20:28], 16) == 1000
    keys = {gen.next() for _ in range(1000)}
    assert len(keys) == 1000


def test_uniq_key_elapsed_wraps_like_java_int():
    # 31-day month: up to 2.678e9 ms, more than int32 max; Java writes (int) -> low 32 bits.
    now = time.mktime((2024, 3, 31, 23, 0, 0, 0, 0, -1))
    gen = UniqKeyGenerator("127.0.0.1", 1, salt=2, clock=lambda: now)
    elapsed = (30 * 86400 + 23 * 3600) * 1000
    assert int(gen.next()[20:28], 16) == elapsed & 0xFFFFFFFF
