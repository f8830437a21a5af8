"""Java ``.properties`` text -> ``(line, key, value)`` entries, as java.util.Properties.load reads them.

Used for broker.conf and by the standalone name server and controller for their own files.
"""

from __future__ import annotations

from broker.errors import ConfigError

__all__ = ["parse_properties"]

_WHITESPACE = " \t\f"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str, source: str = "broker.conf") -> list[tuple[int, str, str]]:
    """Parse Java ``.properties`` text into ``(line_number, key, value)`` in file order.

    Follows java.util.Properties.load: ``#``/``!`` comments, ``=``/``:``/whitespace separators,
    backslash line continuation (leading whitespace of the next line dropped), ``\\t \\n \\r \\f \\uXXXX``
    escapes. Unlike Java, unescaped trailing whitespace of a value is trimmed (a stray space after
    ``listenPort=10911 `` is a classic outage).
    """
    entries: list[tuple[int, str, str]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        start_line = index + 1
        line = lines[index].lstrip(_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue
        logical = line
        while _ends_with_continuation(logical) and index < len(lines):
            logical = logical[:-1] + lines[index].lstrip(_WHITESPACE)
            index += 1
        if _ends_with_continuation(logical):  # continuation at end of file: Java drops the backslash
            logical = logical[:-1]
        raw_key, raw_value = _split_key_value(logical)
        try:
            key = _unescape(raw_key)
            value = _unescape(_rstrip_unescaped(raw_value))
        except ValueError as exc:
            raise ConfigError(f"{source} line {start_line}: {exc}") from None
        entries.append((start_line, key, value))
    return entries


def _ends_with_continuation(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    pos = 0
    length = len(line)
    while pos < length:
        char = line[pos]
        if char == "\\":
            pos += 2
            continue
        if char in "=:" or char in _WHITESPACE:
            break
        pos += 1
    key = line[:pos]
    rest = line[pos:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def _rstrip_unescaped(value: str) -> str:
    end = len(value)
    while end > 0 and value[end - 1] in _WHITESPACE:
        backslashes = 0
        probe = end - 2
        while probe >= 0 and value[probe] == "\\":
            backslashes += 1
            probe -= 1
        if backslashes % 2 == 1:  # the whitespace is escaped: keep it
            break
        end -= 1
    return value[:end]


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out = []
    pos = 0
    length = len(text)
    while pos < length:
        char = text[pos]
        if char != "\\":
            out.append(char)
            pos += 1
            continue
        if pos + 1 >= length:
            pos += 1
            continue
        nxt = text[pos + 1]
        if nxt == "u":
            digits = text[pos + 2 : pos + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"malformed \\uXXXX escape {text[pos:pos + 6]!r}")
            out.append(chr(int(digits, 16)))
            pos += 6
            continue
        out.append(_SIMPLE_ESCAPES.get(nxt, nxt))
        pos += 2
    return "".join(out)
