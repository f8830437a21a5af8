"""Property-based checks of the SQL92 evaluator: Kleene logic with left-to-right short-circuit
(errors included), NOT / De Morgan / BETWEEN / <> / IS NOT NULL rewrites, numeric coercion against
Python arithmetic, keyword case-insensitivity, and "any text either compiles or raises SelectorError"."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.filter.sql92 import EvaluationError, SelectorError, compile_selector

ERR = "error"

# Atoms over properties a and b, chosen to produce TRUE, FALSE, UNKNOWN and evaluation errors.
ATOMS = [
    "a = 'x'", "a > 3", "b <= 2.5", "a IN ('x', '3')", "b IS NULL", "a CONTAINS 'x'", "a NOT BETWEEN 1 AND 5",
    "TRUE", "FALSE", "NULL", "a", "b <> 3", "'x' = b", "a = b", "b NOT IN ('abc')", "a NOT STARTSWITH '3'",
]
VALUES = st.sampled_from(["x", "3", "abc", "2.5", "", "NaN", "7", "-1", " 3", "x3"])
PROPS = st.fixed_dictionaries({}, optional={"a": VALUES, "b": VALUES})


def outcome(text: str, props: dict[str, str]) -> object:
    try:
        return compile_selector(text).evaluate3(props)
    except EvaluationError:
        return ERR


def kleene_not(value: object) -> object:
    return value if value in (None, ERR) else not value


def kleene_and(left: object, right_thunk) -> object:
    if left == ERR:
        return ERR
    if left is False:
        return False
    right = right_thunk()
    if right == ERR:
        return ERR
    if right is False:
        return False
    return None if left is None or right is None else True


def kleene_or(left: object, right_thunk) -> object:
    if left == ERR:
        return ERR
    if left is True:
        return True
    right = right_thunk()
    if right == ERR:
        return ERR
    if right is True:
        return True
    return None if left is None or right is None else False


atom = st.sampled_from(ATOMS)


@given(atom, PROPS)
def test_not_is_kleene_negation(p: str, props: dict[str, str]) -> None:
    assert outcome(f"NOT ({p})", props) == kleene_not(outcome(p, props))


@given(atom, atom, PROPS)
def test_and_or_are_short_circuit_kleene(p: str, q: str, props: dict[str, str]) -> None:
    rp = outcome(p, props)
    assert outcome(f"({p}) AND ({q})", props) == kleene_and(rp, lambda: outcome(q, props))
    assert outcome(f"({p}) OR ({q})", props) == kleene_or(rp, lambda: outcome(q, props))


@given(atom, atom, PROPS)
def test_de_morgan(p: str, q: str, props: dict[str, str]) -> None:
    assert outcome(f"NOT (({p}) AND ({q}))", props) == outcome(f"NOT ({p}) OR NOT ({q})", props)
    assert outcome(f"NOT (({p}) OR ({q}))", props) == outcome(f"NOT ({p}) AND NOT ({q})", props)


@given(st.lists(atom, min_size=3, max_size=6), PROPS)
def test_flattened_chains_equal_nested_pairs(parts: list[str], props: dict[str, str]) -> None:
    for op in ("AND", "OR"):
        flat = f" {op} ".join(f"({p})" for p in parts)
        nested = f"({parts[0]})"
        for p in parts[1:]:
            nested = f"({nested} {op} ({p}))"
        right_nested = f"({parts[-1]})"
        for p in reversed(parts[:-1]):
            right_nested = f"(({p}) {op} {right_nested})"
        assert outcome(flat, props) == outcome(nested, props) == outcome(right_nested, props)


@given(atom, PROPS)
def test_is_not_null_is_not_of_is_null(p: str, props: dict[str, str]) -> None:
    assert outcome(f"({p}) IS NOT NULL", props) == kleene_not(outcome(f"({p}) IS NULL", props))
    assert outcome(f"({p}) IS NULL", props) in (True, False, ERR)


@given(PROPS, st.sampled_from(["'x'", "3", "2.5", "b", "TRUE"]))
def test_ne_is_not_eq(props: dict[str, str], right: str) -> None:
    assert outcome(f"a <> {right}", props) == kleene_not(outcome(f"a = {right}", props))


@given(PROPS, st.integers(-5, 5), st.integers(-5, 5))
def test_between_rewrites(props: dict[str, str], low: int, high: int) -> None:
    # Written as negations (not literals) so the parse-time "low <= high" check does not apply.
    lo, hi = (f"-({-n})" if n <= 0 else f"-(-{n})" for n in (low, high))
    assert outcome(f"a BETWEEN {lo} AND {hi}", props) == outcome(f"a >= {lo} AND a <= {hi}", props)
    assert outcome(f"a NOT BETWEEN {lo} AND {hi}", props) == outcome(f"a < {lo} OR a > {hi}", props)


@given(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1))
def test_int_comparison_matches_python(value: int, literal: int) -> None:
    props = {"a": str(value)}
    text = str(abs(literal)) if literal >= 0 else f"-{abs(literal)}"
    assert outcome(f"a > {text}", props) is (value > literal)
    assert outcome(f"a = {text}", props) is (value == literal)
    assert outcome(f"a <= {text}", props) is (value <= literal)


@given(st.floats(allow_nan=False, allow_infinity=False), st.floats(min_value=1e-300, max_value=1e300))
def test_double_comparison_matches_python(value: float, literal: float) -> None:
    props = {"a": repr(value)}
    assert outcome(f"a > {literal!r}", props) is (value > literal)
    assert outcome(f"a < -{literal!r}", props) is (value < -literal)


@given(st.integers(0, 2**12 - 1))
def test_keywords_are_case_insensitive(mask: int) -> None:
    text = "a is not null and a between 1 and 5 or b not in ('x') and not (a = 'y')"
    letters = [i for i, ch in enumerate(text) if ch.isalpha() and text[i - 1 : i] != "'"]
    chars = list(text)
    for bit, index in enumerate(letters[:12]):
        if mask >> bit & 1 and chars[index] not in "ab":
            chars[index] = chars[index].upper()
    variant = "".join(chars)
    for props in ({"a": "3"}, {"a": "9", "b": "x"}, {}, {"a": "y"}):
        assert outcome(variant, props) == outcome(text, props)


@settings(max_examples=300)
@given(st.text(alphabet=st.sampled_from(list("ab ()'=<>!-+.,0123456789eLxNOTANDIS\n")), max_size=40))
def test_any_text_compiles_or_raises_selector_error(text: str) -> None:
    try:
        selector = compile_selector(text)
    except SelectorError as exc:
        assert 0 <= exc.position <= len(text)
        assert "column" in str(exc)
        return
    for props in ({}, {"a": "1"}, {"a": "x", "b": "2"}):
        assert selector.evaluate(props) in (True, False)


@given(st.dictionaries(st.sampled_from(["a", "b", "TAGS"]), st.text(max_size=8), max_size=3))
def test_evaluate_never_raises(props: dict[str, str]) -> None:
    for text in ATOMS + ["a > b", "a = 3000000000", "a >= 1.5", "TAGS IN ('x')", "NOT a = 'x'"]:
        assert compile_selector(text).evaluate(props) in (True, False)


def test_evaluation_rate_is_reported() -> None:
    """A typical selector on 4-property messages; the floor is loose (shared CI machines)."""
    selector = compile_selector("(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)")
    messages = [{"TAGS": ("TagA", "TagB", "TagC")[i % 3], "a": str(i % 6), "KEYS": f"k{i}", "UNIQ_KEY": f"U{i}"}
                for i in range(1000)]
    evaluate = selector.evaluate
    start = time.perf_counter()
    rounds = 50
    for _ in range(rounds):
        for message in messages:
            evaluate(message)
    rate = rounds * len(messages) / (time.perf_counter() - start)
    print(f"SQL92 evaluations per second: {rate:,.0f}")
    assert rate > 50_000
