"""Operational observation of the broker: Prometheus metrics, rejected-request and slow-flush warnings, and the
rates shown by GET_BROKER_RUNTIME_INFO.

- counters.py: the counters and the observers their owners call (the remoting server per send request, the pull
  processor per executed pull, the store per flush and per put): no method of another object is replaced.
- rates.py: putTps / getTransferedTps / per-group consume TPS, sampled every few seconds.
- exposition.py: the scrape-time collector (over the broker's read-only view) and the HTTP endpoint (metricsPort).
"""

from broker.metrics.counters import SEND_CODES, BrokerMetrics, LatencyHistogram
from broker.metrics.exposition import MetricsEndpoint
from broker.metrics.rates import RateSampler

__all__ = ["SEND_CODES", "BrokerMetrics", "LatencyHistogram", "MetricsEndpoint", "RateSampler"]
