"""Live consumer registrations (from HEART_BEAT), per consumer group.

Channels are opaque objects owned by the remoting server (they need ``.remote_addr``); this module
never sends anything itself. When a group's membership or subscriptions change it calls
``on_group_changed(group, channels)`` so the broker can send NOTIFY_CONSUMER_IDS_CHANGED (40).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

log = logging.getLogger(__name__)

BROADCASTING = "BROADCASTING"
CLUSTERING = "CLUSTERING"
DEFAULT_CHANNEL_EXPIRED_TIMEOUT_MS = 120_000

GroupChangedCallback = Callable[[str, list[Any]], None]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ClientInfo:
    """One client connection of a group."""

    channel: Any
    client_id: str
    language: str = "JAVA"
    version: int = 0
    last_update: int = field(default_factory=_now_ms)  # ms of the last heartbeat


@dataclass
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = CLUSTERING
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    clients: dict[str, ClientInfo] = field(default_factory=dict)  # client_id -> ClientInfo
    subscriptions: dict[str, Any] = field(default_factory=dict)  # topic -> SubscriptionData
    last_update: int = field(default_factory=_now_ms)

    def client_ids(self) -> list[str]:
        return list(self.clients)

    def channels(self) -> list[Any]:
        return [info.channel for info in self.clients.values()]

    def find_subscription(self, topic: str) -> Any | None:
        return self.subscriptions.get(topic)

    def update_client(self, client: ClientInfo) -> bool:
        """Add or refresh a client; True when it is a new member of the group."""
        known = self.clients.get(client.client_id)
        if known is None:
            self.clients[client.client_id] = client
            return True
        if known.channel is not client.channel:
            # Same client id on a new connection (reconnect): the id list is unchanged, so no rebalance.
            known.channel = client.channel
        known.language = client.language
        known.version = client.version
        known.last_update = client.last_update
        return False

    def update_subscriptions(self, subscriptions: Iterable[Any]) -> bool:
        """Merge the heartbeat's subscription set; True when topics were added/removed or an
        expression changed (newer subVersion with a different expression)."""
        changed = False
        new_topics = set()
        for sub in subscriptions:
            topic = sub.topic
            new_topics.add(topic)
            old = self.subscriptions.get(topic)
            if old is None:
                self.subscriptions[topic] = sub
                changed = True
            elif _sub_version(sub) > _sub_version(old):
                if _expression(sub) != _expression(old):
                    changed = True
                self.subscriptions[topic] = sub
        for topic in [t for t in self.subscriptions if t not in new_topics]:
            del self.subscriptions[topic]
            changed = True
        self.last_update = _now_ms()
        return changed

    def remove_channel(self, channel: Any) -> ClientInfo | None:
        for client_id, info in self.clients.items():
            if info.channel is channel:
                del self.clients[client_id]
                return info
        return None


def _sub_version(sub: Any) -> int:
    value = getattr(sub, "sub_version", 0)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _expression(sub: Any) -> tuple[Any, Any]:
    return (getattr(sub, "sub_string", None), getattr(sub, "expression_type", "TAG") or "TAG")


class ConsumerManager:
    """group -> ConsumerGroupInfo. All methods run on the event loop thread."""

    def __init__(self, on_group_changed: GroupChangedCallback | None = None) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self.on_group_changed = on_group_changed

    def get_group(self, group: str) -> ConsumerGroupInfo | None:
        return self.groups.get(group)

    def client_ids(self, group: str) -> list[str]:
        info = self.groups.get(group)
        return info.client_ids() if info else []

    def find_subscription(self, group: str, topic: str) -> Any | None:
        info = self.groups.get(group)
        return info.subscriptions.get(topic) if info else None

    def register(
        self,
        group: str,
        client: ClientInfo,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
        subscriptions: Iterable[Any],
        notify: bool = True,
    ) -> bool:
        """Register/refresh a consumer from a heartbeat. Returns True when the group's members or
        subscriptions changed; then (unless BROADCASTING or ``notify`` is False) calls
        ``on_group_changed(group, all channels of the group)``."""
        info = self.groups.get(group)
        if info is None:
            info = self.groups[group] = ConsumerGroupInfo(group)
        info.consume_type = consume_type
        info.message_model = message_model
        info.consume_from_where = consume_from_where
        joined = info.update_client(client)
        subs_changed = info.update_subscriptions(subscriptions)
        changed = joined or subs_changed
        if changed and notify and message_model != BROADCASTING:
            self._notify(group, info.channels())
        return changed

    def unregister(self, group: str, client_id: str, notify: bool = True) -> bool:
        """Remove one client (UNREGISTER_CLIENT). Remaining members are notified."""
        info = self.groups.get(group)
        if info is None or info.clients.pop(client_id, None) is None:
            return False
        self._after_removal(group, info, notify)
        return True

    def on_channel_closed(self, channel: Any) -> list[str]:
        """Forget every registration made over ``channel``; returns the affected groups."""
        affected = []
        for group, info in list(self.groups.items()):
            if info.remove_channel(channel) is not None:
                affected.append(group)
                self._after_removal(group, info, True)
        return affected

    def scan_not_active(
        self, channel_expired_timeout_ms: int = DEFAULT_CHANNEL_EXPIRED_TIMEOUT_MS, now_ms: int | None = None
    ) -> list[ClientInfo]:
        """Drop clients without a heartbeat for ``channel_expired_timeout_ms``; returns them so the
        caller can close their channels."""
        now = _now_ms() if now_ms is None else now_ms
        expired: list[ClientInfo] = []
        for group, info in list(self.groups.items()):
            stale = [cid for cid, c in info.clients.items() if now - c.last_update > channel_expired_timeout_ms]
            if not stale:
                continue
            for client_id in stale:
                expired.append(info.clients.pop(client_id))
            log.info("consumer group %s: expired idle clients %s", group, ", ".join(stale))
            self._after_removal(group, info, True)
        return expired

    def groups_subscribing(self, topic: str) -> list[str]:
        return [g for g, info in self.groups.items() if topic in info.subscriptions]

    def _after_removal(self, group: str, info: ConsumerGroupInfo, notify: bool) -> None:
        if not info.clients:
            del self.groups[group]
            return
        if notify:
            self._notify(group, info.channels())

    def _notify(self, group: str, channels: list[Any]) -> None:
        if self.on_group_changed is None:
            return
        try:
            self.on_group_changed(group, channels)
        except Exception:
            log.exception("on_group_changed(%s) failed", group)


def group_topics(offsets: Any, consumers: ConsumerManager, group: str) -> set[str]:
    """The topics a group consumes here: those it has committed offsets on and those its online consumers subscribe
    to (what a group-wide statistic covers, and what reading it needs permission for)."""
    topics = set(offsets.topics_of_group(group))
    info = consumers.get_group(group)
    if info is not None:
        topics.update(info.subscriptions)
    return topics
