"""Name server state: which brokers exist, which topics they host, and when they last registered.

Pure in-memory bookkeeping (no I/O). Both the standalone name server and the broker's embedded
name server use it; the embedded one is fed by direct calls instead of REGISTER_BROKER requests.
Route bodies are produced as JSON-ready dicts with quoted ``brokerAddrs`` keys (reference §3).

Registrations are ordered by the broker's topic-table DataVersion: one that is older than what the name
server already holds for that broker (a snapshot sent before a change that reached the name server first,
e.g. a full REGISTER_BROKER overtaken by the embedded one-topic deltas) only refreshes the broker's timer and
never replaces the newer topics.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from broker.managers.persistence import data_version_key, is_older_data_version
from protocol.json_body import as_int

log = logging.getLogger(__name__)

MASTER_ID = 0
DEFAULT_BROKER_CHANNEL_EXPIRED_MS = 120_000
PERM_READ = 4
PERM_WRITE = 2


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class RegisterBrokerResult:
    """What REGISTER_BROKER answers: the master's HA address and address (for slaves)."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)  # broker id -> "ip:port"

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrs": {str(bid): addr for bid, addr in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
            "enableActingMaster": False,
        }


@dataclass
class BrokerLiveInfo:
    cluster: str
    broker_name: str
    broker_id: int
    last_update_ms: int
    timeout_ms: int
    data_version: tuple[int, int, int]
    ha_server_addr: str | None
    channel: Any = None


def _topic_fields(name: str, tc: Any) -> tuple[int, int, int, int]:
    """(read, write, perm, sysflag) of a TopicConfig given as an object or a JSON dict."""
    if isinstance(tc, Mapping):
        return (
            as_int(tc.get("readQueueNums"), 16),
            as_int(tc.get("writeQueueNums"), 16),
            as_int(tc.get("perm"), 6),
            as_int(tc.get("topicSysFlag"), 0),
        )
    return (
        as_int(getattr(tc, "read_queue_nums", 16), 16),
        as_int(getattr(tc, "write_queue_nums", 16), 16),
        as_int(getattr(tc, "perm", 6), 6),
        as_int(getattr(tc, "topic_sys_flag", 0), 0),
    )


