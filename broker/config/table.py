"""The declarative key table: one ``Key`` per broker.conf key (name, type, default, check, concern, store field).

Each concern module (keys_broker, keys_network, keys_security, keys_store, keys_replication) lists its keys;
``TABLE`` joins them in that order. ``BrokerConfig``'s fields, the loader's key lookup, ``to_properties``, the
per-key checks of the validator and ``to_store_config`` are all derived from it, so a key exists everywhere or
nowhere.
"""

from __future__ import annotations

from typing import Iterable

from .keys_broker import KEYS as BROKER_KEYS
from .keys_network import KEYS as NETWORK_KEYS
from .keys_replication import KEYS as REPLICATION_KEYS
from .keys_security import KEYS as SECURITY_KEYS
from .keys_store import KEYS as STORE_KEYS
from .entry import Key

__all__ = ["TABLE", "BY_ATTR", "BY_KEY", "CONCERNS"]

CONCERNS: tuple[str, ...] = ("broker", "network", "security", "store", "replication")


def _join(tables: Iterable[tuple[Key, ...]]) -> tuple[Key, ...]:
    """All entries in order; refuses duplicate keys or attributes and store keys with no store decision."""
    out: list[Key] = []
    names: set[str] = set()
    attrs: set[str] = set()
    for table in tables:
        for entry in table:
            if entry.concern not in CONCERNS:
                raise ValueError(f"{entry.name}: unknown concern {entry.concern!r}")
            if entry.name in names or entry.attr in attrs:
                raise ValueError(f"broker.conf key {entry.name} ({entry.attr}) is listed twice")
            if entry.concern == "store" and not (entry.store or entry.not_for_store):
                raise ValueError(f"store key {entry.name}: name its StoreConfig field (store=) or say why not "
                                 f"(not_for_store=)")
            if entry.store and entry.not_for_store:
                raise ValueError(f"{entry.name}: store= and not_for_store= exclude each other")
            names.add(entry.name)
            attrs.add(entry.attr)
            out.append(entry)
    return tuple(out)


TABLE: tuple[Key, ...] = _join((BROKER_KEYS, NETWORK_KEYS, SECURITY_KEYS, STORE_KEYS, REPLICATION_KEYS))
BY_ATTR: dict[str, Key] = {entry.attr: entry for entry in TABLE}
BY_KEY: dict[str, Key] = {entry.name: entry for entry in TABLE}
