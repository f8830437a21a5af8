"""TAG subscriptions: ``"TagA || TagB"`` → the set of Java hash codes the consume queue is checked against.

The broker computes the codes from the expression text itself; a client's codeSet is never trusted.
The check is hash-only (two tags can share a code), so clients re-filter by exact tag string.
"""

from __future__ import annotations

from protocol.hashing import java_string_hash

SUB_ALL = "*"


def parse_tag_expression(sub_string: str | None) -> frozenset[int] | None:
    """Hash codes of the tags in ``"A || B"``; None means "match everything" (``*``, empty or None).

    Whitespace around each tag is ignored and empty pieces are skipped.
    """
    if sub_string is None:
        return None
    text = sub_string.strip()
    if not text or text == SUB_ALL:
        return None
    codes = {java_string_hash(tag) for tag in (piece.strip() for piece in text.split("||")) if tag}
    return frozenset(codes) if codes else None


def tags_of_expression(sub_string: str | None) -> list[str]:
    """The tag strings of an expression (what a client re-filters with); [] for match-all."""
    if sub_string is None or sub_string.strip() in ("", SUB_ALL):
        return []
    return [tag for tag in (piece.strip() for piece in sub_string.split("||")) if tag]
