"""Topic configurations of this broker (``protocol.config_bodies.TopicConfig`` objects), persisted as config/topics.json.

Holds the system topics every RocketMQ broker has, creates topics on first send through TBW102
(reference §4.3.5), retry/DLQ topics for consumer groups, and tells listeners about every change
so the broker re-registers its routes with the name server(s) immediately.
"""

from __future__ import annotations

import copy
import os
import re
import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable

from broker.descriptors import DescriptorBudget
from broker.managers.persistence import ChangeJournal, PersistentTable, bump_version
from protocol.config_bodies import DataVersion, TopicConfig
from protocol.names import RETRY_DLQ_TOPIC_MAX_LENGTH, TOPIC_MAX_LENGTH, topic_problem  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from broker.config import BrokerConfig

FILE_NAME = "topics.json"
# Once the change journal is armed (load()), each change is on disk at once, so the full topics.json -
# tens of milliseconds of encoding at thousands of topics - is rewritten at most this often in a storm.
JOURNALED_REWRITE_DELAY_S = 5.0

log = logging.getLogger(__name__)

# callback(topic, config) after one topic changed; config is None when the topic was deleted.
TopicListener = Callable[[str, "TopicConfig | None"], None]

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SCHEDULE_QUEUE_NUMS = 18
DLQ_NUMS_PER_GROUP = 1

GROUP_MAX_LENGTH = 255  # the reference client's Validators.CHARACTER_MAX_LENGTH
_TOPIC_CHARS = re.compile(r"[%|a-zA-Z0-9_-]+")  # used with fullmatch: "$" would let a trailing newline through

# Producers may not send to these directly (RocketMQ's "not allowed send" system topics).
TIMER_TOPIC = "rmq_sys_wheel_timer"  # 5.x timed messages wait here (broker/timer)
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TIMER_TOPIC}
)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def no_route_remark(topic: str) -> str:
    """The reference's text for a topic it has no route for (its proxy's TOPIC_NOT_FOUND remark): SDK users grep it."""
    return f"No topic route info in name server for the topic: {topic}"


def validate_topic(topic: str | None) -> str | None:
    """None when ``topic`` is a legal name, else the reason (used as the response remark). The rule lives in
    protocol/names.py, where the store checks records read back from the log by it too."""
    return topic_problem(topic)


def validate_group(group: str | None) -> str | None:
    """None when ``group`` is a legal producer/consumer group name, else the reason (the response remark).

    The rules of the reference client's Validators.checkGroup (a Java client never sends anything else):
    not blank, at most 255 characters, only ``[%|a-zA-Z0-9_-]`` (``%`` for namespaces and %RETRY%/%DLQ%)."""
    if not group or not group.strip():
        return "the specified group is blank"
    if len(group) > GROUP_MAX_LENGTH:
        return f"the specified group is longer than group max length {GROUP_MAX_LENGTH} ({len(group)} characters)"
    if not _TOPIC_CHARS.fullmatch(group):
        shown = group if len(group) <= 64 else group[:64] + "..."
        return f"the specified group[{shown}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    return None


