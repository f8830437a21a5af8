"""FrameDecoder: incremental decoding, framing errors, bounded memory, fuzzing."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.codes import LanguageCode, SerializeType
from protocol.command import ProtocolError, RemotingCommand, encode_command
from protocol.frame import DEFAULT_MAX_FRAME_SIZE, REQUEST_MAX_HEADER_SIZE, FrameDecoder

FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def _frame(type_word: int, header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), type_word) + header + body


def _json_frame(header: str, body: bytes = b"") -> bytes:
    raw = header.encode()
    return _frame(len(raw), raw, body)


def _sample_commands() -> list[RemotingCommand]:
    return [
        RemotingCommand(34, opaque=1, ext_fields={}, body=b'{"clientID":"x"}'),
        RemotingCommand(310, opaque=2, ext_fields={"a": "g", "b": "T"}, body=b"Hello", serialize_type=1),
        RemotingCommand(11, opaque=3, flag=2, remark="r", serialize_type=2, ext_fields={"queueId": 3}),
        RemotingCommand(0, opaque=4, flag=1, body=b"x" * 5000),
    ]


# ---------------------------------------------------------------------------------------------
# basic behaviour


def test_feed_returns_commands_in_order():
    commands = _sample_commands()
    stream = b"".join(encode_command(c) for c in commands)
    decoded = FrameDecoder().feed(stream)
    assert [c.opaque for c in decoded] == [1, 2, 3, 4]
    assert decoded[1].serialize_type == SerializeType.ROCKETMQ
    assert decoded[2].ext_fields == {"queueId": 3}
    assert decoded[3].body == b"x" * 5000


def test_one_byte_at_a_time_equals_whole():
    stream = b"".join(encode_command(c) for c in _sample_commands())
    whole = FrameDecoder().feed(stream)
    decoder = FrameDecoder()
    got = []
    for i in range(len(stream)):
        got.extend(decoder.feed(stream[i : i + 1]))
    assert got == whole
    assert decoder.buffered == 0


def test_accepts_bytearray_and_memoryview():
    frame = encode_command(RemotingCommand(34, opaque=9))
    assert FrameDecoder().feed(bytearray(frame))[0].opaque == 9
    assert FrameDecoder().feed(memoryview(frame))[0].opaque == 9


def test_empty_feed():
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    decoder.feed(b"\x00\x00")
    assert decoder.feed(b"") == []
    assert decoder.buffered == 2


def test_body_is_independent_copy_of_input():
    data = bytearray(encode_command(RemotingCommand(1, opaque=1, body=b"abc")))
    (cmd,) = FrameDecoder().feed(data)
    data[-1] = ord("z")
    assert cmd.body == b"abc" and type(cmd.body) is bytes


def test_partial_then_rest_in_one_chunk_with_more_frames():
    a = encode_command(RemotingCommand(1, opaque=1, body=b"a" * 100))
    b = encode_command(RemotingCommand(2, opaque=2))
    decoder = FrameDecoder()
    assert decoder.feed(a[:50]) == []
    got = decoder.feed(a[50:] + b + b[:3])
    assert [c.opaque for c in got] == [1, 2]
    assert decoder.buffered == 3
    assert [c.opaque for c in decoder.feed(b[3:])] == [2]


# ---------------------------------------------------------------------------------------------
# errors


def test_length_above_maximum_fails_after_four_bytes():
    decoder = FrameDecoder(max_frame_size=1000)
    with pytest.raises(ProtocolError, match="exceeds the maximum"):
        decoder.feed(struct.pack(">i", 1001))


def test_default_maximum_is_16_mib():
    assert FrameDecoder().max_frame_size == DEFAULT_MAX_FRAME_SIZE == 16 * 1024 * 1024
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">i", 16 * 1024 * 1024 + 1))
    # a TLS ClientHello (first byte 0x16) is rejected immediately
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(bytes.fromhex("16030100c8010000c4"))


@pytest.mark.parametrize("length", [-1, 0, 3, -(2**31)])
def test_length_below_type_word_fails(length):
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">i", length))


def test_length_below_type_word_fails_when_buffered():
    decoder = FrameDecoder()
    decoder.feed(b"\x00\x00")
    with pytest.raises(ProtocolError):
        decoder.feed(b"\x00\x02")


def test_header_length_beyond_frame_fails():
    with pytest.raises(ProtocolError, match="header length"):
        FrameDecoder().feed(_frame(100, b"{}"))


@pytest.mark.parametrize(
    "frame",
    [
        _json_frame("{not json"),
        _json_frame("[1,2]"),
        _json_frame('{"code":"abc"}'),
        _json_frame('{"code":1,"extFields":[1]}'),
        _frame(3, b"\xff\xfe{"),
        _frame(0, b""),
        _frame((1 << 24) | 3, b"\x00\x01\x02"),
        _frame((2 << 24) | 1, b"\xc1"),
        _frame((2 << 24) | 1, b"\x05"),
        _frame((3 << 24) | 2, b"{}"),
        _frame((0x16 << 24) | 2, b"{}"),
    ],
    ids=[
        "bad-json",
        "json-array",
        "non-int-code",
        "ext-not-object",
        "bad-utf8",
        "empty-json-header",
        "short-binary",
        "bad-msgpack",
        "msgpack-not-map",
        "unknown-type-3",
        "unknown-type-0x16",
    ],
)
def test_undecodable_headers(frame):
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(frame)


def test_decoder_stays_failed():
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError):
        decoder.feed(_json_frame("{bad"))
    with pytest.raises(ProtocolError, match="already failed"):
        decoder.feed(encode_command(RemotingCommand(1)))


def test_deeply_nested_json_header_is_protocol_error():
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(_json_frame("[" * 100_000 + "]" * 100_000))


# ---------------------------------------------------------------------------------------------
# linear time and bounded memory


def test_buffer_never_exceeds_one_frame():
    decoder = FrameDecoder(max_frame_size=1024)
    frame = encode_command(RemotingCommand(1, opaque=7, body=b"z" * 900))
    stream = frame * 20
    got = []
    for i in range(0, len(stream), 333):
        got.extend(decoder.feed(stream[i : i + 333]))
        assert decoder.buffered <= 1024 + 4
    assert len(got) == 20


def test_large_frame_fed_in_tiny_chunks_is_linear():
    body = bytes(range(256)) * 400  # ~100 KiB, fed one byte at a time
    frame = encode_command(RemotingCommand(1, opaque=5, body=body))
    decoder = FrameDecoder()
    started = time.monotonic()
    got = []
    for i in range(len(frame)):
        got.extend(decoder.feed(frame[i : i + 1]))
    assert time.monotonic() - started < 20  # quadratic re-buffering would take far longer
    assert len(got) == 1 and got[0].body == body


def test_many_frames_in_one_big_chunk():
    frame = encode_command(RemotingCommand(11, opaque=1, ext_fields={"topic": "T"}))
    got = FrameDecoder().feed(frame * 20_000)
    assert len(got) == 20_000


# ---------------------------------------------------------------------------------------------
# property-based fuzzing

_languages = st.sampled_from([m.name for m in LanguageCode])
_text = st.text(min_size=1, max_size=20)


@st.composite
def commands(draw, serialize_type=None):
    stype = draw(st.sampled_from([0, 1, 2])) if serialize_type is None else serialize_type
    ext = draw(st.none() | st.dictionaries(_text, _text, max_size=6))
    return RemotingCommand(
        code=draw(st.integers(-32768, 32767)),
        opaque=draw(st.integers(-(2**31), 2**31 - 1)),
        flag=draw(st.integers(0, 3)),
        language=draw(_languages),
        version=draw(st.integers(-32768, 32767)),
        remark=draw(st.none() | _text),
        ext_fields=ext,
        body=draw(st.binary(max_size=300)),
        serialize_type=stype,
    )


def _feed_all(decoder: FrameDecoder, data: bytes, cuts: list[int], bound: int) -> list[RemotingCommand]:
    out = []
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for start, end in zip(points, points[1:]):
        try:
            out.extend(decoder.feed(data[start:end]))
        except ProtocolError:
            return out
        assert decoder.buffered <= bound
    return out


@FUZZ
@given(st.binary(max_size=2000), st.lists(st.integers(0, 4000), max_size=10))
def test_random_bytes_only_raise_protocol_error(data, cuts):
    _feed_all(FrameDecoder(max_frame_size=512), data, cuts, 512 + 4)


@FUZZ
@given(st.lists(commands(), min_size=1, max_size=5), st.lists(st.integers(0, 10_000), max_size=12))
def test_chunked_feeding_gives_same_commands(cmds, cuts):
    stream = b"".join(encode_command(c) for c in cmds)
    whole = FrameDecoder().feed(stream)
    assert len(whole) == len(cmds)
    decoder = FrameDecoder()
    assert _feed_all(decoder, stream, cuts, DEFAULT_MAX_FRAME_SIZE + 4) == whole
    assert decoder.buffered == 0


@FUZZ
@given(
    st.lists(commands(), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=8),
    st.integers(0, 10_000),
    st.lists(st.integers(0, 10_000), max_size=6),
)
def test_mutated_and_truncated_frames_only_raise_protocol_error(cmds, flips, cut, chunks):
    stream = bytearray(b"".join(encode_command(c) for c in cmds))
    for pos, value in flips:
        stream[pos % len(stream)] = value
    truncated = bytes(stream[: cut % (len(stream) + 1)])
    _feed_all(FrameDecoder(max_frame_size=4096), truncated, chunks, 4096 + 4)


@FUZZ
@given(st.sampled_from([0, 1, 2]), st.binary(max_size=400), st.binary(max_size=50))
def test_random_header_of_each_type_only_raises_protocol_error(stype, header, body):
    frame = _frame((stype << 24) | len(header), header, body)
    try:
        FrameDecoder().feed(frame)
    except ProtocolError:
        pass


def test_a_server_refuses_an_oversized_header_before_parsing_it():
    """REQUEST_MAX_HEADER_SIZE: the largest real request header (32 KiB of properties, JSON-escaped) passes; a
    header past the limit is a protocol error (the connection is closed), found from the type word alone."""
    escaped = "\x01\x02" * (32 * 1024 // 2)  # 32 KiB of separators: six bytes each once JSON-escaped
    legal = encode_command(RemotingCommand.request(310, {"b": "T", "i": escaped}, b"x", opaque=1))
    assert len(legal) > 190_000
    decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE, REQUEST_MAX_HEADER_SIZE)
    assert decoder.feed(legal)[0].ext_fields["i"] == escaped
    huge = encode_command(RemotingCommand.request(310, {"b": "T", "i": "x" * (REQUEST_MAX_HEADER_SIZE + 1)},
                                                  opaque=2))
    with pytest.raises(ProtocolError, match="exceeds the maximum"):
        FrameDecoder(DEFAULT_MAX_FRAME_SIZE, REQUEST_MAX_HEADER_SIZE).feed(huge)
    assert FrameDecoder().feed(huge)[0].opaque == 2  # a client reading responses keeps the protocol's own limit
