"""Operational observation of the broker: Prometheus metrics, rejected-request and slow-flush
warnings, client connect/disconnect lines, and the rates shown by GET_BROKER_RUNTIME_INFO.

Hot-path rule: nothing here runs per message. Send and pull handlers are observed per request from
the dispatch layer (a thin wrapper around the table entries), stored messages are counted per put
(the store's arrival listener, once per batch), and everything derivable from state — consumer lag,
store size, connections, suspended pulls — is computed when Prometheus scrapes, by a custom
collector. With ``metricsPort`` 0 (the default) only the cheap rejection check stays on the
send/pull path and no HTTP endpoint is opened.

The endpoint is a small asyncio HTTP responder on the broker's event loop (so the collector reads
broker state on the loop thread without locks); text formatting is prometheus_client's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from bisect import bisect_left
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable, Iterator

from prometheus_client import CollectorRegistry

from broker.ha import replication_info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from broker.log_limit import RateLimitedLog
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger(__name__)

SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
              RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2)
_SEND_OK = frozenset({ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
                      ResponseCode.SLAVE_NOT_AVAILABLE})
# Pull answers that are normal flow, not a refusal.
_PULL_NORMAL = frozenset({ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                          ResponseCode.PULL_OFFSET_MOVED})
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                   0.5, 1.0, 2.5, 5.0)
FLUSH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WARN_INTERVAL_S = 10.0
RATE_SAMPLE_INTERVAL_S = 5.0
HTTP_READ_TIMEOUT_S = 5.0
_RETRY_PREFIX = "%RETRY%"
_DLQ_PREFIX = "%DLQ%"
_CLIENT_ATTR = "ops_client_id"


class LatencyHistogram:
    """Cumulative-bucket histogram updated without locks (event loop thread only)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def family(self, name: str, documentation: str) -> HistogramMetricFamily:
        buckets = []
        running = 0
        for bound, count in zip(self.bounds, self.counts):
            running += count
            buckets.append((repr(float(bound)), running))
        running += self.counts[-1]
        buckets.append(("+Inf", running))
        return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=self.sum)


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


def _request_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


def _response_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


def _send_topic(cmd: RemotingCommand) -> str | None:
    """The topic a send request names: the handler's reading of it (cmd.header), else (a header that could not be
    read) the raw V2 short or V1 long field; None when absent."""
    header = cmd.header
    if header is not None:
        return header.topic
    ext = cmd.ext_fields
    if not ext:
        return None
    topic = ext.get("b")
    return str(topic) if topic is not None else (str(ext["topic"]) if "topic" in ext else None)


