"""The Prometheus endpoint: a collector that builds every family at scrape time, from the counters (counters.py)
and from the broker's state read through its read-only view (broker/view.py), served by a small asyncio HTTP
responder on the broker's event loop (so the collector reads state on the loop thread without locks); the text
format is prometheus_client's."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from broker.metrics.counters import BrokerMetrics

if TYPE_CHECKING:
    from broker.view import BrokerView

log = logging.getLogger(__name__)

HTTP_READ_TIMEOUT_S = 5.0
_RETRY_PREFIX = "%RETRY%"
_DLQ_PREFIX = "%DLQ%"


def _dir_size(path: str) -> int:
    total = 0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        total += _dir_size(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    except OSError:
        return 0
    return total



class MetricsEndpoint:
    """The HTTP endpoint on metricsHost:metricsPort; `start()` opens nothing when the port is 0 (metrics off)."""

    def __init__(self, view: "BrokerView", metrics: BrokerMetrics, host: str, port: int) -> None:
        self.view = view
        self.metrics = metrics
        self.host = host
        self.port = port
        self.registry: CollectorRegistry | None = None
        self._http: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Open the endpoint when the port is set (OSError if it is taken)."""
        if not self.port:
            return
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_BrokerCollector(self.view, self.metrics))
        try:
            from prometheus_client.process_collector import ProcessCollector

            ProcessCollector(registry=self.registry)
        except Exception:  # pragma: no cover - platform without /proc
            pass
        self._http = await asyncio.start_server(self._serve_http, self.host, self.port, reuse_address=True)
        log.info("metrics (Prometheus text format) on http://%s/metrics", self.bind_addr)

    @property
    def http_port(self) -> int | None:
        if self._http is None or not self._http.sockets:
            return None
        return self._http.sockets[0].getsockname()[1]

    @property
    def bind_addr(self) -> str | None:
        """``host:port`` the metrics endpoint is bound to (from its socket), None when off."""
        if self._http is None or not self._http.sockets:
            return None
        host, port = self._http.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def stop(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            http.close()
            try:
                await asyncio.wait_for(http.wait_closed(), 2.0)
            except (asyncio.TimeoutError, Exception):
                pass

    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HTTP_READ_TIMEOUT_S)
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            path = path.split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                status, content_type, body = "405 Method Not Allowed", "text/plain", b"method not allowed\n"
            elif path in ("/metrics", "/"):
                status, content_type, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
            else:
                status, content_type, body = "404 Not Found", "text/plain", b"not found; try /metrics\n"
            header = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                      "Connection: close\r\n\r\n").encode("latin-1")
            writer.write(header if method == "HEAD" else header + body)
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        except Exception:
            log.exception("metrics endpoint failed")
        finally:
            writer.close()


