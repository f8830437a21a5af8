"""``BrokerConfig``: a dataclass whose fields are the key table's attributes (same names, types and defaults), plus
the values derived from them and the conversions other parts of the broker take (store config, properties).

The fields are generated from ``table.TABLE`` so the table stays the one place a key is declared; attribute
``x_y`` is broker.conf key ``xY`` (see ``key_to_attr``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from broker.store.delay_levels import parse_delay_levels

from .defaults import pack_store_host
from .table import BY_KEY, TABLE
from .validate import normalize_and_check

__all__ = ["BrokerConfig", "store_config_values"]


class _BrokerConfigBase:
    """Methods and derived values of ``BrokerConfig`` (the fields come from the key table)."""

    # annotations for readers and type checkers of the attributes used below; the dataclass fields are the table's
    broker_ip1: str
    broker_ip2: str | None
    listen_port: int
    ha_listen_port: int | None
    store_path_root_dir: str
    store_path_commit_log: str | None
    namesrv_addr: str | None
    controller_addr: str
    store_path_epoch_file: str | None
    store_path_broker_identity: str | None
    broker_role: str
    message_delay_level: str

    def __post_init__(self) -> None:
        normalize_and_check(self)

    # -- derived values ---------------------------------------------------------------------------
    @property
    def broker_addr(self) -> str:
        """``ip:port`` registered in routes and written into stored messages as store host."""
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker_ip2 or self.broker_ip1}:{self.ha_port}"

    @property
    def ha_port(self) -> int:
        """haListenPort, defaulting to listenPort + 1 like RocketMQ."""
        return self.ha_listen_port if self.ha_listen_port is not None else self.listen_port + 1

    @property
    def commit_log_dir(self) -> str:
        """storePathCommitLog, defaulting to <storePathRootDir>/commitlog."""
        return self.store_path_commit_log or os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def config_dir(self) -> str:
        """Where topics.json, consumerOffset.json, subscriptionGroup.json live."""
        return os.path.join(self.store_path_root_dir, "config")

    @property
    def namesrv_addr_list(self) -> list[str]:
        if not self.namesrv_addr:
            return []
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @property
    def controller_addrs(self) -> list[str]:
        return [a.strip() for a in self.controller_addr.split(";") if a.strip()]

    @property
    def epoch_file_path(self) -> str:
        return self.store_path_epoch_file or os.path.join(self.store_path_root_dir, "epochFileCheckpoint")

    @property
    def broker_identity_path(self) -> str:
        return self.store_path_broker_identity or os.path.join(self.store_path_root_dir, "brokerIdentity")

    @property
    def is_master(self) -> bool:
        return self.broker_role != "SLAVE"

    def delay_levels_ms(self) -> list[int]:
        """Delay per level in ms; index 0 is level 1."""
        return parse_delay_levels(self.message_delay_level)

    @classmethod
    def keys(cls) -> dict[str, str]:
        """RocketMQ property names accepted in broker.conf -> attribute names."""
        return {name: entry.attr for name, entry in BY_KEY.items()}

    def to_properties(self) -> dict[str, str]:
        """The effective configuration as RocketMQ property strings (for GET_BROKER_CONFIG style admin)."""
        out = {}
        for entry in TABLE:
            value = getattr(self, entry.attr)
            if value is None or entry.attr == "secret_key":  # never hand the secret out (GET_BROKER_CONFIG, -p)
                continue
            out[entry.name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return out

    def to_store_config(self) -> Any:
        """Settings the message store needs, as ``broker.store.types.StoreConfig``: every key of the table with a
        ``store=`` field, plus the values derived from several keys. A field the store does not have is an error
        (TypeError), never skipped."""
        from broker.store.types import StoreConfig  # imported lazily: config must load without the store

        return StoreConfig(**store_config_values(self))


def store_config_values(cfg: Any) -> dict[str, Any]:
    """``StoreConfig`` field -> value for ``cfg``: the table's ``store=`` keys, then the derived fields."""
    values = {entry.store: getattr(cfg, entry.attr) for entry in TABLE if entry.store}
    values.update(
        replica=cfg.broker_role == "SLAVE",
        commit_log_dir=cfg.commit_log_dir,
        store_host=pack_store_host(cfg.broker_ip1 or "127.0.0.1", cfg.listen_port),
    )
    return values


def _field(entry: Any) -> tuple[str, Any, Any]:
    if entry.factory is not None:
        spec = dataclasses.field(default_factory=entry.factory)
    else:
        spec = dataclasses.field(default=entry.default)
    return entry.attr, entry.annotation, spec


BrokerConfig = dataclasses.make_dataclass(
    "BrokerConfig", [_field(entry) for entry in TABLE], bases=(_BrokerConfigBase,), kw_only=True)
BrokerConfig.__module__ = "broker.config"
BrokerConfig.__doc__ = ("All broker settings, one field per broker.conf key of the key table (broker.config.table); "
                        "attribute ``x_y`` is property ``xY`` (see ``key_to_attr``). Keyword arguments only.")
