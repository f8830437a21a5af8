"""Broker-side message filtering: TAG hash sets and SQL92 selectors.

`build_filter(expression_type, sub_string)` turns a subscription into a `MessageFilter` (None when it
matches everything). A filter has up to two stages, matching the store's `get_messages` hooks:
``tag_filter(tags_code)`` on consume-queue units (cheap, TAG subscriptions) and
``record_filter(record)`` on the raw commit-log record of a candidate (SQL92: only the record's
properties are decoded).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from broker.filter.records import record_properties
from broker.filter.sql92 import Selector, SelectorError, compile_selector
from broker.filter.tags import parse_tag_expression
from protocol.hashing import java_string_hash

EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"
RETRY_TOPIC_PREFIX = "%RETRY%"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_TAGS = "TAGS"


class UnsupportedExpressionType(ValueError):
    """An expression type other than TAG / SQL92."""


class MessageFilter:
    """A subscription's compiled filter (TAG codes and/or a SQL92 selector)."""

    __slots__ = ("tag_codes", "selector", "tag_filter", "record_filter")

    def __init__(self, tag_codes: frozenset[int] | None = None, selector: Selector | None = None,
                 record_filter: Callable[[Any], bool] | None = None) -> None:
        self.tag_codes = tag_codes
        self.selector = selector
        self.tag_filter: Callable[[int], bool] | None = tag_codes.__contains__ if tag_codes is not None else None
        if record_filter is None and selector is not None:
            record_filter = selector.record_matcher
        self.record_filter: Callable[[Any], bool] | None = record_filter

    def matches_properties(self, properties: Mapping[str, str]) -> bool:
        """Both stages against an already decoded property map."""
        if self.tag_codes is not None:
            tag = properties.get(PROPERTY_TAGS)
            code = java_string_hash(tag) if tag else 0
            if code not in self.tag_codes:
                return False
        return self.selector is None or self.selector.evaluate(properties)


def normalize_expression_type(expression_type: str | None) -> str:
    return (expression_type or EXPRESSION_TAG).strip().upper() or EXPRESSION_TAG


def build_filter(expression_type: str | None, sub_string: str | None) -> MessageFilter | None:
    """The filter for one subscription; None matches everything.

    Raises SelectorError for a SQL92 expression that does not compile and UnsupportedExpressionType.
    """
    kind = normalize_expression_type(expression_type)
    if kind == EXPRESSION_TAG:
        codes = parse_tag_expression(sub_string)
        return None if codes is None else MessageFilter(tag_codes=codes)
    if kind == EXPRESSION_SQL92:
        return MessageFilter(selector=compile_selector(sub_string or ""))
    raise UnsupportedExpressionType(f"unsupported expression type {expression_type!r} (TAG or SQL92)")


def retry_filter(lookup: Callable[[str], MessageFilter | None]) -> MessageFilter:
    """Filter for a ``%RETRY%<group>`` queue: each message is checked with the group's filter for its
    original topic (the RETRY_TOPIC property); ``lookup(topic)`` returns that filter or None (deliver)."""

    def matches(record: Any) -> bool:
        try:
            properties = record_properties(record)
        except Exception:
            return False
        real_topic = properties.get(PROPERTY_RETRY_TOPIC)
        if not real_topic:
            return True
        message_filter = lookup(real_topic)
        return message_filter is None or message_filter.matches_properties(properties)

    return MessageFilter(record_filter=matches)


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_TOPIC_PREFIX)


__all__ = [
    "MessageFilter", "Selector", "SelectorError", "UnsupportedExpressionType", "build_filter", "compile_selector",
    "retry_filter", "is_retry_topic", "normalize_expression_type", "parse_tag_expression", "record_properties",
    "EXPRESSION_TAG", "EXPRESSION_SQL92",
]
