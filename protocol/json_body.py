"""The liberal value conversions and the encode/decode base shared by every JSON body class.

Bodies come from other implementations (Java's fastjson, Node, C++ clients) that write numbers as strings, enums as
names or ordinals and leave out empty fields, so every reader converts by the field's declared type and never trusts
the JSON type it got.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, TypeVar

from protocol.jsonlenient import dumps_compact, loads_lenient

__all__ = ["Body", "as_int", "as_bool", "as_str", "as_enum_name", "as_list", "as_dict", "as_object", "now_ms"]


def as_int(value: Any, default: int = 0) -> int:
    if value is None or value == "":
        return default
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return int(value) if value == value and abs(value) != float("inf") else default
    try:
        return int(str(value).strip())
    except ValueError:
        try:
            return int(float(str(value).strip()))
        except (ValueError, OverflowError):
            return default


def as_bool(value: Any, default: bool = False) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    return str(value).strip().lower() == "true"


def as_str(value: Any, default: str | None = "") -> str | None:
    if value is None:
        return default
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def as_enum_name(value: Any, table: Mapping[int, str], default: str) -> str:
    """Enum given as NAME or ordinal (int or digit string) -> NAME."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return table.get(int(value), default)
    if isinstance(value, float):
        return table.get(int(value), default) if value.is_integer() else default
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return table.get(int(text), default)
    return text.upper()


def as_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    if isinstance(value, dict):
        return list(value.values())
    return [value]


def as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def as_object(obj: Any) -> dict:
    """Accept an already-parsed object or raw JSON bytes/str; a body must be a JSON object."""
    if isinstance(obj, (bytes, bytearray, memoryview, str)):
        obj = loads_lenient(obj)
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def now_ms() -> int:
    return time.time_ns() // 1_000_000


T = TypeVar("T", bound="Body")


class Body:
    """Shared encode/decode on top of each class's from_json/to_json."""

    __slots__ = ()

    @classmethod
    def from_json(cls: type[T], obj: Any) -> T:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_json(self) -> dict:  # pragma: no cover - overridden
        raise NotImplementedError

    def encode(self) -> bytes:
        return dumps_compact(self.to_json())

    @classmethod
    def decode(cls: type[T], data: bytes | bytearray | memoryview | str) -> T:
        """Parse a body; ValueError on invalid JSON or a non-object."""
        return cls.from_json(loads_lenient(data))
