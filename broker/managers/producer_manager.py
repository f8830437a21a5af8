"""Live producer registrations (from HEART_BEAT), per producer group.

Needed for transaction state checks (pick a channel of the producer group) and admin listings.
"""

from __future__ import annotations

import time
from typing import Any

from broker.managers.consumer_manager import DEFAULT_CHANNEL_EXPIRED_TIMEOUT_MS, ClientInfo

# The Java client registers its internal producer group on every heartbeat; not a real group.
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"


class ProducerManager:
    """group -> {client_id: ClientInfo}."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, ClientInfo]] = {}

    def register(self, group: str, client: ClientInfo) -> bool:
        """Add or refresh; True when the client is new to the group."""
        clients = self.groups.setdefault(group, {})
        known = clients.get(client.client_id)
        if known is None:
            clients[client.client_id] = client
            return True
        known.channel = client.channel
        known.language = client.language
        known.version = client.version
        known.last_update = client.last_update
        return False

    def unregister(self, group: str, client_id: str) -> bool:
        clients = self.groups.get(group)
        if clients is None or clients.pop(client_id, None) is None:
            return False
        if not clients:
            del self.groups[group]
        return True

    def on_channel_closed(self, channel: Any) -> list[str]:
        affected = []
        for group, clients in list(self.groups.items()):
            for client_id, info in list(clients.items()):
                if info.channel is channel:
                    del clients[client_id]
                    affected.append(group)
            if not clients:
                del self.groups[group]
        return affected

    def scan_not_active(
        self, channel_expired_timeout_ms: int = DEFAULT_CHANNEL_EXPIRED_TIMEOUT_MS, now_ms: int | None = None
    ) -> list[ClientInfo]:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        expired = []
        for group, clients in list(self.groups.items()):
            for client_id, info in list(clients.items()):
                if now - info.last_update > channel_expired_timeout_ms:
                    expired.append(clients.pop(client_id))
            if not clients:
                del self.groups[group]
        return expired

    def channels(self, group: str) -> list[Any]:
        return [info.channel for info in self.groups.get(group, {}).values()]

    def find_channel(self, group: str) -> Any | None:
        """A channel of the group, most recently active first (transaction check target)."""
        clients = self.groups.get(group)
        if not clients:
            return None
        return max(clients.values(), key=lambda info: info.last_update).channel

    def group_names(self) -> list[str]:
        return [g for g in self.groups if g != CLIENT_INNER_PRODUCER_GROUP]