class _BrokerCollector:
    """Builds every family at scrape time from the counters and from live broker state."""

    def __init__(self, view: "BrokerView", metrics: BrokerMetrics) -> None:
        self.view = view
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        m = self.metrics
        view = self.view
        yield from self._traffic(m)
        yield m.send_latency.family("rocketmq_send_latency_seconds", "Broker time to process one send request")
        yield m.pull_latency.family("rocketmq_pull_latency_seconds",
                                    "Broker time to process one pull request (held pulls: the final run)")
        yield m.flush_latency.family("rocketmq_flush_latency_seconds", "Duration of one commit log flush")
        rejected = CounterMetricFamily("rocketmq_requests_rejected", "Send/pull requests refused by the broker",
                                       labels=["family", "code"])
        for (family, code), count in sorted(m.rejected.items()):
            rejected.add_metric([family, code], count)
        yield rejected
        yield from self._consumers(view)
        yield from self._store(view)
        yield from self._transactions(view)
        connections = GaugeMetricFamily("rocketmq_connections", "Open client connections")
        connections.add_metric([], view.connection_count())
        yield connections
        suspended = GaugeMetricFamily("rocketmq_suspended_pulls", "Pull requests held by long polling")
        suspended.add_metric([], view.suspended_pull_count())
        yield suspended

    @staticmethod
    def _traffic(m: BrokerMetrics) -> Iterator[Any]:
        for name, doc, table in (
            ("rocketmq_messages_in", "Messages stored, by topic", m.messages_in),
            ("rocketmq_bytes_in", "Send request body bytes accepted, by topic", m.bytes_in),
            ("rocketmq_messages_out", "Messages delivered by pulls (queue offsets advanced), by topic",
             m.messages_out),
            ("rocketmq_bytes_out", "Pull response body bytes, by topic", m.bytes_out),
        ):
            family = CounterMetricFamily(name, doc, labels=["topic"])
            for topic, value in sorted(table.items()):
                family.add_metric([topic], value)
            yield family
        retry = CounterMetricFamily("rocketmq_retry_messages", "Messages put on a group's retry topic", labels=["group"])
        dlq = CounterMetricFamily("rocketmq_dlq_messages", "Messages moved to a group's dead-letter queue",
                                  labels=["group"])
        for topic, value in sorted(m.messages_in.items()):
            if topic.startswith(_RETRY_PREFIX):
                retry.add_metric([topic[len(_RETRY_PREFIX):]], value)
            elif topic.startswith(_DLQ_PREFIX):
                dlq.add_metric([topic[len(_DLQ_PREFIX):]], value)
        yield retry
        yield dlq

    @staticmethod
    def _consumers(view: "BrokerView") -> Iterator[Any]:
        store = view.store
        lag = GaugeMetricFamily("rocketmq_consumer_lag", "Messages not yet consumed (broker max offset - "
                                "committed offset), by group and topic", labels=["group", "topic"])
        topics = view.topics
        for key, queues in sorted(view.offsets.offset_table.items()):
            topic, _, group = key.rpartition("@")
            config = topics.get(topic)
            queue_ids = range(config.read_queue_nums) if config is not None else queues.keys()
            # Same rule as GET_CONSUME_STATS (mqadmin consumerProgress): an uncommitted queue counts from 0.
            behind = sum(max(0, store.get_max_offset(topic, q) - max(0, queues.get(q, 0))) for q in queue_ids)
            lag.add_metric([group, topic], behind)
        yield lag
        clients = GaugeMetricFamily("rocketmq_consumer_clients", "Live consumer clients, by group", labels=["group"])
        for group, info in sorted(view.consumers.groups.items()):
            clients.add_metric([group], len(info.clients))
        yield clients

    @staticmethod
    def _transactions(view: "BrokerView") -> Iterator[Any]:
        service = view.transactions
        outcomes = CounterMetricFamily("rocketmq_transactions", "Transaction decisions and checks since start: "
                                       "commit, rollback, check (sent), discard (given up after "
                                       "transactionCheckMax)", labels=["outcome"])
        for name, key in (("commit", "commits"), ("rollback", "rollbacks"), ("check", "checks"),
                          ("discard", "discards")):
            outcomes.add_metric([name], service.counters[key])
        yield outcomes
        behind = GaugeMetricFamily("rocketmq_transaction_half_unchecked", "Half-queue records the check service "
                                   "has not passed yet (open transactions and their checked copies)")
        behind.add_metric([], max(0, view.store.get_max_offset("RMQ_SYS_TRANS_HALF_TOPIC", 0)
                                  - service.progress()))
        yield behind
        replication = view.replication_info()
        if "haReplicationLagBytes" in replication:
            lag = GaugeMetricFamily("rocketmq_replication_lag_bytes", "Master: bytes its furthest slave is behind "
                                    "(the whole log with no slave connected); slave: bytes behind its master "
                                    "(-1 when not connected)")
            lag.add_metric([], replication["haReplicationLagBytes"])
            yield lag
        if "haSlaveCount" in replication:
            slaves = GaugeMetricFamily("rocketmq_replication_slaves", "Slaves connected to this master")
            slaves.add_metric([], replication["haSlaveCount"])
            yield slaves

    @staticmethod
    def _store(view: "BrokerView") -> Iterator[Any]:
        store = view.store
        cfg = view.config
        data = GaugeMetricFamily("rocketmq_store_commitlog_bytes", "Commit log bytes held (max - min offset)")
        data.add_metric([], max(0, store.commit_log_max_offset - store.commit_log_min_offset))
        yield data
        files = GaugeMetricFamily("rocketmq_store_size_bytes", "Bytes of store files on disk, by part",
                                  labels=["part"])
        root = os.path.expanduser(cfg.store_path_root_dir)
        files.add_metric(["commitlog"], _dir_size(cfg.commit_log_dir))
        files.add_metric(["consumequeue"], _dir_size(os.path.join(root, "consumequeue")))
        files.add_metric(["index"], _dir_size(os.path.join(root, "index")))
        yield files
        ratio = GaugeMetricFamily("rocketmq_store_disk_used_ratio",
                                  "Used fraction (0-1) of the file system holding the commit log")
        ratio.add_metric([], float(getattr(store, "disk_used_ratio", 0.0) or 0.0) / 100.0)
        yield ratio
        stats = store.stats
        for name, key, doc in (
                ("rocketmq_store_recovery_corrupt_regions", "recovery_corrupt_regions",
                 "Unreadable commit-log regions the last start-up recovery found (valid records after them kept)"),
                ("rocketmq_store_recovery_corrupt_bytes", "recovery_corrupt_bytes",
                 "Bytes in those unreadable commit-log regions"),
                ("rocketmq_store_recovery_missing_messages", "recovery_missing_units",
                 "Consume queue entries whose record was unreadable at start-up (pulls skip them)")):
            gauge = GaugeMetricFamily(name, doc)
            gauge.add_metric([], stats.get(key, 0))
            yield gauge
