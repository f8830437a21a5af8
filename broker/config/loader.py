"""broker.conf -> ``BrokerConfig``: keys looked up in the key table, values converted to the key's type, errors
naming the file line (or ``override``) and the key."""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Mapping

from broker.errors import ConfigError

from .model import BrokerConfig
from .properties import parse_properties
from .reference import nearest_key, reference_keys
from .table import BY_ATTR, BY_KEY, Key

__all__ = ["load_broker_config", "convert"]

log = logging.getLogger("broker.config")


def _lookup(name: str) -> Key | None:
    """The entry for a RocketMQ key, or for its snake_case attribute name (accepted too)."""
    return BY_KEY.get(name) or BY_ATTR.get(name)


def convert(entry: Key, raw: Any) -> Any:
    """A property value (string, or an already-typed override) -> the key's type."""
    if raw is None:
        if entry.optional:
            return None
        raise ConfigError("a value is required", entry.name)
    if entry.type is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        raise ConfigError(f"expected true or false, got {str(raw)!r}", entry.name)
    if entry.type is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        text = str(raw).strip()
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        raise ConfigError(f"expected an integer, got {str(raw)!r}", entry.name)
    text = str(raw)
    if entry.optional and text.strip() == "":
        return None
    return text


def load_broker_config(path: str | os.PathLike | None, overrides: Mapping[str, Any] | None = None) -> BrokerConfig:
    """Read broker.conf (Java properties) and apply ``overrides`` (RocketMQ key or attribute name -> value).

    A key of the reference broker (RocketMQ) that this broker does not implement is logged once as unsupported and
    ignored; a key unknown to both is refused (``ConfigError`` naming it and the nearest known key), as is a
    malformed value (naming the file line and the key). ``path=None`` starts from defaults.
    """
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    source = "broker.conf"
    if path is not None:
        source = os.path.basename(os.fspath(path))
        try:
            with open(path, "r", encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise ConfigError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from None
        for line_no, name, value in parse_properties(text, source):
            entry = _lookup(name)
            if entry is None:
                _unknown_in_file(name, source, line_no)
                continue
            where = f"{source} line {line_no}"
            values[entry.attr] = _convert_at(entry, value, where)
            origin[entry.attr] = where
    for name, value in (overrides or {}).items():
        entry = _lookup(name)
        if entry is None:
            raise ConfigError(f"override: unknown key {name!r}: did you mean {nearest_key(name, BY_KEY)}?", name)
        values[entry.attr] = _convert_at(entry, value, "override")
        origin[entry.attr] = "override"
    if "acl_file" in values and values["acl_file"] and path is not None:  # relative to broker.conf's folder
        values["acl_file"] = os.path.join(os.path.dirname(os.path.abspath(path)), os.path.expanduser(values["acl_file"]))
    elif path is not None and values.get("acl_enable"):
        values.setdefault("acl_file", os.path.join(os.path.dirname(os.path.abspath(path)), "plain_acl.yml"))
    try:
        return BrokerConfig(**values)
    except ConfigError as exc:
        entry = BY_KEY.get(exc.key or "")
        where = origin.get(entry.attr, source) if entry is not None else source
        raise ConfigError(f"{where}: key '{exc.key}': {exc.detail}", exc.key) from None


def _unknown_in_file(name: str, source: str, line_no: int) -> None:
    """A key the table lacks: a RocketMQ key this broker does not implement warns (and is ignored); any other
    key is a typo and refuses the start-up, naming the closest key that would have taken effect."""
    if name in reference_keys():
        log.warning("%s line %d: key %r is a RocketMQ broker key this broker does not support; ignored",
                    source, line_no, name)
        return
    guess = nearest_key(name, BY_KEY, reference_keys())
    note = "" if guess in BY_KEY else " (a RocketMQ key this broker does not support)"
    raise ConfigError(f"unknown key '{name}' in {source} line {line_no}: did you mean {guess}{note}?", name)


def _convert_at(entry: Key, value: Any, where: str) -> Any:
    try:
        return convert(entry, value)
    except ConfigError as exc:
        raise ConfigError(f"{where}: key '{exc.key}': {exc.detail}", exc.key) from None
