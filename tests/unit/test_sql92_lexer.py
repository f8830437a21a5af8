"""The SQL92 lexer is linear, agrees with lark's standard lexer, and the size limits refuse early with a
remark naming the limit (issue 11: one request never stalls the others)."""

from __future__ import annotations

import random
import sys
import time

import pytest
from lark import Lark
from lark.exceptions import UnexpectedCharacters
from lark.lexer import LexerState
from lark.utils import TextSlice

from broker.filter import sql92, sql92_lexer
from broker.filter.sql92 import (
    MAX_IN_ITEMS,
    MAX_NESTING,
    MAX_SELECTOR_LENGTH,
    MAX_TERMS,
    MAX_TOKENS,
    SelectorError,
    compile_selector,
)
from broker.filter.sql92_lexer import KEYWORDS, SelectorLexer


def _our_tokens(text: str) -> list[tuple[str, str, int]] | int:
    """(type, value, position) of every token, keywords typed back as IDENT; the position of a lexical error."""
    lexer = SelectorLexer(sql92._get_parser().lexer_conf)
    try:
        return [("IDENT" if t.type in KEYWORDS else t.type, t.value, t.start_pos)
                for t in lexer.lex(LexerState(TextSlice.cast_from(text)), None)]
    except UnexpectedCharacters as exc:
        return exc.pos_in_stream


_reference_lexer = Lark(sql92._GRAMMAR_PATH.read_text(), parser="lalr", lexer="basic")


def _reference_tokens(text: str) -> list[tuple[str, str, int]] | int:
    try:
        return [(t.type, t.value, t.start_pos) for t in _reference_lexer.lex(text)]
    except UnexpectedCharacters as exc:
        return exc.pos_in_stream


