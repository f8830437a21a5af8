"""Broker configuration: a ``BrokerConfig`` dataclass and a Java ``.properties`` loader.

Keys in broker.conf use RocketMQ's camelCase names (``listenPort``, ``brokerIP1``); the dataclass
exposes them as snake_case attributes (``listen_port``, ``broker_ip1``). Defaults follow RocketMQ
so an existing broker.conf means the same thing here.

Layout: one declarative key table (``table.TABLE``: key, attribute, type, default, check, concern, store field),
declared by concern in ``keys_broker``, ``keys_network``, ``keys_security``, ``keys_store`` and
``keys_replication``; ``properties`` parses the file format, ``validate`` runs the table's checks and the
cross-key rules, ``model`` builds ``BrokerConfig`` from the table, ``loader`` reads broker.conf.
"""

from __future__ import annotations

from broker.errors import ConfigError
from broker.store.delay_levels import parse_delay_levels

from .defaults import default_broker_ip
from .entry import Key, key_to_attr
from .keys_broker import BROKER_ROLES
from .keys_store import CQ_UNIT_SIZE, DEFAULT_MESSAGE_DELAY_LEVEL, FLUSH_DISK_TYPES
from .loader import load_broker_config
from .model import BrokerConfig
from .properties import parse_properties
from .table import BY_ATTR, BY_KEY, CONCERNS, TABLE

__all__ = [
    "BrokerConfig",
    "ConfigError",
    "load_broker_config",
    "parse_properties",
    "parse_delay_levels",
    "default_broker_ip",
    "key_to_attr",
    "DEFAULT_MESSAGE_DELAY_LEVEL",
    "BROKER_ROLES",
    "CQ_UNIT_SIZE",
    "FLUSH_DISK_TYPES",
    "Key",
    "TABLE",
    "BY_ATTR",
    "BY_KEY",
    "CONCERNS",
]
