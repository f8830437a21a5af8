"""Java String.hashCode compatibility (tagsCode, index keys)."""

import struct

from hypothesis import given, settings, strategies as st

from protocol.hashing import index_key_hash, java_string_hash, java_string_hashes, tags_code


def reference_hash(s: str) -> int:
    """Straightforward Java String.hashCode: UTF-16 code units, wrap at every step."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def test_known_values():
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("payment") == -786681338
    assert java_string_hash("TopicTest") == 0x8E987641 - 2**32
    assert java_string_hash("") == 0


def test_cq_unit_vector_tag_codes_sign_extended():
    # From wire-examples.md "Extra store vectors": tagsCode stored as sign-extended int64.
    assert struct.pack(">q", tags_code("TagA")) == bytes.fromhex("000000000027a807")
    assert struct.pack(">q", tags_code("payment")) == bytes.fromhex("ffffffffd11c3206")
    assert struct.pack(">q", java_string_hash("TopicTest")) == bytes.fromhex("ffffffff8e987641")


def test_tags_code_empty_is_zero():
    assert tags_code(None) == 0
    assert tags_code("") == 0


def test_astral_characters_count_as_two_surrogates():
    # U+1F600 = D83D DE00
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00
    assert java_string_hash("a\U0001F600b") == reference_hash("a\U0001F600b")


def test_long_strings_use_same_result():
    for n in (31, 32, 33, 100, 1000, 5000):
        s = "".join(chr(33 + (i * 7) % 90) for i in range(n))
        assert java_string_hash(s) == reference_hash(s)
        s2 = s + "\u00e9\u4e2d"
        assert java_string_hash(s2) == reference_hash(s2)


def test_index_key_hash_abs_and_min_value():
    assert index_key_hash("TagA") == 2598919
    assert index_key_hash("payment") == 786681338
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE in Java
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert index_key_hash("polygenelubricants") == 0


def test_batch_variant():
    words = ["TagA", "payment", "", "\u00e9t\u00e9"]
    assert java_string_hashes(words) == [reference_hash(w) for w in words]


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_matches_reference_for_arbitrary_unicode(s):
    assert java_string_hash(s) == reference_hash(s)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), min_size=20, max_size=400))
def test_matches_reference_for_ascii(s):
    assert java_string_hash(s) == reference_hash(s)
    assert -(2**31) <= java_string_hash(s) < 2**31
