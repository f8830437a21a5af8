"""SEND_BATCH_MESSAGE body codec (§4.3.4)."""

import pytest
from hypothesis import given, settings, strategies as st

from protocol.message import BatchEntry, RecordError, decode_batch_body, encode_batch_body

# wire-examples.md "Batch body entry": one message `Hello` with properties TAGS=TagA.
BATCH_VECTOR = bytes.fromhex(
    "00000025000000000000000000000000"
    "0000000548656c6c6f000a5441475301"
    "5461674102"
)


def test_vector_encode_exact():
    assert encode_batch_body([BatchEntry(0, b"Hello", "TAGS\x01TagA\x02")]) == BATCH_VECTOR
    assert len(BATCH_VECTOR) == 37 == 22 + 5 + 10


def test_vector_decode():
    assert decode_batch_body(BATCH_VECTOR) == [BatchEntry(0, b"Hello", "TAGS\x01TagA\x02")]
    assert decode_batch_body(memoryview(BATCH_VECTOR * 2)) == [BatchEntry(0, b"Hello", "TAGS\x01TagA\x02")] * 2


def test_empty_body_is_empty_batch():
    assert decode_batch_body(b"") == []
    assert encode_batch_body([]) == b""


def test_nonzero_magic_and_crc_are_ignored():
    raw = bytearray(BATCH_VECTOR)
    raw[4:12] = b"\x12\x34\x56\x78\x9a\xbc\xde\xf0"
    assert decode_batch_body(bytes(raw))[0].body == b"Hello"


@pytest.mark.parametrize(
    "raw, words",
    [
        (BATCH_VECTOR[:-1], "TOTALSIZE"),
        (BATCH_VECTOR[:10], "truncated"),
        (BATCH_VECTOR + b"\x00", "truncated"),
        (b"\x00\x00\x00\x10" + BATCH_VECTOR[4:], "TOTALSIZE"),
        (BATCH_VECTOR[:16] + b"\x00\x00\x00\x06" + BATCH_VECTOR[20:], "PROPLEN"),
        (BATCH_VECTOR[:16] + b"\xff\xff\xff\xff" + BATCH_VECTOR[20:], "BODYLEN"),
        (BATCH_VECTOR[:16] + b"\x00\x00\x00\x40" + BATCH_VECTOR[20:], "BODYLEN"),
        (BATCH_VECTOR[:25] + b"\x00\x0b" + BATCH_VECTOR[27:], "PROPLEN"),
    ],
)
def test_malformed_raises_record_error_with_clear_message(raw, words):
    with pytest.raises(RecordError, match=words):
        decode_batch_body(raw)


def test_invalid_utf8_properties_are_replaced_like_java():
    raw = BATCH_VECTOR[:27] + b"\xff" + BATCH_VECTOR[28:]
    assert decode_batch_body(raw)[0].properties == "\ufffdAGS\x01TagA\x02"


def test_error_names_the_entry():
    with pytest.raises(RecordError, match="entry 1 at byte 37"):
        decode_batch_body(BATCH_VECTOR + BATCH_VECTOR[:-1])


entries_st = st.lists(
    st.builds(
        BatchEntry,
        st.integers(-(2**31), 2**31 - 1),
        st.binary(max_size=200),
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=50),
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(entries_st)
def test_round_trip(entries):
    assert decode_batch_body(encode_batch_body(entries)) == entries


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_raises_only_record_error(data):
    for candidate in (data, BATCH_VECTOR + data):
        try:
            decode_batch_body(candidate)
        except RecordError:
            pass
