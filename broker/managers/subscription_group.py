"""Consumer group settings (``protocol.config_bodies.SubscriptionGroupConfig``), persisted as
config/subscriptionGroup.json."""

from __future__ import annotations

import copy
import os
from typing import Any

from broker.managers.persistence import PersistentTable, bump_version
from protocol.config_bodies import DataVersion, SubscriptionGroupConfig

FILE_NAME = "subscriptionGroup.json"

# Groups a Java broker creates at startup (tools and internal consumers).
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_RMQ_SYS_TRANS",
)


class SubscriptionGroupManager(PersistentTable):
    """Consumer groups known to this broker; unknown groups are created on heartbeat when
    ``autoCreateSubscriptionGroup`` is on (otherwise the broker ignores them)."""

    def __init__(self, config_dir: str, auto_create: bool = True) -> None:
        super().__init__(os.path.join(config_dir, FILE_NAME))
        self.auto_create = auto_create
        self.data_version = DataVersion()
        self.groups: dict[str, SubscriptionGroupConfig] = {}
        self.forbidden_table: dict[str, Any] = {}
        self._add_system_groups()

    def _add_system_groups(self) -> None:
        for name in SYSTEM_GROUPS:
            self.groups[name] = SubscriptionGroupConfig(group_name=name)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        return self.groups.get(group)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults if unknown and auto-create is on, else None."""
        config = self.groups.get(group)
        if config is None and self.auto_create and group:
            config = self.groups[group] = SubscriptionGroupConfig(group_name=group)
            bump_version(self.data_version)
            self._changed()
        return config

    def update(self, config: SubscriptionGroupConfig) -> None:
        """Create or replace a group (admin UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)."""
        self.groups[config.group_name] = copy.copy(config)
        bump_version(self.data_version)
        self._changed()

    def delete(self, group: str) -> bool:
        if self.groups.pop(group, None) is None:
            return False
        bump_version(self.data_version)
        self._changed()
        return True

    def encode(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "forbiddenTable": self.forbidden_table,
            "subscriptionGroupTable": {name: cfg.to_json() for name, cfg in self.groups.items()},
        }

    def _document_builder(self) -> Any:
        # Groups are replaced, never modified in place: a shallow copy is a consistent snapshot, and
        # encoding thousands of groups can then happen in the writer thread.
        groups = dict(self.groups)
        version = copy.copy(self.data_version)
        forbidden = dict(self.forbidden_table)
        return lambda: {
            "dataVersion": version.to_json(),
            "forbiddenTable": forbidden,
            "subscriptionGroupTable": {name: cfg.to_json() for name, cfg in groups.items()},
        }

    def decode(self, obj: dict[str, Any]) -> None:
        self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        self.forbidden_table = obj.get("forbiddenTable") or {}
        for name, raw in (obj.get("subscriptionGroupTable") or {}).items():
            if isinstance(raw, dict):
                group = SubscriptionGroupConfig.from_json(raw)
                group.group_name = group.group_name or name
                self.groups[name] = group
