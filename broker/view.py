"""A read-only view of the broker's state, for the parts that only look: the web console, the metrics endpoint and
the admin answers (GET_BROKER_RUNTIME_INFO, GET_CONSUME_STATS' rates).

Built by the Broker from its parts; what changes at run time (the HA objects of a controller-mode role change, the
held pulls, the open connections) is read through callables, so the view never holds the Broker itself. Its
properties are typed against the small read-side protocols below: a reader can look, not change."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from typing import Any, Protocol

from protocol.codes import BROKER_VERSION

VERSION_DESC = "V5_3_3 (pyrocketmq-broker)"


class StoreReads(Protocol):
    """What is read of the message store."""

    stats: dict[str, int]
    commit_log_max_offset: int
    commit_log_min_offset: int
    disk_used_ratio: float

    def get_max_offset(self, topic: str, queue_id: int) -> int: ...

    def get_min_offset(self, topic: str, queue_id: int) -> int: ...

    def get_message_store_time(self, topic: str, queue_id: int, offset: int) -> int: ...

    def look_record(self, phys_offset: int) -> Any: ...

    def get_offset_by_time(self, topic: str, queue_id: int, timestamp: int, upper: bool = False) -> int: ...

    def get_messages(self, topic: str, queue_id: int, offset: int, max_nums: int, **kwargs: Any) -> Any: ...

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> Any: ...

    def runtime_stats(self) -> dict[str, Any]: ...


class TopicReads(Protocol):
    def get(self, topic: str) -> Any: ...

    def topic_names(self) -> list[str]: ...


class GroupReads(Protocol):
    groups: dict[str, Any]

    def find(self, group: str) -> Any: ...


class OffsetReads(Protocol):
    offset_table: dict[str, dict[int, int]]

    def query_offset(self, group: str, topic: str, queue_id: int) -> int: ...


class ConsumerReads(Protocol):
    groups: dict[str, Any]

    def get_group(self, group: str) -> Any: ...


class ProducerReads(Protocol):
    def group_names(self) -> Collection[str]: ...


class TransactionReads(Protocol):
    counters: dict[str, int]

    def progress(self) -> int: ...


class RateSource(Protocol):
    """The sampled rates (broker/metrics/rates.py)."""

    def runtime_rates(self) -> dict[str, float]: ...

    def consume_tps(self, group: str) -> float: ...


def runtime_text(seconds: float) -> str:
    """RocketMQ's "runtime" format: ``[ 0 days, 1 hours, 2 minutes, 3 seconds ]``."""
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {secs} seconds ]"


class BrokerView:
    """Read-only: properties without setters over the broker's tables, and the figures derived from them."""

    def __init__(self, config: Any, store: StoreReads, topics: TopicReads, groups: GroupReads, offsets: OffsetReads,
                 consumers: ConsumerReads, producers: ProducerReads, transactions: TransactionReads, *,
                 rates: RateSource, connections: Callable[[], int], held_pulls: Callable[[], int],
                 replication: Callable[[], dict[str, Any]], boot_timestamp_ms: int) -> None:
        self._config = config
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._consumers = consumers
        self._producers = producers
        self._transactions = transactions
        self._rates = rates
        self._connections = connections
        self._held_pulls = held_pulls
        self._replication = replication
        self._boot_timestamp_ms = boot_timestamp_ms

    # ---- the tables, read-only -------------------------------------------------------------------
    @property
    def config(self) -> Any:
        """The broker's settings (read them; GET_BROKER_CONFIG's text is `config_properties`, secret left out)."""
        return self._config

    @property
    def store(self) -> StoreReads:
        return self._store

    @property
    def topics(self) -> TopicReads:
        return self._topics

    @property
    def groups(self) -> GroupReads:
        return self._groups

    @property
    def offsets(self) -> OffsetReads:
        return self._offsets

    @property
    def consumers(self) -> ConsumerReads:
        return self._consumers

    @property
    def producers(self) -> ProducerReads:
        return self._producers

    @property
    def transactions(self) -> TransactionReads:
        return self._transactions

    # ---- derived figures -------------------------------------------------------------------------
    def config_properties(self) -> dict[str, str]:
        """The effective configuration as property strings, without the secret key."""
        return self._config.to_properties()

    @property
    def boot_timestamp_ms(self) -> int:
        return self._boot_timestamp_ms

    def uptime_s(self) -> float:
        return max(0.0, time.time() - self._boot_timestamp_ms / 1000.0)

    def connection_count(self) -> int:
        return self._connections()

    def suspended_pull_count(self) -> int:
        return self._held_pulls()

    def replication_info(self) -> dict[str, Any]:
        """The master's slaves and lag, or the slave's master (empty in neither role)."""
        return self._replication()

    def consume_tps(self, group: str) -> float:
        return self._rates.consume_tps(group)

    def runtime_info(self) -> dict[str, Any]:
        """GET_BROKER_RUNTIME_INFO's table (also the console's overview)."""
        cfg = self._config
        stats = self._store.runtime_stats()
        boot_ms = self._boot_timestamp_ms
        info: dict[str, Any] = {
            "brokerVersionDesc": VERSION_DESC,
            "brokerVersion": BROKER_VERSION,
            "brokerName": cfg.broker_name,
            "brokerAddr": cfg.broker_addr,
            "brokerRole": cfg.broker_role,
            "clusterName": cfg.broker_cluster_name,
            "bootTimestamp": boot_ms,
            "runtime": runtime_text(self.uptime_s()) if boot_ms else "",
            "pid": os.getpid(),
            "storePathRootDir": cfg.store_path_root_dir,
            "flushDiskType": cfg.flush_disk_type,
            "msgPutTotalTodayNow": stats.get("put_messages", 0),
            "msgGetTotalTodayNow": stats.get("get_messages", 0),
            "putMessageBytesTotal": stats.get("put_bytes", 0),
            "commitLogMinOffset": stats.get("commit_log_min_offset", 0),
            "commitLogMaxOffset": stats.get("commit_log_max_offset", 0),
            "commitLogFlushedOffset": stats.get("commit_log_flushed_offset", 0),
            "commitLogDiskRatio": round(float(stats.get("disk_used_ratio", 0.0) or 0.0) / 100.0, 4),  # a fraction
            "topicCount": len(self._topics.topic_names()),
            "consumerGroupCount": len(self._consumers.groups),
            "producerGroupCount": len(self._producers.group_names()),
            "connectionCount": self._connections(),
            "suspendedPullCount": self._held_pulls(),
        }
        info.update(self._replication())
        info.update(self._rates.runtime_rates())
        return info