class BrokerMetrics:
    """Owned by the Broker: `install()` after the dispatch table exists, `attach_store()` after the
    store is loaded, `start()`/`stop()` for the sampler and the HTTP endpoint."""

    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self.enabled = bool(broker.config.metrics_port)
        self.slow_flush_s = max(0, int(getattr(broker.config, "slow_flush_warn_millis", 1000))) / 1000.0
        self.warnings = RateLimitedLog(log, WARN_INTERVAL_S)
        self.messages_in: dict[str, int] = defaultdict(int)
        self.bytes_in: dict[str, int] = defaultdict(int)
        self.messages_out: dict[str, int] = defaultdict(int)
        self.bytes_out: dict[str, int] = defaultdict(int)
        self.rejected: dict[tuple[str, str], int] = defaultdict(int)
        self.send_latency = LatencyHistogram(LATENCY_BUCKETS)
        self.pull_latency = LatencyHistogram(LATENCY_BUCKETS)
        self.flush_latency = LatencyHistogram(FLUSH_BUCKETS)
        self.registry: CollectorRegistry | None = None
        self._http: asyncio.AbstractServer | None = None
        self._sampler: asyncio.Task | None = None
        self._rates: dict[str, float] = {}
        self._group_rates: dict[str, float] = {}
        self._last_sample: tuple[float, int, int, dict[str, int]] | None = None

    @property
    def http_port(self) -> int | None:
        if self._http is None or not self._http.sockets:
            return None
        return self._http.sockets[0].getsockname()[1]

    # ---- wiring -------------------------------------------------------------------------------
    def install(self, dispatch_table: dict[int, Any], processors: dict[str, Any],
                run_table: dict[int, Any] | None = None) -> None:
        """Wrap the send and heartbeat handlers in place (and the send run handlers), and the pull processor's
        `process`."""
        for code in SEND_CODES:
            handler = dispatch_table.get(int(code))
            if handler is not None:
                dispatch_table[int(code)] = self._wrap_send(handler)
        if run_table:
            wrapped: dict[int, Any] = {}  # one wrapper per run handler: the server groups requests by identity
            for code in SEND_CODES:
                handler = run_table.get(int(code))
                if handler is not None:
                    if id(handler) not in wrapped:
                        wrapped[id(handler)] = self._wrap_send_run(handler)
                    run_table[int(code)] = wrapped[id(handler)]
        heartbeat = dispatch_table.get(int(RequestCode.HEART_BEAT))
        if heartbeat is not None:
            dispatch_table[int(RequestCode.HEART_BEAT)] = self._wrap_heartbeat(heartbeat)
        # Direct attribute access on purpose: a renamed hook must fail at start-up, not silently stop counting.
        pull = processors["pull"]
        pull.process = self._wrap_pull(pull.process)

    def attach_store(self, store: Any) -> None:
        """Count stored messages per put and time commit-log flushes (after `store.load()`)."""
        if self.enabled:
            store.add_arrival_listener(self._on_arrival)
        flush_service = store.flush_service
        flush_service.flush_commit_log = self._wrap_flush(flush_service.flush_commit_log)

    async def start(self) -> None:
        """Start the rate sampler and, when metricsPort > 0, the HTTP endpoint (OSError if the port is taken)."""
        self._sampler = asyncio.get_running_loop().create_task(self._sample_forever(), name="ops-rate-sampler")
        if not self.enabled:
            return
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_BrokerCollector(self))
        try:
            from prometheus_client.process_collector import ProcessCollector

            ProcessCollector(registry=self.registry)
        except Exception:  # pragma: no cover - platform without /proc
            pass
        cfg = self.broker.config
        self._http = await asyncio.start_server(self._serve_http, cfg.metrics_host, cfg.metrics_port,
                                                reuse_address=True)
        log.info("metrics (Prometheus text format) on http://%s/metrics", self.bind_addr)

    @property
    def bind_addr(self) -> str | None:
        """``host:port`` the metrics endpoint is bound to (from its socket), None when off."""
        if self._http is None or not self._http.sockets:
            return None
        host, port = self._http.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def stop(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        http, self._http = self._http, None
        if http is not None:
            http.close()
            try:
                await asyncio.wait_for(http.wait_closed(), 2.0)
            except (asyncio.TimeoutError, Exception):
                pass

    # ---- request observation ------------------------------------------------------------------
    def _reject(self, family: str, channel: Any, cmd: RemotingCommand, response: RemotingCommand,
                topic: str | None) -> None:
        code_name = _response_name(response.code)
        if self.enabled:
            self.rejected[(family, code_name)] += 1
        self.warnings.warning((family, response.code),
                           "rejected %s from %s (topic %s): %s %s", _request_name(cmd.code),
                           getattr(channel, "remote_addr", "?"), topic or "?", code_name, response.remark or "")

    def _wrap_send(self, handler: Callable) -> Callable:
        reject = self._reject
        send_ok = _SEND_OK
        response_type = RemotingCommand
        send_topic = _send_topic

        if not self.enabled:
            def observed_send(channel: Any, cmd: RemotingCommand) -> Any:
                result = handler(channel, cmd)
                kind = type(result)
                if kind is bytes or result is None:
                    return result
                if kind is response_type:
                    if result.code not in send_ok:
                        reject("send", channel, cmd, result, send_topic(cmd))
                    return result
                return finish_quiet(channel, cmd, result)

            async def finish_quiet(channel: Any, cmd: RemotingCommand, pending: Any) -> Any:
                result = await pending
                if type(result) is response_type and result.code not in send_ok:
                    reject("send", channel, cmd, result, send_topic(cmd))
                return result

            return observed_send

        clock = time.perf_counter
        histogram = self.send_latency
        bytes_in = self.bytes_in

        def account(channel: Any, cmd: RemotingCommand, result: Any, started: float) -> None:
            histogram.observe(clock() - started)
            if type(result) is response_type and result.code not in send_ok:
                reject("send", channel, cmd, result, send_topic(cmd))
                return
            topic = send_topic(cmd)
            if topic is not None:
                bytes_in[topic] += len(cmd.body)

        def timed_send(channel: Any, cmd: RemotingCommand) -> Any:
            started = clock()
            result = handler(channel, cmd)
            kind = type(result)
            if kind is bytes or kind is response_type:
                account(channel, cmd, result, started)
                return result
            if result is None:
                return None
            return finish_timed(channel, cmd, result, started)

        async def finish_timed(channel: Any, cmd: RemotingCommand, pending: Any, started: float) -> Any:
            result = await pending
            account(channel, cmd, result, started)
            return result

        return timed_send

    def _wrap_send_run(self, run_handler: Callable) -> Callable:
        """The run form of _wrap_send: each request of the run is observed as if sent alone."""
        reject = self._reject
        send_ok = _SEND_OK
        response_type = RemotingCommand
        enabled = self.enabled
        clock = time.perf_counter
        histogram = self.send_latency
        bytes_in = self.bytes_in

        async def finish(channel: Any, cmd: RemotingCommand, pending: Any, started: float) -> Any:
            result = await pending
            if enabled:
                histogram.observe(clock() - started)
            observe(channel, cmd, result)
            return result

        def observe(channel: Any, cmd: RemotingCommand, result: Any) -> None:
            if type(result) is response_type and result.code not in send_ok:
                reject("send", channel, cmd, result, _send_topic(cmd))
            elif enabled:
                topic = _send_topic(cmd)
                if topic is not None:
                    bytes_in[topic] += len(cmd.body)

        def observed_run(channel: Any, cmds: list[RemotingCommand]) -> list[Any]:
            started = clock()
            results = run_handler(channel, cmds)
            elapsed = clock() - started
            for i, (cmd, result) in enumerate(zip(cmds, results)):
                kind = type(result)
                if kind is bytes or kind is response_type:
                    if enabled:
                        histogram.observe(elapsed)
                    observe(channel, cmd, result)
                elif result is not None and not isinstance(result, BaseException):
                    results[i] = finish(channel, cmd, result, started)
            return results

        return observed_run

    def _wrap_pull(self, process: Callable) -> Callable:
        reject = self._reject
        normal = _PULL_NORMAL
        if not self.enabled:
            def observed_pull(channel: Any, cmd: RemotingCommand, header: Any, allow_suspend: bool) -> Any:
                response = process(channel, cmd, header, allow_suspend)
                if type(response) is RemotingCommand and response.code not in normal:
                    reject("pull", channel, cmd, response, header.topic)
                return response

            return observed_pull

        clock = time.perf_counter
        histogram = self.pull_latency
        messages_out, bytes_out = self.messages_out, self.bytes_out

        def timed_pull(channel: Any, cmd: RemotingCommand, header: Any, allow_suspend: bool) -> Any:
            started = clock()
            response = process(channel, cmd, header, allow_suspend)
            if type(response) is not RemotingCommand:
                return response  # held (answered later) or pre-encoded
            histogram.observe(clock() - started)
            code = response.code
            if code == 0:
                topic = header.topic
                try:
                    advanced = int(response.ext_fields["nextBeginOffset"]) - header.queue_offset
                except (KeyError, TypeError, ValueError):
                    advanced = 0
                if advanced > 0:
                    messages_out[topic] += advanced
                bytes_out[topic] += len(response.body)
            elif code not in normal:
                reject("pull", channel, cmd, response, header.topic)
            return response

        return timed_pull

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags: Any = None) -> None:
        self.messages_in[topic] += 1 if tags is None or type(tags) is int else len(tags)

    def _wrap_heartbeat(self, handler: Callable) -> Callable:
        """One INFO line when a client first heartbeats on a connection, one when that connection closes."""

        def heartbeat(channel: Any, cmd: RemotingCommand) -> Any:
            result = handler(channel, cmd)
            attrs = getattr(channel, "attrs", None)
            if attrs is None or _CLIENT_ATTR in attrs or type(result) is not RemotingCommand or result.code != 0:
                return result
            try:
                from protocol.bodies import HeartbeatData

                data = HeartbeatData.decode(cmd.body) if cmd.body else HeartbeatData()
            except ValueError:
                return result
            client_id = data.client_id or "?"
            attrs[_CLIENT_ATTR] = client_id
            producers = sorted(p.group_name for p in data.producers if p.group_name)
            consumers = sorted(c.group_name for c in data.consumers if c.group_name)
            addr = getattr(channel, "remote_addr", "?")
            log.info("client connected: %s from %s (language %s, version %s; producer groups %s; consumer groups %s)",
                     client_id, addr, cmd.language, cmd.version, producers or "-", consumers or "-")
            if hasattr(channel, "add_close_listener"):
                channel.add_close_listener(
                    lambda ch: log.info("client disconnected: %s from %s", client_id, addr))
            return result

        return heartbeat

    def _wrap_flush(self, flush: Callable) -> Callable:
        histogram = self.flush_latency
        warnings = self.warnings
        threshold = self.slow_flush_s

        async def timed_flush(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await flush(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                histogram.observe(elapsed)
                if threshold and elapsed >= threshold:
                    warnings.warning("slow-flush", "slow commit log flush: %.0f ms (warning threshold %d ms)",
                                  elapsed * 1000, int(threshold * 1000))

        return timed_flush

    # ---- rates (GET_BROKER_RUNTIME_INFO, GET_CONSUME_STATS) ------------------------------------
    def _group_consumed_totals(self) -> dict[str, int]:
        totals: dict[str, int] = defaultdict(int)
        for key, queues in self.broker.consumer_offset_manager.offset_table.items():
            group = key.rpartition("@")[2]
            totals[group] += sum(queues.values())
        return totals

    def sample(self, now: float | None = None) -> None:
        """Update put/get TPS and per-group consume TPS from the counters since the previous sample."""
        now = time.monotonic() if now is None else now
        stats = self.broker.store.stats
        puts, gets = int(stats.get("put_messages", 0)), int(stats.get("get_messages", 0))
        groups = self._group_consumed_totals()
        previous = self._last_sample
        self._last_sample = (now, puts, gets, groups)
        if previous is None:
            return
        elapsed = now - previous[0]
        if elapsed <= 0:
            return
        self._rates = {"putTps": round(max(0, puts - previous[1]) / elapsed, 2),
                       "getTransferedTps": round(max(0, gets - previous[2]) / elapsed, 2)}
        old_groups = previous[3]
        self._group_rates = {g: round(max(0, total - old_groups.get(g, total)) / elapsed, 2)
                             for g, total in groups.items()}

    async def _sample_forever(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:
                log.exception("sampling broker rates failed")
            await asyncio.sleep(RATE_SAMPLE_INTERVAL_S)

    def runtime_rates(self) -> dict[str, float]:
        return dict(self._rates)

    def consume_tps(self, group: str) -> float:
        return float(self._group_rates.get(group, 0.0))

    # ---- HTTP endpoint --------------------------------------------------------------------------
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

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        m = self.metrics
        broker = m.broker
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
        yield from self._consumers(broker)
        yield from self._store(broker)
        yield from self._transactions(broker)
        connections = GaugeMetricFamily("rocketmq_connections", "Open client connections")
        connections.add_metric([], sum(len(server.channels) for server in broker.servers))
        yield connections
        suspended = GaugeMetricFamily("rocketmq_suspended_pulls", "Pull requests held by long polling")
        suspended.add_metric([], broker.processors["pull"].hold_service.held_count)
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
    def _consumers(broker: "Broker") -> Iterator[Any]:
        store = broker.store
        lag = GaugeMetricFamily("rocketmq_consumer_lag", "Messages not yet consumed (broker max offset - "
                                "committed offset), by group and topic", labels=["group", "topic"])
        topics = broker.topic_config_manager
        for key, queues in sorted(broker.consumer_offset_manager.offset_table.items()):
            topic, _, group = key.rpartition("@")
            config = topics.get(topic)
            queue_ids = range(config.read_queue_nums) if config is not None else queues.keys()
            # Same rule as GET_CONSUME_STATS (mqadmin consumerProgress): an uncommitted queue counts from 0.
            behind = sum(max(0, store.get_max_offset(topic, q) - max(0, queues.get(q, 0))) for q in queue_ids)
            lag.add_metric([group, topic], behind)
        yield lag
        clients = GaugeMetricFamily("rocketmq_consumer_clients", "Live consumer clients, by group", labels=["group"])
        for group, info in sorted(broker.consumer_manager.groups.items()):
            clients.add_metric([group], len(info.clients))
        yield clients

    @staticmethod
    def _transactions(broker: "Broker") -> Iterator[Any]:
        service = broker.transaction_service
        outcomes = CounterMetricFamily("rocketmq_transactions", "Transaction decisions and checks since start: "
                                       "commit, rollback, check (sent), discard (given up after "
                                       "transactionCheckMax)", labels=["outcome"])
        for name, key in (("commit", "commits"), ("rollback", "rollbacks"), ("check", "checks"),
                          ("discard", "discards")):
            outcomes.add_metric([name], service.counters[key])
        yield outcomes
        behind = GaugeMetricFamily("rocketmq_transaction_half_unchecked", "Half-queue records the check service "
                                   "has not passed yet (open transactions and their checked copies)")
        behind.add_metric([], max(0, broker.store.get_max_offset("RMQ_SYS_TRANS_HALF_TOPIC", 0)
                                  - service.progress()))
        yield behind
        replication = replication_info(broker)
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
    def _store(broker: "Broker") -> Iterator[Any]:
        store = broker.store
        cfg = broker.config
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
