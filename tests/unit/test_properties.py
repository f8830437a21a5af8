"""Properties string codec with Java's decoding rules."""

from hypothesis import given, settings, strategies as st

from protocol.properties import (
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_properties,
    decode_properties_bytes,
    encode_properties,
)


def java_reference_decode(s: str) -> dict:
    """Transliteration of the Java index-based algorithm (indexOf over the whole string)."""
    result = {}
    index, n = 0, len(s)
    while index < n:
        new_index = s.find("\x02", index)
        if new_index < 0:
            new_index = n
        if new_index - index >= 3:
            kv = s.find("\x01", index)
            if index < kv < new_index - 1:
                result[s[index:kv]] = s[kv + 1 : new_index]
        index = new_index + 1
    return result


def test_encode_every_pair_terminated():
    assert encode_properties({"TAGS": "TagA", "WAIT": "true"}) == "TAGS\x01TagA\x02WAIT\x01true\x02"
    assert encode_properties({}) == ""


def test_encode_skips_none():
    assert encode_properties({"TAGS": "TagA", "KEYS": None}) == "TAGS\x01TagA\x02"


def test_frame2_properties():
    s = "TAGS\x01TagA\x02WAIT\x01true\x02UNIQ_KEY\x01C0A8000A303918B4AAC20BEBC2000000\x02"
    d = decode_properties(s)
    assert d == {"TAGS": "TagA", "WAIT": "true", "UNIQ_KEY": "C0A8000A303918B4AAC20BEBC2000000"}
    assert d[PROPERTY_TAGS] == "TagA" and PROPERTY_UNIQ_KEY == "UNIQ_KEY"


def test_java_rules():
    assert decode_properties("") == {}
    assert decode_properties(None) == {}
    assert decode_properties("k\x01v") == {"k": "v"}  # last pair without terminator still counts
    assert decode_properties("k\x01\x02") == {}  # empty value dropped
    assert decode_properties("\x01v\x02") == {}  # empty name dropped
    assert decode_properties("kv\x02") == {}  # no separator
    assert decode_properties("k\x01v\x01w\x02") == {"k": "v\x01w"}  # value keeps later \x01
    assert decode_properties("k\x01a\x02k\x01b\x02") == {"k": "b"}  # later duplicate wins
    assert decode_properties("\x02\x02a\x01b\x02\x02") == {"a": "b"}


def test_value_that_is_only_separator_follows_java():
    # "k\x01\x01": first \x01 at 1, segment length 3, 1 < 3 - 1 -> accepted with value "\x01".
    assert java_reference_decode("k\x01\x01") == {"k": "\x01"}
    assert decode_properties("k\x01\x01") == {"k": "\x01"}


def test_bytes_variant():
    assert decode_properties_bytes("T\x01\u00e9\x02".encode()) == {"T": "\u00e9"}
    assert decode_properties_bytes(b"") == {}
    assert decode_properties_bytes(b"a\x01\xff\x02") == {"a": "\ufffd"}


_seg_text = st.text(alphabet=st.sampled_from(["\x01", "\x02", "a", "b", "\u00e9", "\U0001F600", "="]), max_size=30)


@settings(max_examples=500, deadline=None)
@given(_seg_text)
def test_decode_matches_java_algorithm(s):
    assert decode_properties(s) == java_reference_decode(s)


_key = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1)
_value = st.text(alphabet=st.characters(blacklist_characters="\x02", blacklist_categories=("Cs",)), min_size=1)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_key, _value, max_size=10))
def test_round_trip(d):
    assert decode_properties(encode_properties(d)) == d
