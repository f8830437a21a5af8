"""What a push consumer subscribes to and which queues it holds now (its assignment).

Kept apart from the pull loops and the rebalance coordinator so that both read one source of truth: the topics and
their selectors (plus the group's %RETRY% topic in CLUSTERING mode, which every member consumes implicitly) and the
ProcessQueue of each assigned queue. Only the rebalance coordinator changes the assignment.
"""

from __future__ import annotations

from client.allocate import sort_queues
from client.consume_service import RETRY_PREFIX
from client.message import MessageQueue, MessageSelector
from client.process_queue import ProcessQueue

__all__ = ["SubscriptionState"]

_ALL = MessageSelector.tag("*")


class SubscriptionState:
    """Topics -> selectors the user subscribed to, and the queues currently assigned to this member."""

    def __init__(self, group: str, *, clustering: bool) -> None:
        self.group = group
        self.clustering = clustering
        self.retry_topic = RETRY_PREFIX + group
        self.topics: dict[str, MessageSelector] = {}
        self.assignment: dict[MessageQueue, ProcessQueue] = {}

    def subscribe(self, topic: str, expression: MessageSelector | str | None = "*") -> None:
        if not topic:
            raise ValueError("topic must not be empty")
        self.topics[topic] = MessageSelector.of(expression)

    def unsubscribe(self, topic: str) -> None:
        self.topics.pop(topic, None)

    def all_subscriptions(self) -> dict[str, MessageSelector]:
        """The user's topics plus, in CLUSTERING mode, %RETRY%<group> (redelivered messages come back there)."""
        subs = dict(self.topics)
        if self.clustering:
            subs.setdefault(self.retry_topic, MessageSelector.tag("*"))
        return subs

    def selector(self, topic: str) -> MessageSelector:
        """The selector a pull of topic carries (every tag for topics subscribed implicitly)."""
        return self.topics.get(topic) or _ALL

    def assigned_queues(self) -> list[MessageQueue]:
        return sort_queues(self.assignment)

    def cached_message_count(self) -> int:
        return sum(len(pq) for pq in self.assignment.values())
