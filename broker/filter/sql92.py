"""SQL92 message selectors: parse (lark, LALR) + compile to closures + cache, with precise errors.

`compile_selector(text)` returns a `Selector` whose ``evaluate(properties)`` gives the reference
broker's delivery decision for a message's property map (see shared/reference/sql92-filter.md):
delivered only when the expression is TRUE; FALSE, UNKNOWN (null) and evaluation errors are "not
delivered". One deliberate difference: trailing text after a complete expression (``a LIKE 'x%'``,
``a > 1 + 1``), which the reference silently drops, is rejected here. Every rejection is a
`SelectorError` naming the position and what was expected there.

Parsing runs the compiler inline (lark's LALR parser calls the node builders on each reduction), so
there is no parse tree and no recursion. The lexer (sql92_lexer.py) is linear and enforces the size
limits (length, nesting, terms, IN-list items, tokens) as it streams tokens, so the largest selector
accepted compiles in a few tens of milliseconds and anything bigger is refused after no more work than
that; failures are cached like successes, so a client repeating a bad selector costs a dict lookup.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

import broker.filter.sql92_compile as c
from broker.filter.records import record_matcher
from broker.filter.sql92_lexer import (
    KEYWORDS,
    MAX_IN_ITEMS,
    MAX_NESTING,
    MAX_SELECTOR_LENGTH,
    MAX_TERMS,
    MAX_TOKENS,
    SelectorLexer,
    last_scan,
)
from broker.filter.sql92_values import (
    BOOL,
    DOUBLE,
    INT,
    LONG,
    LONG_MAX,
    INT_MAX,
    NULL_TYPE,
    STRING,
    DOUBLE_MIN_VALUE,
    EvaluationError,
)

CACHE_ENTRIES = 256
CACHE_CHARS = 8 * 1024 * 1024

# How terminals are named in error messages, in the order they are listed.
_DISPLAY = {
    "IDENT": "a property name", "STRING": "a 'string'", "NUMBER": "a number", "TRUE": "TRUE", "FALSE": "FALSE",
    "NULL": "NULL", "_LPAR": "'('", "PLUS": "'+'", "MINUS": "'-'", "NOT": "NOT", "EQ": "'='", "NE": "'<>'",
    "GT": "'>'", "GE": "'>='", "LT": "'<'", "LE": "'<='", "IS": "IS", "BETWEEN": "BETWEEN", "IN": "IN",
    "CONTAINS": "CONTAINS", "STARTSWITH": "STARTSWITH", "ENDSWITH": "ENDSWITH", "_COMMA": "','",
    "_RPAR": "')'", "AND": "AND", "OR": "OR", "$END": "end of input",
}
_ORDER = {name: i for i, name in enumerate(_DISPLAY)}


class SelectorError(ValueError):
    """A selector that does not compile. ``position`` is a 0-based character offset."""

    def __init__(self, reason: str, text: str, position: int, expected: tuple[str, ...] = ()) -> None:
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        where = f"column {column}" if line == 1 else f"line {line}, column {column}"
        message = f"{reason} at {where}"
        if expected:
            message += "; expected " + _join_alternatives(expected)
        super().__init__(message)
        self.reason = reason
        self.position = position
        self.line = line
        self.column = column
        self.expected = expected

    @property
    def message(self) -> str:
        return str(self)


def _join_alternatives(items: tuple[str, ...]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " or " + items[-1]


class Selector:
    """A compiled selector; ``evaluate`` is the delivery decision for one message.

    ``names`` are the property names the expression reads (nothing else of a message matters to it); None when
    unknown (raw records are then fully decoded). ``weight`` is a rough per-message evaluation cost (about one
    unit per token), for callers that budget how many messages one request may evaluate.
    """

    __slots__ = ("text", "_fn", "names", "weight", "record_matcher")

    def __init__(self, text: str, fn: c.Evaluator, names: tuple[str, ...] | None = None, weight: int = 1) -> None:
        self.text = text
        self._fn = fn
        self.names = names
        self.weight = max(1, weight)
        #: ``record_matcher(record)`` is ``matches_record(record)`` without the method call (for the pull loop)
        self.record_matcher = record_matcher(names, self.evaluate)

    def evaluate(self, properties: Mapping[str, str] | None) -> bool:
        """True only when the expression is TRUE for these properties (never raises)."""
        try:
            return self._fn(properties if properties is not None else {}) is True
        except Exception:  # conversion errors and anything unexpected: not delivered
            return False

    def evaluate3(self, properties: Mapping[str, str] | None) -> bool | None:
        """The three-valued result (None = UNKNOWN); raises EvaluationError where the reference throws."""
        return self._fn(properties if properties is not None else {})

    def matches_record(self, record: Any) -> bool:
        """Evaluate against a raw commit-log record: the same decision as ``evaluate(record_properties(record))``
        (False for a malformed record), reading only the properties the selector names."""
        return self.record_matcher(record)

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"


# ---- node building (called by the parser on each reduction) -----------------------------------------
def _number(token: Token) -> c.Node:
    text = token.value
    start, end = token.start_pos, token.end_pos
    if "." in text or "e" in text or "E" in text:
        value = float(text)
        if value == float("inf"):
            raise c.StaticError("{snippet} is too large for a double", start, end)
        if value < DOUBLE_MIN_VALUE:
            raise c.StaticError("{snippet} is below 4.9E-324 (the reference rejects zero written as a decimal;"
                                " write 0)", start, end)
        return c.literal(value, DOUBLE, start, end)
    digits = text.rstrip("lL")
    if len(digits) > len(str(LONG_MAX)) or int(digits) > LONG_MAX:  # no leading zeros: length says enough
        raise c.StaticError("{snippet} does not fit in a 64-bit integer", start, end)
    value = int(digits)
    return c.literal(value, INT if value <= INT_MAX else LONG, start, end)


def _string_value(token: Token) -> str:
    return token.value[1:-1].replace("''", "'")


class _Builder(Transformer):
    """Lark callbacks: children in, compiled `Node` out."""

    def start(self, children: list) -> c.Node:
        return c.as_condition(children[0], "a selector")

    def or_(self, children: list) -> c.Node:
        operands = [child for child in children if not isinstance(child, Token)]
        return operands[0] if len(operands) == 1 else c.logic("or", operands)

    def and_(self, children: list) -> c.Node:
        operands = [child for child in children if not isinstance(child, Token)]
        return operands[0] if len(operands) == 1 else c.logic("and", operands)

    def eq(self, children: list) -> c.Node:
        return c.equality(children[0], children[2])

    def ne(self, children: list) -> c.Node:
        return c.equality(children[0], children[2], negated=True)

    def is_null(self, children: list) -> c.Node:
        return c.is_null(children[0], False, children[-1].end_pos)

    def is_not_null(self, children: list) -> c.Node:
        return c.is_null(children[0], True, children[-1].end_pos)

    def gt(self, children: list) -> c.Node:
        return c.ordering(">", children[0], children[2])

    def ge(self, children: list) -> c.Node:
        return c.ordering(">=", children[0], children[2])

    def lt(self, children: list) -> c.Node:
        return c.ordering("<", children[0], children[2])

    def le(self, children: list) -> c.Node:
        return c.ordering("<=", children[0], children[2])

    def _string_test(self, kind: str, children: list, negated: bool) -> c.Node:
        token = children[-1]
        return c.string_test(kind, children[0], _string_value(token), negated, token.end_pos)

    def contains(self, children: list) -> c.Node:
        return self._string_test("contains", children, False)

    def not_contains(self, children: list) -> c.Node:
        return self._string_test("contains", children, True)

    def startswith(self, children: list) -> c.Node:
        return self._string_test("startswith", children, False)

    def not_startswith(self, children: list) -> c.Node:
        return self._string_test("startswith", children, True)

    def endswith(self, children: list) -> c.Node:
        return self._string_test("endswith", children, False)

    def not_endswith(self, children: list) -> c.Node:
        return self._string_test("endswith", children, True)

    def between(self, children: list) -> c.Node:
        return c.between(children[0], children[2], children[4], negated=False)

    def not_between(self, children: list) -> c.Node:
        return c.between(children[0], children[3], children[5], negated=True)

    def string_list(self, children: list) -> tuple[list[str], int]:
        return [_string_value(token) for token in children], children[-1].end_pos + 1

    def in_(self, children: list) -> c.Node:
        items, end = children[-1]
        return c.in_list(children[0], items, False, end)

    def not_in(self, children: list) -> c.Node:
        items, end = children[-1]
        return c.in_list(children[0], items, True, end)

    def pos(self, children: list) -> c.Node:
        return children[1]  # unary plus is the identity, even on a literal

    def neg(self, children: list) -> c.Node:
        return c.negate(children[1], children[0].start_pos)

    def not_(self, children: list) -> c.Node:
        return c.logical_not(children[1], children[0].start_pos)

    def string(self, children: list) -> c.Node:
        token = children[0]
        return c.literal(_string_value(token), STRING, token.start_pos, token.end_pos)

    def number(self, children: list) -> c.Node:
        return _number(children[0])

    def true(self, children: list) -> c.Node:
        return c.literal(True, BOOL, children[0].start_pos, children[0].end_pos)

    def false(self, children: list) -> c.Node:
        return c.literal(False, BOOL, children[0].start_pos, children[0].end_pos)

    def null(self, children: list) -> c.Node:
        return c.literal(None, NULL_TYPE, children[0].start_pos, children[0].end_pos)

    def prop(self, children: list) -> c.Node:
        token = children[0]
        return c.prop(token.value, token.start_pos, token.end_pos)


_GRAMMAR_PATH = Path(__file__).with_name("sql92.lark")
_parser: Lark | None = None
_parser_lock = threading.Lock()


def _get_parser() -> Lark:
    global _parser
    if _parser is None:
        with _parser_lock:
            if _parser is None:
                _parser = Lark(_GRAMMAR_PATH.read_text(), parser="lalr", lexer=SelectorLexer,
                               transformer=_Builder(), maybe_placeholders=False)
    return _parser


# ---- errors --------------------------------------------------------------------------------------------------
def _expected_names(names: Any) -> tuple[str, ...]:
    known = [n for n in names if n in _DISPLAY]
    return tuple(_DISPLAY[n] for n in sorted(set(known), key=_ORDER.__getitem__))


def _expected_at(text: str, position: int) -> tuple[str, ...]:
    """What the parser would accept at ``position`` (used to explain lexical errors)."""
    try:
        interactive = _get_parser().parse_interactive(text[:position])
        interactive.exhaust_lexer()
        return _expected_names(interactive.accepts())
    except Exception:  # the prefix itself is broken: say nothing rather than something wrong
        return ()


_LEXICAL_HINTS = {
    '"': " (string literals use single quotes)",
    "!": " (use <> for 'not equal')",
    "*": " (there is no arithmetic)",
    "/": " (there is no arithmetic)",
    "%": " (there is no arithmetic)",
    "|": " (use OR)",
    "&": " (use AND)",
}


def _syntax_error(text: str, exc: UnexpectedInput) -> SelectorError:
    if isinstance(exc, UnexpectedCharacters):
        position = exc.pos_in_stream
        char = text[position]
        reason = f"unexpected character {char!r}" + _LEXICAL_HINTS.get(char, "")
        if char == "/" and text.startswith("/*", position):
            reason = "unterminated /* comment"
        return SelectorError(reason, text, position, _expected_at(text, position))
    if isinstance(exc, UnexpectedToken):
        token = exc.token
        position = len(text) if token.type == "$END" else token.start_pos
        # The LALR table's lookahead set can be wider than what is really valid here; ask the parser.
        expected = _expected_at(text, position) or _expected_names(exc.expected)
        if token.type == "$END":
            return SelectorError("unexpected end of input", text, position, expected)
        shown = token.value if len(token.value) <= 40 else token.value[:37] + "..."
        reason = f"unexpected {shown!r}"
        if "end of input" in expected:
            reason += " after a complete expression"
            if text.startswith("--", position):
                reason += " (a -- comment needs a line break after it)"
        return SelectorError(reason, text, position, expected)
    return SelectorError(str(exc).splitlines()[0], text, getattr(exc, "pos_in_stream", 0) or 0)


def _parse(text: str) -> Selector:
    if len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"selector is {len(text):,} characters long; the maximum is {MAX_SELECTOR_LENGTH:,}",
                            text, MAX_SELECTOR_LENGTH)
    if not text.strip(" \t\n\r\f"):
        raise SelectorError("empty selector", text, len(text), ("a condition",))
    try:
        root = _get_parser().parse(text)
    except c.StaticError as exc:
        snippet = text[exc.start:exc.end]
        if len(snippet) > 40:
            snippet = snippet[:37] + "..."
        raise SelectorError(exc.message.replace("{snippet}", repr(snippet)), text, exc.start) from None
    except UnexpectedInput as exc:
        raise _syntax_error(text, exc) from None
    except RecursionError:
        raise SelectorError("expression too deeply nested", text, 0) from None
    scan = last_scan()
    return Selector(text, root.fn, scan.names, scan.weight)


# ---- cache ------------------------------------------------------------------------------------------------------
_cache: OrderedDict[str, Selector | SelectorError] = OrderedDict()
_cache_chars = 0
_cache_lock = threading.Lock()


def compile_selector(text: str) -> Selector:
    """The compiled selector for ``text`` (cached by exact text, failures included); SelectorError if invalid."""
    global _cache_chars
    with _cache_lock:
        entry = _cache.get(text)
        if entry is not None:
            _cache.move_to_end(text)
    if entry is None:
        try:
            entry = _parse(text)
        except SelectorError as exc:
            entry = exc
        with _cache_lock:
            if text not in _cache and len(text) <= MAX_SELECTOR_LENGTH:  # longer: refused in O(1) anyway
                _cache[text] = entry
                _cache_chars += len(text)
                while len(_cache) > CACHE_ENTRIES or _cache_chars > CACHE_CHARS:
                    old_text, _ = _cache.popitem(last=False)
                    _cache_chars -= len(old_text)
    if isinstance(entry, SelectorError):
        raise entry.with_traceback(None)
    return entry


def clear_cache() -> None:
    global _cache_chars
    with _cache_lock:
        _cache.clear()
        _cache_chars = 0


__all__ = ["Selector", "SelectorError", "EvaluationError", "compile_selector", "clear_cache", "KEYWORDS",
           "MAX_SELECTOR_LENGTH", "MAX_NESTING", "MAX_TERMS", "MAX_IN_ITEMS", "MAX_TOKENS"]
