"""Compiles parsed SQL92 selector pieces into evaluator closures, applying the reference's static checks.

Every node of the expression becomes a `Node` holding a closure ``fn(properties) -> value`` where
value is True / False / None (SQL UNKNOWN) for conditions, or a str / int / float / bool / None for
operands. The Java class of an operand's non-null value is known statically (a property is always a
String, a literal has its own class, a condition is a Boolean), so each comparison picks its coercion
once, at compile time, and the common shapes (property vs literal) get dedicated closures. AND / OR
chains are flattened into one n-ary node so long chains neither recurse deeply nor nest closures.

Evaluation errors (a failed number conversion, the reference's Boolean-vs-String ClassCastException)
raise `EvaluationError`; the caller turns them into "not delivered".
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from broker.filter.sql92_values import (
    BOOL,
    DOUBLE,
    INT,
    LONG,
    NULL_TYPE,
    NUMERIC_TYPES,
    STRING,
    EvaluationError,
    coercing_compare,
    double_compare,
    to_bool,
    to_double,
    to_int,
    to_long,
)

Evaluator = Callable[[Mapping[str, str]], Any]

# Syntactic classes, which the static checks depend on (a negation is not a literal, ...).
LITERAL, PROPERTY, NEGATION, CONDITION = "literal", "property", "negation", "condition"

MAX_DEPTH = 128

_ORDERING = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


class StaticError(Exception):
    """A selector the reference rejects at parse time; ``span`` locates the offending part."""

    def __init__(self, message: str, start: int, end: int) -> None:
        super().__init__(message)
        self.message = message
        self.start = start
        self.end = end


class Node:
    """One compiled sub-expression."""

    __slots__ = ("kind", "jtype", "fn", "start", "end", "depth", "value", "name", "logic", "operands")

    def __init__(self, kind: str, jtype: int, fn: Evaluator, start: int, end: int, depth: int = 1, *,
                 value: Any = None, name: str | None = None, logic: str | None = None,
                 operands: tuple[Evaluator, ...] = ()) -> None:
        self.kind = kind
        self.jtype = jtype  # Java class of the non-null value; NULL_TYPE: always null
        self.fn = fn
        self.start = start
        self.end = end
        self.depth = depth
        self.value = value  # the value of a constant (literal or folded negation)
        self.name = name  # property name
        self.logic = logic  # "and" / "or" for flattenable chains
        self.operands = operands

    @property
    def is_constant(self) -> bool:
        return self.kind == LITERAL or (self.kind == NEGATION and self.logic == "const")

    @property
    def is_condition(self) -> bool:
        """A Java BooleanExpression: comparisons, logic, TRUE / FALSE / NULL literals."""
        return self.kind == CONDITION or (self.kind == LITERAL and self.jtype in (BOOL, NULL_TYPE))


def _constant_fn(value: Any) -> Evaluator:
    return lambda props: value


def _depth(*children: Node) -> int:
    depth = 1 + max(child.depth for child in children)
    if depth > MAX_DEPTH:
        first = min(c.start for c in children)
        raise StaticError(f"expression nested more than {MAX_DEPTH} levels deep", first, first + 1)
    return depth


def _span(*children: Node) -> tuple[int, int]:
    return min(c.start for c in children), max(c.end for c in children)


# ---- leaves ----------------------------------------------------------------------------------------
def literal(value: Any, jtype: int, start: int, end: int) -> Node:
    return Node(LITERAL, jtype, _constant_fn(value), start, end, value=value)


def prop(name: str, start: int, end: int) -> Node:
    return Node(PROPERTY, STRING, lambda props: props.get(name), start, end, name=name)


# ---- unary -----------------------------------------------------------------------------------------
def negate(operand: Node, start: int) -> Node:
    """``-x``: numbers are negated; anything else (a property's string, a boolean) gives null."""
    end = operand.end
    depth = _depth(operand)
    if operand.is_constant:
        value = operand.value
        if operand.jtype in NUMERIC_TYPES and value is not None:
            return Node(NEGATION, operand.jtype, _constant_fn(-value), start, end, depth, value=-value, logic="const")
        return Node(NEGATION, NULL_TYPE, _constant_fn(None), start, end, depth, logic="const")
    if operand.kind == PROPERTY:
        return Node(NEGATION, NULL_TYPE, _constant_fn(None), start, end, depth, logic="const")
    inner = operand.fn  # a condition: evaluated for its errors, the result is never a number

    def negated(props: Mapping[str, str]) -> None:
        inner(props)
        return None

    return Node(NEGATION, NULL_TYPE, negated, start, end, depth)


def as_condition(node: Node, context: str) -> Node:
    """The reference's asBooleanExpression: conditions pass, a bare property is cast, the rest is an error."""
    if node.is_condition:
        return node
    if node.kind == PROPERTY:
        name = node.name

        def cast(props: Mapping[str, str]) -> bool | None:
            return None if props.get(name) is None else False  # a String is never a Boolean

        return Node(CONDITION, BOOL, cast, node.start, node.end, node.depth)
    raise StaticError(f"{{snippet}} is not a condition ({context} needs a true/false expression)",
                      node.start, node.end)


def logical_not(operand: Node, start: int) -> Node:
    operand = as_condition(operand, "NOT")
    inner = operand.fn

    def negation(props: Mapping[str, str]) -> bool | None:
        result = inner(props)
        return None if result is None else not result

    return Node(CONDITION, BOOL, negation, start, operand.end, _depth(operand))


# ---- AND / OR ----------------------------------------------------------------------------------------
def logic(op: str, operands: list[Node]) -> Node:
    """n-ary Kleene AND / OR, left to right with short-circuit (same results and errors as nested pairs)."""
    context = op.upper()
    fns: list[Evaluator] = []
    for node in operands:
        node = as_condition(node, context)
        if node.logic == op:
            fns.extend(node.operands)
        else:
            fns.append(node.fn)
    start, end = _span(*operands)
    fn = _and(tuple(fns)) if op == "and" else _or(tuple(fns))
    return Node(CONDITION, BOOL, fn, start, end, _depth(*operands), logic=op, operands=tuple(fns))


def _and(fns: tuple[Evaluator, ...]) -> Evaluator:
    if len(fns) == 2:
        first, second = fns

        def and2(props: Mapping[str, str]) -> bool | None:
            a = first(props)
            if a is False:
                return False
            b = second(props)
            if b is False:
                return False
            return None if a is None or b is None else True

        return and2

    def and_n(props: Mapping[str, str]) -> bool | None:
        unknown = False
        for fn in fns:
            result = fn(props)
            if result is False:
                return False
            if result is None:
                unknown = True
        return None if unknown else True

    return and_n


def _or(fns: tuple[Evaluator, ...]) -> Evaluator:
    if len(fns) == 2:
        first, second = fns

        def or2(props: Mapping[str, str]) -> bool | None:
            a = first(props)
            if a is True:
                return True
            b = second(props)
            if b is True:
                return True
            return None if a is None or b is None else False

        return or2

    def or_n(props: Mapping[str, str]) -> bool | None:
        unknown = False
        for fn in fns:
            result = fn(props)
            if result is True:
                return True
            if result is None:
                unknown = True
        return None if unknown else False

    return or_n


# ---- comparisons ---------------------------------------------------------------------------------------
def _check_equality_operand(node: Node, op: str) -> None:
    if node.kind == LITERAL and node.jtype == NULL_TYPE:
        raise StaticError(f"'{op}' cannot compare with NULL (use IS NULL / IS NOT NULL)", node.start, node.end)


def _check_ordering_operand(node: Node, op: str) -> None:
    if node.kind == LITERAL:
        if node.jtype not in NUMERIC_TYPES:
            raise StaticError(f"'{op}' needs a number or a property, not {{snippet}}", node.start, node.end)
    elif node.is_condition:
        raise StaticError(f"'{op}' cannot compare the condition {{snippet}}", node.start, node.end)


def equality(left: Node, right: Node, negated: bool = False) -> Node:
    """``=`` (``<>`` is its negation)."""
    op = "<>" if negated else "="
    _check_equality_operand(left, op)
    _check_equality_operand(right, op)
    if left.kind == LITERAL and right.kind == LITERAL and left.jtype == BOOL and right.jtype != BOOL:
        raise StaticError(f"'{op}' cannot compare a boolean literal with {{snippet}}", right.start, right.end)
    fn = _equality_fn(left, right)
    if negated:
        inner = fn

        def fn(props: Mapping[str, str]) -> bool | None:
            result = inner(props)
            return None if result is None else not result

    return Node(CONDITION, BOOL, fn, *_span(left, right), _depth(left, right))


def _equality_fn(left: Node, right: Node) -> Evaluator:
    if left.kind == PROPERTY and right.is_constant:
        name, k = left.name, right.value
        if k is None:
            return lambda props: props.get(name) is None  # null = null is TRUE; 'x' = null is FALSE
        rtype = right.jtype
        if rtype == STRING:
            def prop_eq_str(props: Mapping[str, str]) -> bool | None:
                v = props.get(name)
                return None if v is None else v == k

            return prop_eq_str
        if rtype in (INT, LONG, BOOL):
            convert = to_int if rtype == INT else to_long if rtype == LONG else to_bool

            def prop_eq_number(props: Mapping[str, str]) -> bool | None:
                v = props.get(name)
                return None if v is None else convert(v) == k

            return prop_eq_number
    compare = coercing_compare(left.jtype, right.jtype, ordering=False)
    same = left.jtype == right.jtype and left.jtype != DOUBLE
    left_fn, right_fn = left.fn, right.fn

    def generic_eq(props: Mapping[str, str]) -> bool | None:
        lv = left_fn(props)
        rv = right_fn(props)
        if lv is None:
            return True if rv is None else None
        if rv is None:
            return False
        return lv == rv if same else compare(lv, rv) == 0

    return generic_eq


def ordering(op: str, left: Node, right: Node) -> Node:
    """``>``, ``>=``, ``<``, ``<=``."""
    _check_ordering_operand(left, op)
    _check_ordering_operand(right, op)
    return Node(CONDITION, BOOL, _ordering_fn(op, left, right), *_span(left, right), _depth(left, right))


def _ordering_fn(op: str, left: Node, right: Node) -> Evaluator:
    test = _ORDERING[op]
    if left.kind == PROPERTY and right.is_constant:
        name, k = left.name, right.value
        if k is None:
            return _constant_fn(None)
        if right.jtype in (INT, LONG):
            convert = to_int if right.jtype == INT else to_long

            def prop_vs_integer(props: Mapping[str, str]) -> bool | None:
                v = props.get(name)
                return None if v is None else test(convert(v), k)

            return prop_vs_integer
        if right.jtype == DOUBLE:
            def prop_vs_double(props: Mapping[str, str]) -> bool | None:
                v = props.get(name)
                return None if v is None else test(double_compare(to_double(v), k), 0)

            return prop_vs_double
    compare = coercing_compare(left.jtype, right.jtype, ordering=True)
    left_fn, right_fn = left.fn, right.fn

    def generic_ordering(props: Mapping[str, str]) -> bool | None:
        lv = left_fn(props)
        if lv is None:
            return None
        rv = right_fn(props)
        if rv is None:
            return None
        return test(compare(lv, rv), 0)

    return generic_ordering


def between(value: Node, low: Node, high: Node, negated: bool) -> Node:
    """``v BETWEEN lo AND hi`` is ``v >= lo AND v <= hi``; NOT BETWEEN is ``v < lo OR v > hi``."""
    if not negated and low.kind == LITERAL and high.kind == LITERAL:
        if low.jtype == NULL_TYPE or high.jtype == NULL_TYPE:
            raise StaticError("BETWEEN bounds cannot be NULL", low.start, high.end)
        if low.jtype in NUMERIC_TYPES and high.jtype in NUMERIC_TYPES:
            order = coercing_compare(high.jtype, low.jtype, ordering=True)(high.value, low.value)
            if order < 0:
                raise StaticError("BETWEEN needs the low bound first, got {snippet}", low.start, high.end)
    if negated:
        return logic("or", [ordering("<", value, low), ordering(">", value, high)])
    return logic("and", [ordering(">=", value, low), ordering("<=", value, high)])


def is_null(operand: Node, negated: bool, end: int) -> Node:
    """``IS NULL`` / ``IS NOT NULL``: always TRUE or FALSE."""
    if operand.kind == PROPERTY:
        name = operand.name
        fn = (lambda props: props.get(name) is not None) if negated else (lambda props: props.get(name) is None)
    else:
        inner = operand.fn
        fn = (lambda props: inner(props) is not None) if negated else (lambda props: inner(props) is None)
    return Node(CONDITION, BOOL, fn, operand.start, end, _depth(operand))


def in_list(operand: Node, items: list[str], negated: bool, end: int) -> Node:
    """``prop [NOT] IN ('a', 'b')``: exact string membership; an absent property gives null."""
    if operand.kind != PROPERTY:
        raise StaticError("IN needs a property name on its left, not {snippet}", operand.start, operand.end)
    name = operand.name
    members = frozenset(items)
    if negated:
        def not_in(props: Mapping[str, str]) -> bool | None:
            v = props.get(name)
            return None if v is None else v not in members

        fn = not_in
    else:
        def is_in(props: Mapping[str, str]) -> bool | None:
            v = props.get(name)
            return None if v is None else v in members

        fn = is_in
    return Node(CONDITION, BOOL, fn, operand.start, end, _depth(operand))


_STRING_TESTS = {
    "contains": lambda value, search: search in value,
    "startswith": str.startswith,
    "endswith": str.endswith,
}


def string_test(kind: str, operand: Node, search: str, negated: bool, end: int) -> Node:
    """[NOT] CONTAINS / STARTSWITH / ENDSWITH: two-valued; absent, non-string or '' search → FALSE."""
    test = _STRING_TESTS[kind]
    inner = operand.fn
    if search == "" or operand.jtype != STRING:
        def never(props: Mapping[str, str]) -> bool:
            inner(props)  # still evaluated: its errors count
            return False

        fn = never
    elif negated:
        def lacks(props: Mapping[str, str]) -> bool:
            v = inner(props)
            return v is not None and not test(v, search)

        fn = lacks
    else:
        def has(props: Mapping[str, str]) -> bool:
            v = inner(props)
            return v is not None and test(v, search)

        fn = has
    return Node(CONDITION, BOOL, fn, operand.start, end, _depth(operand))


__all__ = [
    "EvaluationError", "Node", "StaticError", "MAX_DEPTH", "literal", "prop", "negate", "as_condition",
    "logical_not", "logic", "equality", "ordering", "between", "is_null", "in_list", "string_test",
]
