"""Java value semantics for the SQL92 evaluator: string → number conversions and comparisons.

The reference broker compares a string property with a literal by converting the string with the
literal's Java type (`Integer.valueOf`, `Long.valueOf`, `Double.valueOf`, `Boolean.valueOf`); a
failed conversion is an evaluation error, which means "not delivered". These helpers reproduce
those conversions exactly (including Java's lenient double syntax) and cache the results of short
strings, since property values repeat a lot across messages.
"""

from __future__ import annotations

import math
import re

# Java classes a runtime value can have. NULL_TYPE marks a node whose value is always null.
NULL_TYPE, STRING, INT, LONG, DOUBLE, BOOL = range(6)
TYPE_NAMES = {NULL_TYPE: "null", STRING: "string", INT: "int", LONG: "long", DOUBLE: "double", BOOL: "boolean"}
NUMERIC_TYPES = frozenset((INT, LONG, DOUBLE))

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
DOUBLE_MIN_VALUE = 5e-324  # Java Double.MIN_VALUE (printed 4.9E-324)


class EvaluationError(Exception):
    """An expression could not be evaluated for one message (the message is not delivered)."""


_ERROR = EvaluationError("number conversion failed")
_BAD = object()  # cached "this string does not convert"
_CACHE_LIMIT = 8192
_CACHEABLE_LEN = 40

# Long.valueOf: optional sign, decimal digits (Unicode Nd in the BMP, since Java reads UTF-16 units).
_LONG_RE = re.compile(r"[+-]?\d+")
# Double.valueOf after trim(): NaN / Infinity, decimal with optional exponent, hex with binary exponent,
# an optional f/F/d/D suffix after a number. ASCII digits only.
_DOUBLE_RE = re.compile(
    r"(?P<sign>[+-]?)(?:(?P<special>NaN|Infinity)"
    r"|(?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?"
    r"|(?P<hex>0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)"
)
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))  # String.trim() strips every char <= U+0020

_long_cache: dict[str, object] = {}
_double_cache: dict[str, object] = {}


def _parse_long_text(text: str) -> object:
    if not _LONG_RE.fullmatch(text) or (not text.isascii() and any(ord(c) > 0xFFFF for c in text)):
        return _BAD
    value = int(text)
    return value if LONG_MIN <= value <= LONG_MAX else _BAD


def _parse_double_text(text: str) -> object:
    match = _DOUBLE_RE.fullmatch(text.strip(_JAVA_TRIM))
    if match is None:
        return _BAD
    negative = match.group("sign") == "-"
    special = match.group("special")
    if special is not None:
        value = math.nan if special == "NaN" else math.inf
    elif match.group("dec") is not None:
        value = float(match.group("dec"))
    else:
        try:
            value = float.fromhex(match.group("hex"))
        except OverflowError:
            value = math.inf
    return -value if negative else value


def _cached(cache: dict[str, object], parse, text: str) -> object:
    value = cache.get(text)
    if value is None:
        value = parse(text)
        if len(text) <= _CACHEABLE_LEN:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[text] = value
    return value


def to_long(text: str) -> int:
    """Java Long.valueOf(text); EvaluationError when it would throw."""
    value = _long_cache.get(text)
    if value is None:
        value = _cached(_long_cache, _parse_long_text, text)
    if value is _BAD:
        raise _ERROR
    return value  # type: ignore[return-value]


def to_int(text: str) -> int:
    """Java Integer.valueOf(text); EvaluationError when it would throw."""
    value = _long_cache.get(text)
    if value is None:
        value = _cached(_long_cache, _parse_long_text, text)
    if value is _BAD or not INT_MIN <= value <= INT_MAX:  # type: ignore[operator]
        raise _ERROR
    return value  # type: ignore[return-value]


def to_double(text: str) -> float:
    """Java Double.valueOf(text) (trims blanks; NaN, Infinity, hex floats, f/d suffixes)."""
    value = _double_cache.get(text)
    if value is None:
        value = _cached(_double_cache, _parse_double_text, text)
    if value is _BAD:
        raise _ERROR
    return value  # type: ignore[return-value]


def to_bool(text: str) -> bool:
    """Java Boolean.valueOf(text): true iff the text is "true" ignoring case."""
    return len(text) == 4 and text.isascii() and text.lower() == "true"


def double_compare(x: float, y: float) -> int:
    """Java Double.compare: NaN is above everything and equal to itself; -0.0 < 0.0."""
    if x < y:
        return -1
    if x > y:
        return 1
    x_nan = x != x
    y_nan = y != y
    if x_nan or y_nan:
        return x_nan - y_nan
    if x == 0.0:
        sx, sy = math.copysign(1.0, x), math.copysign(1.0, y)
        return (sx > sy) - (sx < sy)
    return 0


def int_compare(x: int, y: int) -> int:
    return (x > y) - (x < y)


def _cast_error(lv: object, rv: object) -> int:
    raise EvaluationError("Boolean compared with a String (ClassCastException in the reference broker)")


def _incomparable(lv: object, rv: object) -> int:
    return -1


def coercing_compare(left_type: int, right_type: int, ordering: bool):
    """The reference's comparison of two non-null values of the given Java classes.

    Returns ``compare(lv, rv) -> int`` (negative / 0 / positive); it raises EvaluationError where the
    reference throws. ``ordering`` selects the >, >=, <, <= flavour, which parses two strings as doubles.
    """
    if left_type == right_type:
        if left_type == STRING:
            if ordering:
                return lambda lv, rv: double_compare(to_double(lv), to_double(rv))
            return lambda lv, rv: 0 if lv == rv else (1 if lv > rv else -1)
        if left_type == DOUBLE:
            return double_compare
        return int_compare  # int, long, boolean (False < True)
    pair = (left_type, right_type)
    if pair in ((INT, LONG), (LONG, INT)):
        return int_compare
    if left_type == DOUBLE and right_type in (INT, LONG):
        return lambda lv, rv: double_compare(lv, float(rv))
    if right_type == DOUBLE and left_type in (INT, LONG):
        return lambda lv, rv: double_compare(float(lv), rv)
    if left_type == STRING:
        if right_type == BOOL:
            return lambda lv, rv: int_compare(to_bool(lv), rv)
        if right_type == INT:
            return lambda lv, rv: int_compare(to_int(lv), rv)
        if right_type == LONG:
            return lambda lv, rv: int_compare(to_long(lv), rv)
        if right_type == DOUBLE:
            return lambda lv, rv: double_compare(to_double(lv), rv)
    if right_type == STRING:
        if left_type == INT:
            return lambda lv, rv: int_compare(lv, to_int(rv))
        if left_type == LONG:
            return lambda lv, rv: int_compare(lv, to_long(rv))
        if left_type == DOUBLE:
            return lambda lv, rv: double_compare(lv, to_double(rv))
        if left_type == BOOL:
            return _cast_error
    return _incomparable  # boolean vs number: "not comparable"


def string_converter(literal_type: int):
    """How a string property is converted to meet a literal of ``literal_type`` (None: no conversion)."""
    return {INT: to_int, LONG: to_long, DOUBLE: to_double, BOOL: to_bool}.get(literal_type)
