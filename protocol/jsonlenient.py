"""JSON that tolerates fastjson's non-standard output (bare integer object keys such as `{0:"a"}`).

fastjson writes `Map<Integer|Long, V>` keys without quotes in config/*.json and in old-style
TopicRouteData. We parse standard JSON first (fast path) and only on failure quote bare integer keys
found outside string literals, then retry.
"""

from __future__ import annotations

import json
import re

__all__ = ["loads_lenient", "dumps_compact"]

# A string literal (skipped unchanged) or a bare integer key right after `{` or `,`.
_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)', re.DOTALL)

_compact_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)


def _quote_key(match: re.Match[str]) -> str:
    if match.group(2) is None:
        return match.group(0)
    return f'{match.group(1)}"{match.group(2)}"{match.group(3)}'


def loads_lenient(data: bytes | bytearray | memoryview | str) -> object:
    """Parse JSON; accept fastjson bare integer keys. Raises ValueError (with position) on real garbage."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            text = str(data, "utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"JSON is not valid UTF-8 at byte {exc.start}") from None
    else:
        text = data
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(text)
    except json.JSONDecodeError as first:
        fixed = _BARE_KEY.sub(_quote_key, text)
        if fixed != text:
            try:
                return json.loads(fixed)
            except json.JSONDecodeError:
                pass
        raise ValueError(
            f"invalid JSON at line {first.lineno} column {first.colno} (char {first.pos}): {first.msg}"
        ) from None
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply") from None


def dumps_compact(obj: object) -> bytes:
    """Compact UTF-8 JSON (no spaces, non-ASCII raw, control characters escaped)."""
    return _compact_encoder.encode(obj).encode("utf-8", "replace")
