"""Table-driven checks of every expression / property-map case in shared/reference/sql92-filter.md.

Each row is (selector, properties, expected three-valued result) where the result is True, False,
None (UNKNOWN) or ERR (the reference throws during evaluation). A message is delivered only for
True; `Selector.evaluate` must agree with that for every row.
"""

from __future__ import annotations

import pytest

from broker.filter.sql92 import EvaluationError, compile_selector

ERR = "error"

CASES: list[tuple[str, dict[str, str], object]] = [
    # ---- §0 / §4.11: delivery decision and constant selectors
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NULL", {}, None),
    ("NOT NULL", {}, None),
    ("TRUE AND NULL", {}, None),
    ("FALSE OR NULL", {}, None),
    ("true", {}, True),
    # ---- §1: keywords are case-insensitive, identifiers use longest match, names are case-sensitive
    ("a = 'x' aNd b = 'y'", {"a": "x", "b": "y"}, True),
    ("a iS nOt NuLl", {"a": "x"}, True),
    ("NOTa = 'x'", {"NOTa": "x"}, True),
    ("INDEX = 'x'", {"INDEX": "x"}, True),
    ("tags = 'TagA'", {"TAGS": "TagA"}, None),
    ("TAGS = 'TagA'", {"TAGS": "TagA"}, True),
    ("$a_1 = 'x'", {"$a_1": "x"}, True),
    # comments
    ("/* c */ a = 'x'", {"a": "x"}, True),
    ("a /* c * / */ = 'x'", {"a": "x"}, True),
    ("a = 'x' -- trailing comment\n", {"a": "x"}, True),
    ("a = -- comment\n 'x'", {"a": "x"}, True),
    ("a = 'x' -- c\r\nAND b = 'y'", {"a": "x", "b": "z"}, False),
    ("a = --1", {"a": "1"}, True),  # two minus signs when no line break follows
    # whitespace: space, TAB, LF, CR, FF
    ("a\t=\n'x'\r\f", {"a": "x"}, True),
    # integer literals: int when in int range, long otherwise; L does not force long
    ("a = 2147483647", {"a": "2147483647"}, True),
    ("a = 2147483647", {"a": "2147483648"}, ERR),
    ("a = 2147483648", {"a": "2147483648"}, True),
    ("a = 9223372036854775807", {"a": "9223372036854775807"}, True),
    ("a = 9223372036854775807", {"a": "9223372036854775808"}, ERR),
    ("a = 3L", {"a": "3"}, True),
    ("a > 3L", {"a": "3000000000"}, ERR),
    ("a > 3000000000", {"a": "3000000001"}, True),
    ("a = 0", {"a": "-0"}, True),
    ("a = 0L", {"a": "0"}, True),
    # float literals
    ("a = 5.", {"a": "5"}, True),
    ("a = .5", {"a": "0.5"}, True),
    ("a = 5E1", {"a": "50"}, True),
    ("a = 3.1E10", {"a": "31000000000"}, True),
    ("a > 4.9e-324", {"a": "1"}, True),
    # string literals: '' is a quote, backslash is ordinary, newlines allowed
    ("a = 'it''s'", {"a": "it's"}, True),
    ("a = 'x\\y'", {"a": "x\\y"}, True),
    ("a = 'two\nlines'", {"a": "two\nlines"}, True),
    ("a = ''", {"a": ""}, True),
    # ---- §2: precedence and NOT
    ("NOT a = 'x'", {"a": "x"}, ERR),  # (NOT a) = 'x': Boolean vs String
    ("NOT a = 'x'", {}, None),
    ("NOT (a = 'x')", {"a": "y"}, True),
    ("a = 1 > 0", {"a": "true"}, True),  # a = (1 > 0)
    ("a = 1 > 0", {"a": "false"}, False),
    ("a > 1 = TRUE", {"a": "2"}, True),  # (a > 1) = TRUE
    ("a > 1 = TRUE", {"a": "0"}, False),
    ("a BETWEEN (1) AND -(-3)", {"a": "2"}, True),
    ("a BETWEEN 1 AND 3 AND b = 'y'", {"a": "2", "b": "y"}, True),
    ("a = 'x' OR b = 'y' AND c = 'z'", {"a": "x"}, True),
    ("(a = 'x' OR b = 'y') AND c = 'z'", {"a": "x"}, None),
    ("+a = 'x'", {"a": "x"}, True),
    # ---- §3: accepted boolean forms
    ("a", {"a": "true"}, False),
    ("a", {}, None),
    ("'x' = TRUE", {}, False),
    ("'true' = TRUE", {}, True),
    ("1 = TRUE", {}, False),
    ("a > -b", {"a": "1", "b": "1"}, None),
    ("a > (3)", {"a": "4"}, True),
    ("a BETWEEN -1 AND -5", {"a": "-3"}, False),
    ("a BETWEEN -1 AND -5", {"a": "-1"}, False),
    ("a NOT BETWEEN 3 AND 1", {"a": "2"}, True),
    ("a BETWEEN 1 AND 1", {"a": "1"}, True),
    ("a BETWEEN 1 AND 2.5", {"a": "2"}, True),
    # ---- §4.1 unary operators
    ("-a = -3", {"a": "3"}, None),
    ("-a = -3", {"a": "-3"}, None),
    ("a = -3", {"a": "-3"}, True),
    ("a = -(3)", {"a": "-3"}, True),
    ("a = - -3", {"a": "3"}, True),
    ("a = -3.5", {"a": "-3.5"}, True),
    ("a > -b", {"a": "5"}, None),
    ("a = +'x'", {"a": "x"}, True),
    ("a = -'x'", {"a": "x"}, False),  # -'x' is null: 'x' = null is FALSE
    ("-'x' = a", {"a": "x"}, None),
    ("-(b > 3) IS NULL", {"b": "abc"}, ERR),  # the negated condition is still evaluated
    ("-(b > 3) IS NULL", {"b": "5"}, True),
    # ---- §4.2 = and <>
    ("a = 'x'", {}, None),
    ("'x' = a", {}, False),
    ("'x' <> a", {}, True),
    ("a <> 'x'", {}, None),
    ("a = b", {}, True),
    ("a <> b", {}, False),
    ("a = b", {"a": "x"}, False),
    ("a = b", {"b": "x"}, None),
    ("a = '1.5'", {"a": "1.50"}, False),
    ("a = 'X'", {"a": "x"}, False),
    ("a = b", {"a": "3", "b": "3.0"}, False),
    ("a = b", {"a": "x", "b": "x"}, True),
    ("(a = 'x') = (b = 'y')", {"a": "x", "b": "y"}, True),
    ("(a = 'x') = (b = 'y')", {"a": "x", "b": "z"}, False),
    ("(a = 'x') = TRUE", {}, None),
    ("TRUE = a", {"a": "true"}, ERR),
    ("TRUE = a", {}, False),
    ("TRUE = FALSE", {}, False),
    ("TRUE = TRUE", {}, True),
    ("TRUE <> FALSE", {}, True),
    # ---- §4.3 ordering
    ("a > b", {"a": "10", "b": "9"}, True),
    ("a >= b", {"a": "3", "b": "3.0"}, True),
    ("a > b", {"a": "10", "b": "abc"}, ERR),
    ("a > b", {"a": "NaN", "b": "1"}, True),
    ("a < b", {"a": " 1 ", "b": "2"}, True),
    ("a > 3", {}, None),
    ("3 < a", {"a": "4"}, True),
    ("3 < a", {}, None),
    ("1 < 2", {}, True),
    ("2.5 >= 2", {}, True),
    ("a <= 3", {"a": "3"}, True),
    ("a < 3", {"a": "3"}, False),
    # ---- §4.4 coercion: int literal
    ("a = 3", {"a": "3"}, True),
    ("a > 3", {"a": "4"}, True),
    ("a = 3", {"a": "3.0"}, ERR),
    ("a = 3", {"a": " 3"}, ERR),
    ("a = 3", {"a": "3 "}, ERR),
    ("a = 3", {"a": "1E2"}, ERR),
    ("a = 3", {"a": "3000000000"}, ERR),
    ("a = 3", {"a": "abc"}, ERR),
    ("a = 3", {"a": ""}, ERR),
    ("a = 3", {"a": "+"}, ERR),
    ("a > 3", {"a": "3.0"}, ERR),
    ("a <> 3", {"a": "abc"}, ERR),
    ("NOT (a <> 3)", {"a": "abc"}, ERR),
    ("a = 3", {"a": "+3"}, True),
    ("a = 3", {"a": "03"}, True),
    ("a = 3", {"a": "\u0663"}, True),  # ARABIC-INDIC DIGIT THREE: Integer.valueOf accepts Unicode digits
    ("a = 3", {"a": "\uff13"}, True),  # FULLWIDTH DIGIT THREE
    ("a = 3", {"a": "3_0"}, ERR),
    ("a = 30", {"a": "3_0"}, ERR),
    # long literal
    ("a = 3000000000", {"a": "3000000000"}, True),
    ("a = 3000000000", {"a": "3e9"}, ERR),
    # double literal: lenient Double.valueOf
    ("a > 3.0", {"a": "3"}, False),
    ("a >= 3.0", {"a": "3"}, True),
    ("a > 3.0", {"a": "3.5"}, True),
    ("a >= 3.0", {"a": " 3 "}, True),
    ("a > 3.0", {"a": "1e2"}, True),
    ("a = 3.0", {"a": "3d"}, True),
    ("a = 3.0", {"a": "3f"}, True),
    ("a = 16.0", {"a": "0x10p0"}, True),
    ("a = 16.0", {"a": "0x10"}, ERR),
    ("a > 1.0", {"a": "NaN"}, True),
    ("a < 1.0", {"a": "NaN"}, False),
    ("a = 1.0", {"a": "NaN"}, False),
    ("a > 1.0", {"a": "Infinity"}, True),
    ("a > 1.0", {"a": "-Infinity"}, False),
    ("a > 1.0", {"a": "nan"}, ERR),
    ("a > 1.0", {"a": "inf"}, ERR),
    ("a > 1.0", {"a": "1,5"}, ERR),
    ("a = 1.5", {"a": "\t1.5\n"}, True),
    # mixed BETWEEN bounds convert separately
    ("a BETWEEN 0.1 AND 3", {"a": "1.5"}, ERR),
    ("a BETWEEN 0.1 AND 3.0", {"a": "1.5"}, True),
    ("a BETWEEN 0 AND 3", {"a": "1.5"}, ERR),
    # string literal: exact string equality, no conversion
    ("a = '3'", {"a": "3.0"}, False),
    ("a = '3'", {"a": "3"}, True),
    # literal vs literal
    ("1 = '1'", {}, True),
    ("1 = 'x'", {}, ERR),
    ("1 = 1.0", {}, True),
    ("1 = 1L", {}, True),
    ("2147483648 = 2147483648.0", {}, True),
    # booleans
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "yes"}, False),
    ("a = FALSE", {"a": "yes"}, True),
    ("a <> TRUE", {"a": "1"}, True),
    ("WAIT = TRUE", {"WAIT": "true"}, True),
    ("WAIT = TRUE", {"WAIT": "false"}, False),
    ("(a = 'x') = 'true'", {"a": "x"}, ERR),
    ("(a = 'x') = 'true'", {}, None),
    # ---- §4.5 BETWEEN / NOT BETWEEN
    ("a BETWEEN 1 AND 3", {}, None),
    ("a NOT BETWEEN 1 AND 3", {}, None),
    ("a BETWEEN 1 AND 3", {"a": "2"}, True),
    ("a BETWEEN 1 AND 3", {"a": "3"}, True),
    ("a BETWEEN 1 AND 3", {"a": "4"}, False),
    ("a NOT BETWEEN 1 AND 3", {"a": "5"}, True),
    ("a NOT BETWEEN 1 AND 3", {"a": "2"}, False),
    ("a NOT BETWEEN 1 AND 3", {"a": "0"}, True),
    ("a BETWEEN 1 AND 3", {"a": "x"}, ERR),
    ("a BETWEEN b AND c", {"a": "2", "b": "1", "c": "3"}, True),
    ("a BETWEEN b AND c", {"a": "2", "b": "1"}, None),
    ("a BETWEEN b AND c", {"a": "0", "b": "1"}, False),
    # ---- §4.6 bare property as a condition
    ("a", {"a": "true"}, False),
    ("NOT a", {"a": "true"}, True),
    ("NOT a", {"a": "false"}, True),
    ("NOT a", {}, None),
    ("a AND TRUE", {"a": "x"}, False),
    ("a OR TRUE", {}, True),
    ("a OR b", {"a": "x"}, None),
    # ---- §4.7 IN / NOT IN
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a IN ('x', 'y')", {"a": "z"}, False),
    ("a IN ('x', 'y')", {}, None),
    ("a NOT IN ('x', 'y')", {}, None),
    ("a NOT IN ('x', 'y')", {"a": "z"}, True),
    ("a NOT IN ('x', 'y')", {"a": "x"}, False),
    ("a IN ('3')", {"a": "03"}, False),
    ("a IN ('X')", {"a": "x"}, False),
    ("(a) IN ('x')", {"a": "x"}, True),
    ("a in ('it''s')", {"a": "it's"}, True),
    # ---- §4.8 AND / OR: Kleene logic with left-to-right short-circuit
    ("a = 'x' OR b > 3", {"a": "x", "b": "abc"}, True),
    ("b > 3 OR a = 'x'", {"a": "x", "b": "abc"}, ERR),
    ("a = 'y' AND b > 3", {"a": "x", "b": "abc"}, False),
    ("b > 3 AND a = 'y'", {"a": "x", "b": "abc"}, ERR),
    ("a = 'x' AND b > 3", {"a": "x", "b": "abc"}, ERR),
    ("a = 'x' AND b = 'y'", {"a": "x"}, None),
    ("a = 'x' AND b = 'y'", {"b": "z"}, False),
    ("a = 'x' OR b = 'y'", {"b": "z"}, None),
    ("a = 'x' OR b = 'y'", {"b": "y"}, True),
    ("a <> 'x'", {}, None),
    ("NOT (a = 'x')", {}, None),
    ("a NOT IN ('x')", {}, None),
    ("a = 'x' AND b = 'y' AND c = 'z'", {"a": "x", "b": "y", "c": "z"}, True),
    ("a = 'x' OR b = 'y' OR c = 'z'", {"c": "z"}, True),
    ("a = 'x' OR b = 'y' OR c = 'z'", {"c": "q"}, None),
    # ---- §4.9 IS NULL / IS NOT NULL
    ("NULL IS NULL", {}, True),
    ("NULL IS NOT NULL", {}, False),
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": ""}, False),
    ("a IS NOT NULL", {"a": "x"}, True),
    ("(a = 'x') IS NULL", {}, True),
    ("(a = 'x') IS NOT NULL", {"a": "y"}, True),
    ("(b > 3) IS NULL", {"b": "abc"}, ERR),
    ("'x' IS NULL", {}, False),
    ("a IS NULL = TRUE", {}, True),
    # ---- §4.10 CONTAINS / STARTSWITH / ENDSWITH
    ("a CONTAINS 'ell'", {"a": "hello"}, True),
    ("a CONTAINS 'ELL'", {"a": "hello"}, False),
    ("a CONTAINS ''", {"a": "hello"}, False),
    ("a NOT CONTAINS ''", {"a": "hello"}, False),
    ("a CONTAINS 'x'", {}, False),
    ("a NOT CONTAINS 'x'", {}, False),
    ("NOT (a CONTAINS 'x')", {}, True),
    ("a NOT CONTAINS 'x'", {"a": "abc"}, True),
    ("a CONTAINS '%'", {"a": "100%"}, True),
    ("a CONTAINS '%'", {"a": "100"}, False),
    ("a STARTSWITH 'he'", {"a": "hello"}, True),
    ("a STARTSWITH 'lo'", {"a": "hello"}, False),
    ("a NOT STARTSWITH 'he'", {"a": "hello"}, False),
    ("a NOT STARTSWITH 'x'", {}, False),
    ("a ENDSWITH 'lo'", {"a": "hello"}, True),
    ("a NOT ENDSWITH 'lo'", {"a": "hello"}, False),
    ("a NOT ENDSWITH 'x'", {"a": "hello"}, True),
    ("a ENDSWITH ''", {"a": "hello"}, False),
    ("a startswith 'h' and a endswith 'o'", {"a": "hello"}, True),
    ("(a = 'x') CONTAINS 'true'", {"a": "x"}, False),
    ("'abc' CONTAINS 'b'", {}, True),
    # ---- §5: system properties are ordinary names
    ("TAGS IN ('TagA', 'TagB') AND KEYS CONTAINS 'k1'", {"TAGS": "TagA", "KEYS": "k1 k2"}, True),
    ("(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)",
     {"TAGS": "TagB", "a": "3"}, True),
    ("(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)",
     {"TAGS": "TagB", "a": "4"}, False),
    ("(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)",
     {"TAGS": "TagC", "a": "1"}, False),
    ("(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)",
     {"a": "1"}, False),
]


def _result(selector: str, props: dict[str, str]) -> object:
    compiled = compile_selector(selector)
    try:
        return compiled.evaluate3(props)
    except EvaluationError:
        return ERR


@pytest.mark.parametrize("selector,props,expected", CASES, ids=[f"{i}:{c[0][:40]}" for i, c in enumerate(CASES)])
def test_reference_semantics(selector: str, props: dict[str, str], expected: object) -> None:
    assert _result(selector, props) == expected
    assert compile_selector(selector).evaluate(props) is (expected is True)


def test_null_and_empty_property_maps() -> None:
    selector = compile_selector("a IS NULL")
    assert selector.evaluate(None) is True
    assert selector.evaluate({}) is True
    assert compile_selector("a = 'x'").evaluate(None) is False


def test_results_are_plain_booleans_or_none() -> None:
    for selector, props, expected in CASES:
        result = _result(selector, props)
        assert result is ERR or result is None or result is True or result is False, selector