class RouteInfoManager:
    """clusterAddrTable, brokerAddrTable, topicQueueTable and brokerLiveTable of RocketMQ's name server."""

    def __init__(self) -> None:
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}

    # -- registration ------------------------------------------------------------------------------
    def register_broker(
        self,
        cluster: str,
        broker_name: str,
        broker_addr: str,
        broker_id: int,
        ha_addr: str | None,
        topic_config_table: Mapping[str, Any] | None,
        data_version: Any,
        channel: Any = None,
        timeout_ms: int | None = None,
        now_ms: int | None = None,
    ) -> RegisterBrokerResult:
        """Record a broker (re-)registration. A master's topic table replaces what the name server
        knew about that broker name whenever it is new or its data version changed; topics it no
        longer lists lose that broker's queues. A table older than the one held (see
        ``is_older_data_version``) is a late snapshot: it refreshes the broker's timer only."""
        now = _now_ms() if now_ms is None else now_ms
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)

        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            broker_data = self.broker_addr_table[broker_name] = BrokerData(cluster, broker_name)
        broker_data.cluster = cluster
        # The same address re-registering under another id (slave promoted, id changed): drop the old id.
        for known_id, addr in list(broker_data.broker_addrs.items()):
            if addr == broker_addr and known_id != broker_id:
                del broker_data.broker_addrs[known_id]
        first_time = broker_data.broker_addrs.get(broker_id) != broker_addr
        broker_data.broker_addrs[broker_id] = broker_addr

        version = data_version_key(data_version)
        previous = self.broker_live_table.get(broker_addr)
        version_changed = previous is None or previous.data_version != version
        if previous is not None and not first_time and is_older_data_version(version, previous.data_version):
            log.debug("broker %s (%s): registration of data version %s is older than %s, topics kept",
                      broker_name, broker_addr, version, previous.data_version)
            version, version_changed = previous.data_version, False
        if broker_id == MASTER_ID and topic_config_table is not None and (first_time or version_changed):
            self._replace_topics_of(broker_name, topic_config_table)

        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            cluster=cluster,
            broker_name=broker_name,
            broker_id=broker_id,
            last_update_ms=now,
            timeout_ms=timeout_ms if timeout_ms and timeout_ms > 0 else DEFAULT_BROKER_CHANNEL_EXPIRED_MS,
            data_version=version,
            ha_server_addr=ha_addr,
            channel=channel,
        )
        if previous is None:
            log.info("new broker registered: %s %s id=%d cluster=%s", broker_name, broker_addr, broker_id, cluster)

        result = RegisterBrokerResult()
        if broker_id != MASTER_ID:
            master_addr = broker_data.broker_addrs.get(MASTER_ID)
            if master_addr is not None:
                master_live = self.broker_live_table.get(master_addr)
                result.master_addr = master_addr
                result.ha_server_addr = master_live.ha_server_addr if master_live else None
        return result

    def apply_topic_changes(
        self, broker_addr: str, changes: Mapping[str, Any | None], data_version: Any, now_ms: int | None = None
    ) -> bool:
        """Incremental registration of a master already registered at ``broker_addr``: upsert the given
        topics (a ``None`` config removes that broker's queues of the topic) and adopt ``data_version``.
        Cost is proportional to ``len(changes)``, not to the broker's topic count. Returns False when
        the address is not a registered master; the caller then registers the whole table. Changes
        older than the version held are already superseded and ignored."""
        live = self.broker_live_table.get(broker_addr)
        if live is None or live.broker_id != MASTER_ID:
            return False
        broker_data = self.broker_addr_table.get(live.broker_name)
        if broker_data is None or broker_data.broker_addrs.get(MASTER_ID) != broker_addr:
            return False
        version = data_version_key(data_version)
        live.last_update_ms = _now_ms() if now_ms is None else now_ms
        if is_older_data_version(version, live.data_version):
            return True
        broker_name = live.broker_name
        for topic, tc in changes.items():
            if tc is None:
                self._remove_topic_of(topic, broker_name)
                continue
            read, write, perm, sys_flag = _topic_fields(topic, tc)
            self.topic_queue_table.setdefault(topic, {})[broker_name] = QueueData(broker_name, read, write, perm, sys_flag)
        live.data_version = version
        return True

    def _replace_topics_of(self, broker_name: str, topic_config_table: Mapping[str, Any]) -> None:
        for topic, tc in topic_config_table.items():
            read, write, perm, sys_flag = _topic_fields(topic, tc)
            queues = self.topic_queue_table.setdefault(topic, {})
            queues[broker_name] = QueueData(broker_name, read, write, perm, sys_flag)
        for topic in [t for t, q in self.topic_queue_table.items() if broker_name in q and t not in topic_config_table]:
            self._remove_topic_of(topic, broker_name)

    def _remove_topic_of(self, topic: str, broker_name: str) -> None:
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return
        queues.pop(broker_name, None)
        if not queues:
            del self.topic_queue_table[topic]

    def update_broker_heartbeat(self, broker_addr: str, now_ms: int | None = None) -> None:
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update_ms = _now_ms() if now_ms is None else now_ms

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> bool:
        """Forget one broker address (UNREGISTER_BROKER, or expiry). True if it was known."""
        known = self.broker_live_table.pop(broker_addr, None) is not None
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None:
            if broker_data.broker_addrs.get(broker_id) == broker_addr:
                del broker_data.broker_addrs[broker_id]
                known = True
            else:
                for bid, addr in list(broker_data.broker_addrs.items()):
                    if addr == broker_addr:
                        del broker_data.broker_addrs[bid]
                        known = True
            if not broker_data.broker_addrs:
                del self.broker_addr_table[broker_name]
                names = self.cluster_addr_table.get(broker_data.cluster or cluster)
                if names is not None:
                    names.discard(broker_name)
                    if not names:
                        del self.cluster_addr_table[broker_data.cluster or cluster]
                for topic in [t for t, q in self.topic_queue_table.items() if broker_name in q]:
                    self._remove_topic_of(topic, broker_name)
        return known

    def scan_not_active_broker(self, now_ms: int | None = None) -> list[str]:
        """Remove brokers whose last registration is older than their timeout (default 120 s)."""
        now = _now_ms() if now_ms is None else now_ms
        expired = [addr for addr, live in self.broker_live_table.items() if now - live.last_update_ms > live.timeout_ms]
        for addr in expired:
            live = self.broker_live_table[addr]
            log.warning("broker %s (%s) expired: no registration for %d ms", live.broker_name, addr, now - live.last_update_ms)
            self.unregister_broker(live.cluster, addr, live.broker_name, live.broker_id)
        return expired

    def on_channel_closed(self, channel: Any) -> list[str]:
        """A broker's registration connection closed: forget the brokers registered over it."""
        gone = [addr for addr, live in self.broker_live_table.items() if channel is not None and live.channel is channel]
        for addr in gone:
            live = self.broker_live_table[addr]
            self.unregister_broker(live.cluster, addr, live.broker_name, live.broker_id)
        return gone

    # -- queries -----------------------------------------------------------------------------------
    def pick_topic_route_json(self, topic: str) -> dict[str, Any] | None:
        """TopicRouteData as a JSON-ready dict, or None when no broker hosts ``topic``."""
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        queue_datas = []
        broker_datas = []
        for broker_name in sorted(queues):
            queue_datas.append(queues[broker_name].to_json())
            broker_data = self.broker_addr_table.get(broker_name)
            if broker_data is not None:
                broker_datas.append(broker_data.to_json())
        if not broker_datas:
            return None
        return {"brokerDatas": broker_datas, "filterServerTable": {}, "queueDatas": queue_datas}

    def pick_topic_route(self, topic: str) -> Any:
        """TopicRouteData (protocol.bodies) or None."""
        data = self.pick_topic_route_json(topic)
        if data is None:
            return None
        from protocol.bodies import TopicRouteData

        return TopicRouteData.from_json(data)

    def get_cluster_info(self) -> dict[str, Any]:
        """ClusterInfo body: ``{"brokerAddrTable":{name: BrokerData}, "clusterAddrTable":{cluster: [names]}}``."""
        return {
            "brokerAddrTable": {name: bd.to_json() for name, bd in sorted(self.broker_addr_table.items())},
            "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.cluster_addr_table.items())},
        }

    def get_all_topic_list(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def get_topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(t for t, q in self.topic_queue_table.items() if names.intersection(q))

    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        """Forget ``topic`` (only its queues on ``cluster``'s brokers when a cluster is given)."""
        if not cluster:
            return self.topic_queue_table.pop(topic, None) is not None
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return False
        doomed = [name for name in queues if name in self.cluster_addr_table.get(cluster, set())]
        for broker_name in doomed:
            self._remove_topic_of(topic, broker_name)
        return bool(doomed)
