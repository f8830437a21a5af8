"""The SQL92 selector lexer: linear in the input, and where the selector size limits are enforced.

Lark's own lexer tries every terminal regex at each position. The ``--`` comment terminal
(``--`` up to a line break) scans to the end of the line before it can fail, so a selector that is
a run of dashes with no line break after it cost quadratic time (40 KB of ``-`` held the broker's
event loop for 31 s). This lexer uses the grammar's terminal regexes, but skips whitespace and
comments in runs with one regex match, and lets that match see ``--`` comments only up to the last
line terminator of the text: a ``--`` opens a comment exactly when a line terminator follows it
somewhere, so inside that window it always finds its line break, and past it ``-`` is just MINUS.

Every other terminal either cannot fail after scanning (identifiers, whitespace, operators) or
fails only where no other terminal can match, which ends lexing with an error at once (an
unterminated 'string' or /* comment). NUMBER scans a whole run of digits looking for a float
reading before it settles for a leading ``0`` (``00`` is ``0`` then ``0``); the lexer remembers that
run so the following zeros are not scanned again.

The lexer also retypes identifiers that spell a keyword and enforces the size limits while it
streams tokens to the LALR parser, so a selector over a limit is refused after at most that limit's
worth of parsing: parenthesis nesting, runs of prefix operators, terms, IN-list items and tokens.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple

from lark import Token
from lark.exceptions import UnexpectedCharacters
from lark.lexer import Lexer

from broker.filter.sql92_compile import MAX_DEPTH, StaticError

#: Longest selector text accepted, in characters (checked before anything else).
MAX_SELECTOR_LENGTH = 64 * 1024
#: Deepest parenthesis nesting, longest run of prefix operators (NOT + -) and deepest expression tree.
MAX_NESTING = MAX_DEPTH
#: Most terms (property names and literals, IN-list items not counted) in one selector.
MAX_TERMS = 1_000
#: Most IN-list items in one selector (all lists together); membership is a set lookup whatever the size.
MAX_IN_ITEMS = 2_000
#: Most tokens (names, literals, keywords, operators, parentheses, commas) in one selector.
MAX_TOKENS = 5_000
#: How many tokens' worth of evaluation work a CONTAINS counts for in `ScanSummary.weight` (it scans the whole
#: property value, up to 32 KB, where every other operator does a constant amount of work).
CONTAINS_WEIGHT = 100

KEYWORDS = ("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH",
            "ENDSWITH")
_KEYWORD_TYPES = {k: k for k in KEYWORDS}
_OPERANDS = frozenset({"IDENT", "NUMBER", "STRING", "TRUE", "FALSE", "NULL"})
_PREFIX_OPERATORS = frozenset({"NOT", "PLUS", "MINUS"})
_LINE_COMMENT = "LINE_COMMENT"

_DIGITS = re.compile("[0-9]*")
_scan = threading.local()


class ScanSummary(NamedTuple):
    """What the lexer saw of a whole selector."""

    names: tuple[str, ...]  # distinct property names, in order of appearance
    weight: int  # rough evaluation cost per message: tokens outside IN lists, CONTAINS counted CONTAINS_WEIGHT times


def last_scan() -> ScanSummary:
    """The summary of the last text this thread lexed to its end."""
    return getattr(_scan, "summary", _EMPTY_SCAN)


_EMPTY_SCAN = ScanSummary((), 0)


def _limit_error(what: str, limit: int, start: int, end: int) -> StaticError:
    return StaticError(f"selector has more than {limit:,} {what}; the maximum is {limit:,}", start, end)


class SelectorLexer(Lexer):
    """Lark custom lexer (``lexer=SelectorLexer``): the grammar's terminals, lexed in linear time."""

    __future_interface__ = 2

    def __init__(self, lexer_conf: Any) -> None:
        ignore = frozenset(lexer_conf.ignore)
        significant = [t for t in lexer_conf.terminals if t.name not in ignore]
        # Same order as lark's basic lexer: longer fixed operators (>=) before their prefixes (>).
        significant.sort(key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name))
        self._pattern = re.compile("|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in significant))
        # Runs of whitespace and comments are skipped with one match. With line comments: only ever matched
        # up to the last line terminator, so a `--` there always finds its line break and never scans in vain.
        skipped = {t.name: t.pattern.to_regexp() for t in lexer_conf.terminals if t.name in ignore}
        self._skip_with_comments = re.compile("(?:" + "|".join(skipped.values()) + ")+")
        self._skip = re.compile("(?:" + "|".join(r for n, r in skipped.items() if n != _LINE_COMMENT) + ")+")
        self._allowed = {t.name for t in significant}
        self._terminals_by_name = lexer_conf.terminals_by_name

    def lex(self, lexer_state: Any, parser_state: Any) -> Iterator[Token]:
        source = lexer_state.text
        text, pos, end = source.text, lexer_state.line_ctr.char_pos, source.end
        # A `--` opens a comment only when a line terminator follows it somewhere.
        last_break = max(text.rfind("\n", pos, end), text.rfind("\r", pos, end))
        match, keywords = self._pattern.match, _KEYWORD_TYPES
        skip_with_comments, skip = self._skip_with_comments.match, self._skip.match
        names: dict[str, None] = {}
        _scan.summary = _EMPTY_SCAN
        depth = prefix_run = terms = in_items = tokens = contains = 0
        in_list = after_in = False
        zeros_end = -1
        while True:
            if pos < last_break:
                skipped = skip_with_comments(text, pos, last_break + 1)
                if skipped is not None:
                    pos = skipped.end()
            skipped = skip(text, pos, end)  # whitespace after the last line break, a /* comment across it
            if skipped is not None:
                pos = skipped.end()
            if pos >= end:
                break
            if pos + 1 < zeros_end and text[pos] == "0":
                kind, stop, value = "NUMBER", pos + 1, "0"  # inside a digit run known to have no float reading
            else:
                found = match(text, pos, end)
                if found is None:
                    raise UnexpectedCharacters(text, pos, None, None, allowed=self._allowed, state=parser_state,
                                               terminals_by_name=self._terminals_by_name)
                kind = found.lastgroup
                stop = found.end()
                value = found.group()
                if value == "0" and stop < end and "0" <= text[stop] <= "9":
                    # `00...`: NUMBER scanned the whole digit run for a float reading and found none; remember
                    # where the run ends so the following zeros are not scanned again (quadratic otherwise).
                    zeros_end = _DIGITS.match(text, stop, end).end()
            tokens += 1
            if tokens > MAX_TOKENS:
                raise _limit_error("tokens", MAX_TOKENS, pos, stop)
            if kind == "IDENT":
                kind = keywords.get(value.upper(), kind)
            if kind in _OPERANDS:
                prefix_run = 0
                if in_list and kind == "STRING":
                    in_items += 1
                    if in_items > MAX_IN_ITEMS:
                        raise _limit_error("IN-list items", MAX_IN_ITEMS, pos, stop)
                else:
                    terms += 1
                    if terms > MAX_TERMS:
                        raise _limit_error("terms (property names and literals)", MAX_TERMS, pos, stop)
                    if kind == "IDENT":
                        names[value] = None
            elif kind in _PREFIX_OPERATORS:
                prefix_run += 1
                if prefix_run > MAX_NESTING:
                    raise StaticError(f"NOT, + and - repeated more than {MAX_NESTING} times in a row", pos, stop)
            elif kind == "_LPAR":
                depth += 1
                if depth > MAX_NESTING:
                    raise StaticError(f"parentheses nested more than {MAX_NESTING} levels deep", pos, stop)
                in_list = after_in
            elif kind == "_RPAR":
                depth -= 1
                prefix_run = 0
                in_list = False
            elif kind != "_COMMA":
                in_list = False
                if kind == "CONTAINS":
                    contains += 1
            after_in = kind == "IN"
            token = Token(kind, value, pos, None, None, None, None, stop)
            lexer_state.last_token = token
            pos = stop
            yield token
        # IN-list items and their commas cost nothing per message (the list is one set lookup).
        _scan.summary = ScanSummary(tuple(names), tokens - 2 * in_items + contains * (CONTAINS_WEIGHT - 1))


__all__ = ["SelectorLexer", "KEYWORDS", "MAX_SELECTOR_LENGTH", "MAX_NESTING", "MAX_TERMS", "MAX_IN_ITEMS",
           "MAX_TOKENS", "ScanSummary", "last_scan"]
