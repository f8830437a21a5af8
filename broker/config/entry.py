"""What one entry of the key table is (``Key``, built with ``key(...)``) and the per-key checks it may carry.

The concern modules (keys_broker, keys_store, ...) import only this module; ``table`` joins them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Check", "Key", "key", "key_to_attr", "Positive", "Port", "OneOf", "Range", "Rule"]

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def key_to_attr(key: str) -> str:
    """RocketMQ property name -> attribute name: ``brokerIP1`` -> ``broker_ip1``."""
    return _CAMEL_BOUNDARY.sub("_", key).lower()


# -- checks: each returns None for a good value, else the detail of the error (the validator adds the key) --------
Check = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class Positive:
    """Greater than 0 (counts, sizes, intervals)."""

    def __call__(self, value: int) -> str | None:
        return None if value > 0 else f"must be greater than 0, got {value}"


@dataclass(frozen=True)
class Port:
    """A TCP port; 0 allowed where it means "off"."""

    allow_zero: bool = False

    def __call__(self, value: int) -> str | None:
        low = 0 if self.allow_zero else 1
        return None if low <= value <= 65535 else f"expected a TCP port {low}..65535, got {value}"


@dataclass(frozen=True)
class OneOf:
    """One of a fixed set of words (case-sensitive, as RocketMQ's enums)."""

    choices: tuple[str, ...]

    def __call__(self, value: str) -> str | None:
        return None if value in self.choices else f"expected one of {', '.join(self.choices)}, got {value!r}"


@dataclass(frozen=True)
class Range:
    """``low <= value <= high`` (either bound may be None); ``message`` gets the value as ``{}``."""

    low: int | None
    high: int | None
    message: str

    def __call__(self, value: int) -> str | None:
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            return self.message.format(value)
        return None


@dataclass(frozen=True)
class Rule:
    """A check written as a function (``fn(value) -> detail | None``), for formats such as deleteWhen."""

    fn: Callable[[Any], "str | None"]

    def __call__(self, value: Any) -> str | None:
        return self.fn(value)


# -- the entries --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Key:
    """One broker.conf key.

    ``attr`` is ``key_to_attr(name)``; ``optional`` keys may be unset (None, or an empty value in the file);
    ``check`` runs only on set values, and only when the bool attribute ``when`` is true if given; ``store`` names
    the ``StoreConfig`` field the key feeds (store keys that do not feed one say why in ``not_for_store``).
    """

    name: str
    attr: str
    type: type
    default: Any
    concern: str
    factory: Callable[[], Any] | None = None
    optional: bool = False
    check: Check | None = None
    when: str | None = None
    store: str | None = None
    not_for_store: str = ""
    doc: str = ""

    @property
    def annotation(self) -> Any:
        """The dataclass field type (``int | None`` for optional keys)."""
        return self.type | None if self.optional else self.type  # type: ignore[operator]


def key(name: str, type_: type, default: Any = None, check: Check | None = None, *, concern: str,
        factory: Callable[[], Any] | None = None, optional: bool = False, when: str | None = None,
        store: str | None = None, not_for_store: str = "", doc: str = "") -> Key:
    """One table entry; the attribute name is derived from the key (``brokerIP1`` -> ``broker_ip1``)."""
    if type_ not in (int, bool, str):
        raise TypeError(f"{name}: type must be int, bool or str")
    if default is None and factory is None and not optional:
        raise ValueError(f"{name}: a key without a default must be optional")
    return Key(name, key_to_attr(name), type_, default, concern, factory, optional, check, when, store,
               not_for_store, doc)
