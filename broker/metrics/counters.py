"""The counters metrics keep, and the observers the owners call to feed them: the remoting server per send request,
the messaging core's send per gRPC send request, the pull processor per executed pull, the store per commit-log flush
and per put (its arrival listener).

Hot-path rule: nothing here runs per message; everything derivable from state (consumer lag, store size,
connections, suspended pulls) is computed at scrape time (exposition.py). With ``metricsPort`` 0 only the cheap
rejection check stays on the send/pull path. Rejected requests and slow flushes are logged (rate-limited) either way.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections import defaultdict
from typing import Any

from prometheus_client.core import HistogramMetricFamily

from broker.log_limit import RateLimitedLog
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand

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
    """The counters, and the observers that feed them. Built before the store (its flush observer is handed to it);
    the exposition (exposition.py) reads the counters at scrape time."""

    def __init__(self, enabled: bool, slow_flush_ms: int = 1000) -> None:
        self.enabled = enabled  # metricsPort set: count and time; otherwise only refusals are logged
        self.slow_flush_s = max(0, int(slow_flush_ms)) / 1000.0
        self.warnings = RateLimitedLog(log, WARN_INTERVAL_S)
        self.messages_in: dict[str, int] = defaultdict(int)
        self.bytes_in: dict[str, int] = defaultdict(int)
        self.messages_out: dict[str, int] = defaultdict(int)
        self.bytes_out: dict[str, int] = defaultdict(int)
        self.rejected: dict[tuple[str, str], int] = defaultdict(int)
        self.send_latency = LatencyHistogram(LATENCY_BUCKETS)
        self.pull_latency = LatencyHistogram(LATENCY_BUCKETS)
        self.flush_latency = LatencyHistogram(FLUSH_BUCKETS)

    def request_observers(self) -> dict[int, Any]:
        """{request code: observer} for the remoting servers: every send code."""
        return {int(code): self.observe_send for code in SEND_CODES}

    # ---- observers ----------------------------------------------------------------------------
    def _reject(self, family: str, channel: Any, cmd: RemotingCommand, response: RemotingCommand,
                topic: str | None) -> None:
        code_name = _response_name(response.code)
        if self.enabled:
            self.rejected[(family, code_name)] += 1
        self.warnings.warning((family, response.code),
                              "rejected %s from %s (topic %s): %s %s", _request_name(cmd.code),
                              getattr(channel, "remote_addr", "?"), topic or "?", code_name, response.remark or "")

    def observe_send(self, channel: Any, cmd: RemotingCommand, result: Any, elapsed: float) -> None:
        """One send request answered (`result`: its response or pre-encoded frame) after `elapsed` seconds."""
        enabled = self.enabled
        if enabled:
            self.send_latency.observe(elapsed)
        if type(result) is RemotingCommand and result.code not in _SEND_OK:
            self._reject("send", channel, cmd, result, _send_topic(cmd))
        elif enabled:
            topic = _send_topic(cmd)
            if topic is not None:
                self.bytes_in[topic] += len(cmd.body)

    def observe_core_send(self, topic: str, message_count: int, body_bytes: int, code: int, seconds: float) -> None:
        """One send request settled by the messaging core (a gRPC SendMessage: remoting sends are observed by their
        server), counted as a remoting send is: its latency, and its body bytes in, or the refusal."""
        enabled = self.enabled
        if enabled:
            self.send_latency.observe(seconds)
        if code not in _SEND_OK:
            code_name = _response_name(code)
            if enabled:
                self.rejected[("send", code_name)] += 1
            self.warnings.warning(("send", code), "rejected a send of %d message(s) to topic %s: %s",
                                  message_count, topic, code_name)
        elif enabled:
            self.bytes_in[topic] += body_bytes

    def observe_pull(self, channel: Any, cmd: RemotingCommand, header: Any, response: RemotingCommand,
                     elapsed: float) -> None:
        """One pull executed (held pulls: the run that answered them)."""
        code = response.code
        if not self.enabled:
            if code not in _PULL_NORMAL:
                self._reject("pull", channel, cmd, response, header.topic)
            return
        self.pull_latency.observe(elapsed)
        if code == 0:
            topic = header.topic
            try:
                advanced = int(response.ext_fields["nextBeginOffset"]) - header.queue_offset
            except (KeyError, TypeError, ValueError):
                advanced = 0
            if advanced > 0:
                self.messages_out[topic] += advanced
            self.bytes_out[topic] += len(response.body)
        elif code not in _PULL_NORMAL:
            self._reject("pull", channel, cmd, response, header.topic)

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, tags: Any = None) -> None:
        """Store arrival listener (one call per put, a batch included): messages stored by topic."""
        self.messages_in[topic] += 1 if tags is None or type(tags) is int else len(tags)

    def observe_flush(self, elapsed: float) -> None:
        """One commit-log flush took `elapsed` seconds; a slow one is logged."""
        self.flush_latency.observe(elapsed)
        threshold = self.slow_flush_s
        if threshold and elapsed >= threshold:
            self.warnings.warning("slow-flush", "slow commit log flush: %.0f ms (warning threshold %d ms)",
                                  elapsed * 1000, int(threshold * 1000))
