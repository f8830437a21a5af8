"""Per-group SQL92 filter data (what the reference keeps in config/consumerFilter.json).

Heartbeats register every non-TAG subscription here: the expression, its client version
(subVersion) and the compile result, so the pull path and `%RETRY%<group>` filtering can find the
group's filter for a topic even across a broker restart (before the group's next heartbeat).
Entries of groups that went away are marked dead and dropped after a day.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from broker.filter import MessageFilter, SelectorError, UnsupportedExpressionType, build_filter
from broker.managers.persistence import PersistentTable
from protocol.json_body import as_int

log = logging.getLogger(__name__)

FILE_NAME = "consumerFilter.json"
DEAD_ENTRY_TTL_MS = 24 * 3600 * 1000


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ConsumerFilterData:
    """One (topic, group) filter; ``message_filter``/``error`` are filled on first use."""

    topic: str
    consumer_group: str
    expression: str
    expression_type: str
    client_version: int = 0
    born_time: int = field(default_factory=_now_ms)
    dead_time: int = 0
    _compiled: bool = field(default=False, repr=False, compare=False)
    _filter: MessageFilter | None = field(default=None, repr=False, compare=False)
    _error: str | None = field(default=None, repr=False, compare=False)

    def _compile(self) -> None:
        if self._compiled:
            return
        self._compiled = True
        try:
            self._filter = build_filter(self.expression_type, self.expression)
        except (SelectorError, UnsupportedExpressionType) as exc:
            self._error = str(exc)

    @property
    def message_filter(self) -> MessageFilter | None:
        self._compile()
        return self._filter

    @property
    def error(self) -> str | None:
        """Why the expression does not compile (None when it does)."""
        self._compile()
        return self._error

    @property
    def is_dead(self) -> bool:
        return self.dead_time > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "bornTime": self.born_time,
            "clientVersion": self.client_version,
            "consumerGroup": self.consumer_group,
            "deadTime": self.dead_time,
            "expression": self.expression,
            "expressionType": self.expression_type,
            "topic": self.topic,
        }

    @classmethod
    def from_json(cls, topic: str, group: str, obj: dict[str, Any]) -> "ConsumerFilterData":
        return cls(
            topic=str(obj.get("topic") or topic),
            consumer_group=str(obj.get("consumerGroup") or group),
            expression=str(obj.get("expression") or ""),
            expression_type=str(obj.get("expressionType") or "SQL92"),
            client_version=as_int(obj.get("clientVersion")),
            born_time=as_int(obj.get("bornTime")),
            dead_time=as_int(obj.get("deadTime")),
        )


class ConsumerFilterManager(PersistentTable):
    """topic -> group -> ConsumerFilterData, persisted as config/consumerFilter.json."""

    def __init__(self, config_dir: str) -> None:
        super().__init__(os.path.join(config_dir, FILE_NAME))
        self.by_topic: dict[str, dict[str, ConsumerFilterData]] = {}

    def register(self, group: str, topic: str, expression: str | None, expression_type: str | None,
                 client_version: int = 0) -> ConsumerFilterData | None:
        """Record a heartbeat subscription; TAG subscriptions are not kept (None is returned)."""
        kind = (expression_type or "TAG").strip().upper() or "TAG"
        if kind == "TAG":
            return None
        expression = expression or ""
        groups = self.by_topic.setdefault(topic, {})
        known = groups.get(group)
        if known is not None and known.expression == expression and known.expression_type == kind:
            changed = known.is_dead or client_version > known.client_version
            known.dead_time = 0
            known.client_version = max(known.client_version, client_version)
            if changed:
                self._changed()
            return known
        if known is not None and client_version < known.client_version:
            return known  # an older subscription arriving late must not replace a newer one
        data = groups[group] = ConsumerFilterData(topic, group, expression, kind, client_version)
        if data.error is not None:
            log.info("consumer group %s: SQL92 filter for %s does not compile: %s", group, topic, data.error)
        self._changed()
        return data

    def get(self, topic: str, group: str) -> ConsumerFilterData | None:
        groups = self.by_topic.get(topic)
        return groups.get(group) if groups else None

    def unregister(self, group: str, now_ms: int | None = None) -> None:
        """The group has no consumers left: mark its filters dead (kept a day, like the reference)."""
        now = _now_ms() if now_ms is None else now_ms
        changed = False
        for groups in self.by_topic.values():
            data = groups.get(group)
            if data is not None and not data.is_dead:
                data.dead_time = now
                changed = True
        if changed:
            self._changed()

    def clean_expired(self, now_ms: int | None = None) -> int:
        """Drop entries dead for more than a day; returns how many went."""
        now = _now_ms() if now_ms is None else now_ms
        removed = 0
        for topic in list(self.by_topic):
            groups = self.by_topic[topic]
            for group in [g for g, d in groups.items() if d.is_dead and now - d.dead_time > DEAD_ENTRY_TTL_MS]:
                del groups[group]
                removed += 1
            if not groups:
                del self.by_topic[topic]
        if removed:
            self._changed()
        return removed

    def encode(self) -> dict[str, Any]:
        return {
            "filterDataByTopic": {
                topic: {"topic": topic, "groupFilterData": {g: d.to_json() for g, d in groups.items()}}
                for topic, groups in self.by_topic.items()
            }
        }

    def decode(self, obj: dict[str, Any]) -> None:
        self.by_topic.clear()
        for topic, entry in (obj.get("filterDataByTopic") or {}).items():
            if not isinstance(entry, dict):
                continue
            groups = {}
            for group, raw in (entry.get("groupFilterData") or {}).items():
                if isinstance(raw, dict):
                    groups[group] = ConsumerFilterData.from_json(topic, group, raw)
            if groups:
                self.by_topic[topic] = groups