def test_same_tokens_as_lark_standard_lexer_on_random_text() -> None:
    rng = random.Random(11)
    pieces = ["-", "--", "+", "'", "''", "a", "e", "E", "x1", "0", "0", "00", "1", "5", ".", "(", ")", ",", " ", "\n", "\r",
              "\r\n", "\t", "/", "*", "/*", "*/", "<", ">", "=", "<>", ">=", "NOT", "in", "l", "L", "$", "!", "\f"]
    for _ in range(4000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert _our_tokens(text) == _reference_tokens(text), repr(text)


@pytest.mark.parametrize("text", ["a = 1 -- c\nAND b = 2", "a = 1 --", "a -- x\r\n= 1", "a /* x\n*/ = -- y\n1",
                                  "/* \n */ a --x", "a = '--\n'", "-- x\n-- y\n", "a\r-- x"])
def test_line_comment_rule_matches_lark(text: str) -> None:
    assert _our_tokens(text) == _reference_tokens(text)


@pytest.mark.parametrize("text", ["00", "007", "00L", "0012L", "00.5", "00e3", "000.e1", "0 00 1", "0x10", "0000",
                                  "100", "0L0", "00l1", ".0.0", "1.e", "1e+", "09.", "0\n0"])
def test_numbers_match_lark(text: str) -> None:
    assert _our_tokens(text) == _reference_tokens(text)


# ---- linear time -------------------------------------------------------------------------------------------
TRAPS = {  # each: text of about n characters that the lexer reads to its end (or refuses at once)
    "dashes": lambda n: "-" * n,
    "dashes after a line break": lambda n: "\n" + "-" * n,
    "dash-dash-letter": lambda n: "--a" * (n // 3),
    "plus": lambda n: "+" * n,
    "zeros": lambda n: "0" * n,
    "zeros then a float": lambda n: "0" * n + ".5",
    "zeros then digits": lambda n: "0" * n + "12L",
    "digits": lambda n: "1" * n,
    "digits and dots": lambda n: "1." * (n // 2),
    "exponents": lambda n: "1e" * (n // 2),
    "unterminated string": lambda n: "a = '" + "x" * n,
    "unterminated string of quotes": lambda n: "'" * n,
    "letters": lambda n: "a" * n,
    "parentheses": lambda n: "(" * n,
    "whitespace": lambda n: " " * n,
    "line comments": lambda n: "--\n" * (n // 3),
    "unterminated block comment": lambda n: "/*" + "*" * n,
    "unterminated block comment of dashes": lambda n: "/*" + "-" * n,
    "keywords": lambda n: "NOT " * (n // 4),
    "conditions": lambda n: "a = 'x' AND " * (n // 12),
}


def _lex_seconds(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        _our_tokens(text)
        best = min(best, time.perf_counter() - started)
        if best > 5:
            break  # already far beyond linear: no need to repeat
    return best


@pytest.mark.parametrize("trap", list(TRAPS))
def test_lexing_is_linear(trap: str, monkeypatch) -> None:
    """8x the input costs well under 64x the time (quadratic); limits lifted so the whole text is lexed."""
    for name in ("MAX_TOKENS", "MAX_TERMS", "MAX_IN_ITEMS", "MAX_NESTING"):
        monkeypatch.setattr(sql92_lexer, name, 10**9)
    small, large = TRAPS[trap](4096), TRAPS[trap](32768)
    _lex_seconds(small)  # warm up
    ratio = _lex_seconds(large) / max(_lex_seconds(small), 1e-4)
    assert ratio < 24, f"{trap}: 8x the input took {ratio:.0f}x the time"


@pytest.mark.parametrize("trap", list(TRAPS))
def test_every_trap_at_the_maximum_length_is_answered_quickly(trap: str) -> None:
    text = TRAPS[trap](MAX_SELECTOR_LENGTH - 8)
    sql92.clear_cache()
    started = time.perf_counter()
    try:
        compile_selector(text)
    except SelectorError:
        pass
    assert time.perf_counter() - started < 1.0  # ~1 to 30 ms; the quadratic lexer took minutes


def test_a_repeated_hostile_selector_is_compiled_once(monkeypatch) -> None:
    sql92.clear_cache()
    calls = []
    real_parse = sql92._parse
    monkeypatch.setattr(sql92, "_parse", lambda text: calls.append(1) or real_parse(text))
    text = "-" * 40_000
    for _ in range(50):
        with pytest.raises(SelectorError):
            compile_selector(text)
    assert len(calls) == 1


# ---- limits ----------------------------------------------------------------------------------------------
def _refusal(text: str) -> SelectorError:
    sql92.clear_cache()
    with pytest.raises(SelectorError) as info:
        compile_selector(text)
    return info.value


def test_terms_limit() -> None:
    ok = " OR ".join(f"a = 'v{i}'" for i in range(MAX_TERMS // 2))
    assert compile_selector(ok).evaluate({"a": "v1"}) is True
    error = _refusal(ok + " OR b = 'x'")
    assert f"selector has more than {MAX_TERMS:,} terms" in str(error)
    assert f"the maximum is {MAX_TERMS:,}" in str(error)
    assert error.position == len(ok) + 4  # refused at the first term too many, b


def test_in_items_limit_and_the_largest_list_is_a_set_lookup() -> None:
    items = ", ".join(f"'v{i}'" for i in range(MAX_IN_ITEMS))
    largest = compile_selector(f"a IN ({items})")
    small = compile_selector("a IN ('v0', 'v1')")
    for selector in (largest, small):  # warm up
        selector.evaluate({"a": "zz"})

    def per_call(selector) -> float:
        started = time.perf_counter()
        for _ in range(2000):
            selector.evaluate({"a": "zz"})
        return time.perf_counter() - started

    assert min(per_call(largest) for _ in range(3)) < 10 * min(per_call(small) for _ in range(3))
    error = _refusal(f"a IN ({items}, 'one more')")
    assert f"more than {MAX_IN_ITEMS:,} IN-list items; the maximum is {MAX_IN_ITEMS:,}" in str(error)
    # all lists together
    half = ", ".join(f"'v{i}'" for i in range(MAX_IN_ITEMS // 2 + 1))
    assert "IN-list items" in str(_refusal(f"a IN ({half}) OR b IN ({half})"))


def test_tokens_limit() -> None:
    text = " OR ".join(["(((((a)))))"] * 1000)
    error = _refusal(text)
    assert f"more than {MAX_TOKENS:,} tokens; the maximum is {MAX_TOKENS:,}" in str(error)


def test_nesting_limits() -> None:
    assert "parentheses nested more than" in str(_refusal("(" * (MAX_NESTING + 1) + "a)"))
    assert f"repeated more than {MAX_NESTING} times" in str(_refusal("a = " + "+" * (MAX_NESTING + 1) + "1"))
    assert f"repeated more than {MAX_NESTING} times" in str(_refusal("-" * 40_000))
    assert compile_selector("a = " + "+" * MAX_NESTING + "1").evaluate({"a": "1"}) is True


def test_length_limit_is_checked_first() -> None:
    error = _refusal("a = 'x' OR " * 7000)
    assert str(error).startswith(f"selector is 77,000 characters long; the maximum is {MAX_SELECTOR_LENGTH:,}")


def test_huge_integer_literal_is_refused_without_converting_it() -> None:
    assert "does not fit in a 64-bit integer" in str(_refusal("a > " + "9" * 60_000))


def test_deepest_expression_evaluates_on_a_deep_stack() -> None:
    """Evaluation recurses once per nesting level; the nesting limit keeps that far from the recursion limit."""
    text = "(" * (MAX_NESTING - 1) + "NOT " * (MAX_NESTING - 8) + "(a = 'x')" + ")" * (MAX_NESTING - 1)
    selector = compile_selector(text)

    def at_depth(n: int) -> bool | None:
        return selector.evaluate3({"a": "y"}) if n == 0 else at_depth(n - 1)

    assert at_depth(sys.getrecursionlimit() // 2) is ((MAX_NESTING - 8) % 2 == 1)


def test_largest_selectors_compile_quickly() -> None:
    """The per-limit worst cases (about 15-30 ms each on an idle core); generous bound for a loaded machine."""
    cases = [
        " OR ".join(f"a{i % 30} = 'v{i}'" for i in range(MAX_TERMS // 2)),
        "a IN (" + ", ".join(f"'v{i}'" for i in range(MAX_IN_ITEMS)) + ")",
        " OR ".join(["((((((a))))))"] * (MAX_TOKENS // 14)),
    ]
    for text in cases:
        sql92.clear_cache()
        started = time.perf_counter()
        compile_selector(text)
        assert time.perf_counter() - started < 1.0
