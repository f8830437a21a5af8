"""The raw-record fast path of SQL92 selectors (`Selector.matches_record`): reading only the named properties
straight from the record's bytes, with decisions remembered per value combination, must give exactly
``selector.evaluate(decode_properties(...))`` — including duplicate keys (the last one wins), dropped empty
names and values, values holding \\x01, invalid UTF-8, IPv6 hosts and long (V2) topics."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.filter.records import (
    MAX_WALKED_NAMES,
    properties_bytes,
    properties_walker,
    record_matcher,
    record_properties,
)
from broker.filter.sql92 import SelectorError, compile_selector
from protocol.ids import pack_host
from protocol.message import encode_record
from protocol.properties import decode_properties, encode_properties


def _load_cases() -> list[tuple[str, dict[str, str], object]]:
    spec = importlib.util.spec_from_file_location("_sql92_semantics_cases",
                                                  Path(__file__).with_name("test_sql92_semantics.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES


CASES = _load_cases()
SELECTORS = []
for _text, _props, _expected in CASES:
    try:
        SELECTORS.append(compile_selector(_text))
    except SelectorError:
        pass
EXAMPLE = "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)"


def _record(properties: bytes, *, topic: bytes = b"T", v6: bool = False, body: bytes = b"body") -> bytes:
    host = pack_host("::1", 10911) if v6 else pack_host("127.0.0.1", 10911)
    return encode_record(queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0, born_timestamp=1,
                         born_host=host, store_timestamp=2, store_host=host, reconsume_times=0,
                         prepared_transaction_offset=0, body=body, topic=topic, properties=properties)


def _reference(selector, raw: bytes) -> bool:
    return selector.evaluate(decode_properties(raw.decode("utf-8", "replace")))


def test_example_selector_names() -> None:
    assert compile_selector(EXAMPLE).names == ("TAGS", "a")
    assert compile_selector("a = 'x' aNd b = 'y' or a is null").names == ("a", "b")
    assert compile_selector("TRUE").names == ()
    assert compile_selector("NOTa = 'x' /* b */ AND INDEX IN ('in')").names == ("NOTa", "INDEX")


@pytest.mark.parametrize("layout", ["plain", "v6", "long-topic", "extra", "duplicates"])
def test_semantics_table_on_raw_records(layout: str) -> None:
    """Every row of the semantics table gives the same decision from a raw record as from the map."""
    checked = 0
    for text, props, expected in CASES:
        try:
            selector = compile_selector(text)
        except SelectorError:
            continue
        raw = encode_properties(props).encode()
        kwargs = {}
        if layout == "v6":
            kwargs["v6"] = True
        elif layout == "long-topic":
            kwargs["topic"] = b"T" * 300
        elif layout == "extra":
            raw = b"UNIQ_KEY\x01U1\x02" + raw + b"KEYS\x01k1 k2\x02zz\x01\x01\x02"
        elif layout == "duplicates":  # earlier, overridden copies of every key with other values
            raw = encode_properties({k: v + "_old" for k, v in props.items()}).encode() + raw
        record = _record(raw, **kwargs)
        decision = _reference(selector, raw)
        if decode_properties(encode_properties(props)) == props:  # the map survives a record (no empty values)
            assert decision == (expected is True), (text, props)
            checked += 1
        assert selector.matches_record(record) == decision, (text, props)
        assert selector.matches_record(memoryview(record)) == decision, (text, props)
    assert checked > 200


NAMES = st.sampled_from(["a", "b", "TAGS", "tags", "aa", "ba", "", "a\x01", "NOTa", "$a_1", "KEYS", "\u00e9"])
VALUES = st.sampled_from(["", "x", "3", "1", "-1", "2.5", "TagA", "TagB", "true", "x\x01y", "\u00e9", " 3", "NaN"])


@st.composite
def raw_properties(draw) -> bytes:
    """Property bytes in any layout: duplicates, empty names/values, segments without \\x01, no trailing
    separator, invalid UTF-8 inside values."""
    parts = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            parts.append(draw(st.sampled_from([b"", b"novalue", b"\x01", b"\x01x", b"a\x01", b"\xff\xfe"])))
        else:
            value = draw(VALUES).encode()
            if kind == 1:
                value += draw(st.sampled_from([b"\xff", b"\xe2\x82", b"\xc3"]))
            parts.append(draw(NAMES).encode() + b"\x01" + value)
    raw = b"\x02".join(parts)
    if parts and draw(st.booleans()):
        raw += b"\x02"
    return raw


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(SELECTORS), raw_properties(), st.booleans(), st.booleans())
def test_fast_path_equals_decoded_evaluation(selector, raw: bytes, v6: bool, long_topic: bool) -> None:
    record = _record(raw, v6=v6, topic=b"T" * (300 if long_topic else 5))
    expected = _reference(selector, raw)
    assert selector.matches_record(record) == expected
    assert selector.matches_record(memoryview(record)) == expected  # now from the decision cache
    assert record_properties(record) == decode_properties(raw.decode("utf-8", "replace"))


@settings(max_examples=200, deadline=None)
@given(st.lists(raw_properties(), min_size=1, max_size=30))
def test_tiny_decision_cache(raws: list[bytes]) -> None:
    """A cache that is cleared all the time still gives the same decisions."""
    selector = compile_selector("a = '3' OR (TAGS IN ('TagA') AND b IS NULL) OR a > 0")
    match = record_matcher(selector.names, selector.evaluate, cache_entries=2)
    for raw in raws * 2:
        assert match(_record(raw)) == _reference(selector, raw)


BODIES = st.one_of(st.binary(max_size=40), st.sampled_from([b"", b"\x02a\x011\x02TAGS\x01TagA\x02", b"a\x013"]))


@settings(max_examples=300, deadline=None)
@given(raw_properties(), st.booleans(), st.booleans(), BODIES)
def test_properties_are_read_from_the_right_place(raw: bytes, v6: bool, long_topic: bool, body: bytes) -> None:
    """Whatever the hosts, topic length and body (even one that looks like properties), only the properties
    field is read."""
    record = _record(raw, v6=v6, topic=b"T" * (300 if long_topic else 5), body=body)
    assert properties_bytes(record) == properties_bytes(memoryview(record)) == raw
    selector = compile_selector("a = '1' OR TAGS = 'TagA' OR a IS NULL")
    assert selector.matches_record(memoryview(record)) == _reference(selector, raw)


def test_properties_walker() -> None:
    walk = properties_walker(["a", "ab", "$x"]).match
    raw = b"a\x011\x02ab\x012\x02$x\x01\x02b\x01a\x02aa\x013\x02a\x01\x01\x02\x01a\x02ab"
    assert walk(raw).groups() == (b"\x01", b"2", None)
    assert walk(b"x" + raw, 1, len(raw) + 1).groups() == (b"\x01", b"2", None)
    assert walk(raw, 0, 3).groups() == (b"1", None, None)
    assert walk(b"").groups() == (None, None, None)
    assert properties_walker([]).match(raw).groups() == ()


def test_many_names_decode_the_whole_map() -> None:
    names = [f"p{i}" for i in range(MAX_WALKED_NAMES + 1)]
    selector = compile_selector(" OR ".join(f"{n} = '1'" for n in names))
    assert len(selector.names) == MAX_WALKED_NAMES + 1
    assert selector.matches_record(_record(b"x\x011\x02p20\x011\x02"))
    assert not selector.matches_record(_record(b"p20\x012\x02p20\x01\x02"))
    assert not selector.matches_record(b"\x00" * 10)
    unknown = record_matcher(None, selector.evaluate)  # names not known: decode everything
    assert unknown(_record(b"x\x011\x02p20\x011\x02")) and not unknown(_record(b"p20\x012\x02"))


def test_malformed_and_truncated_records_do_not_match() -> None:
    selector = compile_selector("a IS NULL")  # would be TRUE for a record without properties
    assert selector.matches_record(_record(b""))
    assert not selector.matches_record(b"\x00" * 10)
    assert not selector.matches_record(b"")
    record = _record(b"b\x011\x02")
    assert not selector.matches_record(record[:-2])  # properties cut short
    assert selector.matches_record(record)


def test_large_properties_are_not_cached_but_still_evaluated() -> None:
    selector = compile_selector("a = 'x'")
    big = b"a\x01x\x02pad\x01" + b"p" * 5000 + b"\x02"
    assert selector.matches_record(_record(big))
    assert not selector.matches_record(_record(big.replace(b"a\x01x", b"a\x01y")))
