"""What every request processor reads from the broker, bound once."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.broker import Broker


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
