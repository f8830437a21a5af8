"""What every request processor reads from the broker, bound once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.managers.topic_config import validate_group

if TYPE_CHECKING:
    from broker.broker import Broker

_VALID_GROUPS_LIMIT = 100_000


class BrokerProcessor:
    """Binds the broker's store and managers as attributes so handlers avoid a lookup chain per request."""

    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self.config = broker.config
        self.store = broker.store
        self.topics = broker.topic_config_manager
        self.groups = broker.subscription_group_manager
        self.consumers = broker.consumer_manager
        self.offsets = broker.consumer_offset_manager
        self._valid_groups: set[str] = set()  # names that passed validate_group (a set hit on the hot path)

    def group_problem(self, group: str | None) -> str | None:
        """None when `group` is a legal group name (remembered), else the reason for the error remark."""
        if group in self._valid_groups:
            return None
        problem = validate_group(group)
        if problem is None:
            if len(self._valid_groups) >= _VALID_GROUPS_LIMIT:
                self._valid_groups.clear()
            self._valid_groups.add(group)
        return problem