class TopicConfigManager(PersistentTable):
    """topic name -> TopicConfig, with RocketMQ's auto-creation rules."""

    def __init__(self, config: "BrokerConfig", config_dir: str | None = None,
                 descriptors: DescriptorBudget | None = None) -> None:
        super().__init__(os.path.join(config_dir or config.config_dir, FILE_NAME))
        self.broker_config = config
        # Auto-creation is refused (DescriptorsShortError) while descriptors run short (fileDescriptorReserve).
        self.descriptors = descriptors
        self.data_version = DataVersion()
        self.topics: dict[str, TopicConfig] = {}
        self.system_topics: set[str] = set()
        self._topic_listeners: list[TopicListener] = []
        # Every change is journaled at once (O(1)); topics.json is rewritten coalesced, off the loop.
        # Armed by load(): managers that were never loaded (tools, unit tests) write nothing.
        self._journal = ChangeJournal(self.path)
        self._journal_armed = False
        self._add_system_topics()

    # -- system topics -----------------------------------------------------------------------------
    def _add_system(self, topic: TopicConfig) -> None:
        self.topics[topic.topic_name] = topic
        self.system_topics.add(topic.topic_name)

    def _add_system_topics(self) -> None:
        cfg = self.broker_config
        rw = PERM_READ | PERM_WRITE
        self._add_system(TopicConfig(SELF_TEST_TOPIC, 1, 1))
        if cfg.auto_create_topic_enable:
            queues = cfg.default_topic_queue_nums
            self._add_system(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, queues, queues, rw | PERM_INHERIT))
        self._add_system(TopicConfig(cfg.broker_cluster_name, 16, 16, rw | PERM_INHERIT))
        self._add_system(TopicConfig(cfg.broker_name, 1, 1, rw | PERM_INHERIT))
        self._add_system(TopicConfig(OFFSET_MOVED_EVENT, 1, 1))
        self._add_system(TopicConfig(SCHEDULE_TOPIC, SCHEDULE_QUEUE_NUMS, SCHEDULE_QUEUE_NUMS))
        self._add_system(TopicConfig(TIMER_TOPIC, 1, 1))
        if cfg.trace_topic_enable:  # clients write message traces there (protocol/trace.py)
            self._add_system(TopicConfig(getattr(cfg, "msg_trace_topic_name", "") or TRACE_TOPIC, 1, 1))

    def is_system_topic(self, topic: str) -> bool:
        return topic in self.system_topics or topic.startswith("rmq_sys_")

    @staticmethod
    def is_not_allowed_send_topic(topic: str) -> bool:
        return topic in NOT_ALLOWED_SEND_TOPICS

    # -- lookups -----------------------------------------------------------------------------------
    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def __contains__(self, topic: object) -> bool:
        return topic in self.topics

    def topic_names(self) -> list[str]:
        return list(self.topics)

    def add_topic_listener(self, callback: TopicListener) -> None:
        """``callback(topic, config_or_None)`` runs synchronously after each single-topic change, so
        it can forward just that delta (route registration) instead of rescanning the whole table.
        TopicConfig objects in the table are never modified in place (changes replace them), so a
        listener may keep the object it is given."""
        self._topic_listeners.append(callback)

    def snapshot(self) -> tuple[dict[str, TopicConfig], DataVersion]:
        """Copies of the table and data version, for route registration."""
        return (
            {name: copy.copy(tc) for name, tc in self.topics.items()},
            copy.copy(self.data_version),
        )

    # -- creation ----------------------------------------------------------------------------------
    def create_topic_in_send_callback(
        self,
        topic: str,
        default_topic: str | None,
        remote_address: str | None = None,
        client_default_topic_queue_nums: int = 4,
        topic_sys_flag: int = 0,
    ) -> TopicConfig | None:
        """The topic's config, auto-created from ``default_topic`` (normally TBW102) if unknown.

        Unknown ``%RETRY%`` topics get 1 queue, perm 6. Otherwise the default topic must exist and be
        inheritable: the new topic gets min(client queue nums, default's write queues) queues and the
        default's perm without INHERIT. Returns None when the topic cannot be created, and raises
        DescriptorsShortError (its text is the remark) while the process is short of descriptors.
        """
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        if validate_topic(topic) is not None:
            return None
        if self.descriptors is not None:
            self.descriptors.check(f"topic {topic}", "topic")
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self._create(TopicConfig(topic, 1, 1, PERM_READ | PERM_WRITE, topic_sys_flag=topic_sys_flag))
        if not default_topic:
            return None
        default = self.topics.get(default_topic)
        if default is None:
            return None
        perm = default.perm
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.broker_config.auto_create_topic_enable:
            perm &= ~PERM_INHERIT
        if not perm & PERM_INHERIT:
            return None
        queues = max(0, min(int(client_default_topic_queue_nums), default.write_queue_nums))
        if queues <= 0:
            return None
        return self._create(
            TopicConfig(topic, queues, queues, perm & ~PERM_INHERIT, topic_sys_flag=topic_sys_flag)
        )

    def create_topic_if_absent(
        self, topic: str, queue_nums: int, perm: int = PERM_READ | PERM_WRITE, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """Create ``topic`` with the given shape unless it exists (send-back / internal topics)."""
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        if validate_topic(topic) is not None:
            return None
        return self._create(TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag))

    def create_retry_topic(
        self, group: str, queue_nums: int = 1, perm: int = PERM_READ | PERM_WRITE
    ) -> TopicConfig | None:
        """``%RETRY%<group>`` (created on heartbeat for every consumer group)."""
        return self.create_topic_if_absent(retry_topic(group), max(1, queue_nums), perm)

    def create_dlq_topic(self, group: str) -> TopicConfig | None:
        """``%DLQ%<group>``: one queue, perm 6."""
        return self.create_topic_if_absent(dlq_topic(group), DLQ_NUMS_PER_GROUP, PERM_READ | PERM_WRITE)

    def update_topic(self, topic_config: TopicConfig) -> TopicConfig:
        """Create or replace (admin UPDATE_AND_CREATE_TOPIC). Raises ValueError on an illegal name."""
        problem = validate_topic(topic_config.topic_name)
        if problem is not None:
            raise ValueError(problem)
        stored = copy.copy(topic_config)
        old = self.topics.get(stored.topic_name)
        if old == stored:
            return old
        self.topics[stored.topic_name] = stored
        self._bump(stored.topic_name, stored)
        return stored

    def update_order_flags(self, ordered_topics: Iterable[str]) -> None:
        """Mark exactly ``ordered_topics`` as ordered (name server KV order config)."""
        wanted = set(ordered_topics)
        for name, tc in list(self.topics.items()):
            if tc.order != (name in wanted):
                replaced = copy.copy(tc)  # copy-on-write: snapshots and listeners may hold the old one
                replaced.order = name in wanted
                self.topics[name] = replaced
                self._bump(name, replaced)

    def delete_topic(self, topic: str) -> bool:
        if self.topics.pop(topic, None) is None:
            return False
        self._bump(topic, None)
        return True

    def _create(self, topic_config: TopicConfig) -> TopicConfig:
        self.topics[topic_config.topic_name] = topic_config
        self._bump(topic_config.topic_name, topic_config)
        return topic_config

    def _bump(self, topic: str, config: TopicConfig | None) -> None:
        bump_version(self.data_version)
        if self._journal_armed:
            try:
                self._journal.append({"topic": topic, "config": None if config is None else config.to_json()})
            except OSError as exc:  # still in memory, and in topics.json after the next write
                log.error("cannot journal the change of topic %s: %s", topic, exc)
        for callback in self._topic_listeners:
            try:
                callback(topic, config)
            except Exception:  # a listener bug must not break the change that triggered it
                log.exception("topic listener failed for %s", topic)
        self._changed()

    # -- persistence -------------------------------------------------------------------------------
    def encode(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {name: tc.to_json() for name, tc in self.topics.items()},
        }

    def decode(self, obj: dict[str, Any]) -> None:
        self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        for name, raw in (obj.get("topicConfigTable") or {}).items():
            if isinstance(raw, dict):
                topic = TopicConfig.from_json(raw)
                topic.topic_name = topic.topic_name or name
                self.topics[name] = topic
        if not self.broker_config.auto_create_topic_enable:
            # Advertising TBW102 would let producers auto-create topics through us.
            self.topics.pop(AUTO_CREATE_TOPIC_KEY_TOPIC, None)

    def load(self) -> bool:
        found = super().load()
        replayed = self._replay_journal()
        bump_version(self.data_version)  # a restarted broker must look changed to the name server
        self._journal_armed = True
        self._persist_delay_s = max(self._persist_delay_s, JOURNALED_REWRITE_DELAY_S)
        if replayed:
            self._dirty = True  # folded into topics.json by the next write
        return found or replayed > 0

    def _replay_journal(self) -> int:
        """Apply changes journaled after the last topics.json write (the broker was killed before the
        coalesced write). Returns how many records were applied."""
        records = self._journal.read()
        for record in records:
            name = record.get("topic")
            raw = record.get("config")
            if not isinstance(name, str) or not name:
                continue
            if isinstance(raw, dict):
                topic = TopicConfig.from_json(raw)
                topic.topic_name = topic.topic_name or name
                self.topics[name] = topic
            elif name not in self.system_topics:
                self.topics.pop(name, None)
        if records:
            log.info("replayed %d topic change(s) journaled after the last write of %s", len(records), self.path)
        return len(records)

    def _document_builder(self) -> Any:
        # Changes replace TopicConfig objects instead of modifying them, so a shallow copy taken on the
        # loop is a consistent snapshot and the per-topic encoding can run in a worker thread.
        topics = dict(self.topics)
        version = copy.copy(self.data_version)
        return lambda: {
            "dataVersion": version.to_json(),
            "topicConfigTable": {name: tc.to_json() for name, tc in topics.items()},
        }

    def _snapshot_taken(self) -> Any:
        return self._journal.rotate() if self._journal_armed else None

    def _snapshot_saved(self, token: Any) -> None:
        if token is not None:
            self._journal.drop_through(token)
