"""Flood limits on the send path (issue 27): topics auto-created per client, and properties per message.

The messaging core's send service (broker/core/send.py) calls `SendLimits` at the two points where a client can make
the broker do work out of proportion to its request, whichever protocol brought it.

* **Auto-created topics per client.** Creating a topic costs the broker files, a journal record, a route
  registration and a config rewrite; one client creating topics as fast as it could made 6,784 in 10 s and cut a
  bystander's sends to a tenth. A token bucket per client address allows `autoCreateTopicBurstPerClient` creations
  at once and `autoCreateTopicRatePerClient` a second after that. The key is the peer's IP address: not the clientId
  (the client chooses it, a flooder would rotate it) nor the connection (a flooder opens more). Clients behind one
  address share a bucket; a bucket that has filled up again is the same as a new one, so the table forgets those and
  never grows past `MAX_CLIENTS` entries (addresses beyond that share one bucket). Every topic a client's send
  creates counts, a `%RETRY%` one included (a consumer's own retry topic exists from its heartbeat); the topics the
  broker creates for itself (retry and dead-letter topics on heartbeat and send-back, POP retry topics, system
  topics) do not come through here and are never limited.
* **Properties per message.** Decoding a properties string costs about half a microsecond per property; a pipeline
  of 2,048 messages of 4,100 properties each held the loop for seconds. The properties string a client sends is
  refused with MESSAGE_ILLEGAL past `maxMessagePropertiesBytes` (UTF-8 bytes) or `maxMessagePropertiesCount`
  properties. What is counted is what decoding costs: the entries between separators (0x02), well-formed or not
  (16,000 entries of one character cost more to decode than 4,100 real properties). Nothing is decoded for the
  check: callers skip strings no longer than `check_from` (they cannot break either limit), so a usual message pays
  one comparison; longer ones pay a length check and, past the count, a C-level count of separators.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# Limits on how many client addresses keep a bucket of their own (~100 bytes each).
MAX_CLIENTS = 65_536
_SHARED_KEY = "*"  # addresses beyond MAX_CLIENTS (with no full bucket to forget) share this one


class TopicCreationBuckets:
    """A token bucket per client address: `burst` tokens, refilled at `per_second`; one token per topic created."""

    def __init__(self, per_second: int, burst: int, clock: Callable[[], float] = time.monotonic,
                 max_clients: int = MAX_CLIENTS) -> None:
        self.per_second = per_second
        self.burst = burst
        self._clock = clock
        self._max_clients = max_clients
        self._buckets: dict[str, list[float]] = {}  # address -> [tokens, time of last refill]
        self._next_sweep = 0.0  # a full table is swept at most once a second (a sweep visits every bucket)

    def _bucket(self, key: str, now: float) -> list[float]:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._max_clients:
                if now >= self._next_sweep:
                    self._next_sweep = now + 1.0
                    self._forget_full(now)
                if len(self._buckets) >= self._max_clients:
                    key = _SHARED_KEY
                    bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = [float(self.burst), now]
                return bucket
        tokens = bucket[0] + (now - bucket[1]) * self.per_second
        bucket[0] = tokens if tokens < self.burst else float(self.burst)
        bucket[1] = now
        return bucket

    def _forget_full(self, now: float) -> None:
        rate, burst = self.per_second, self.burst
        full = [key for key, (tokens, last) in self._buckets.items() if tokens + (now - last) * rate >= burst]
        for key in full:
            del self._buckets[key]

    def available(self, key: str) -> bool:
        """True when the client at `key` may create one more topic now (nothing is spent)."""
        return self._bucket(key, self._clock())[0] >= 1.0

    def spend(self, key: str) -> None:
        """The client at `key` created a topic."""
        self._bucket(key, self._clock())[0] -= 1.0


def client_address(requester: Any) -> str:
    """The IP address a request came from (a Requester, or anything with remote_host / remote_addr), the same for
    IPv4, IPv4-mapped IPv6 and bracketed IPv6 spellings."""
    host = getattr(requester, "remote_host", None) or str(getattr(requester, "remote_addr", "?"))
    host = host.strip("[]")
    return host[7:] if host.startswith("::ffff:") and "." in host else host


class SendLimits:
    """The send path's flood limits, configured from BrokerConfig's issue-27 keys."""

    def __init__(self, config: Any) -> None:
        self.rate = config.auto_create_topic_rate_per_client
        self.burst = config.auto_create_topic_burst_per_client
        self.buckets = TopicCreationBuckets(self.rate, self.burst) if self.rate > 0 else None
        self.max_bytes = config.max_message_properties_bytes
        self.max_count = config.max_message_properties_count
        # A properties string no longer than this cannot break either limit (n characters are at most 4n UTF-8 bytes
        # and hold at most n entries): callers skip the check below it, so a usual message pays one comparison.
        self.check_from = min(self.max_bytes // 4, self.max_count)

    # ---- auto-creation ------------------------------------------------------------------------------------------
    def create_topic(self, topics: Any, requester: Any, topic: str, default_topic: str | None,
                     queue_nums: int) -> tuple[Any, str | None]:
        """Auto-create `topic` for a send from `requester` (its remote_addr / remote_host): (its TopicConfig or None if it cannot be created, None) or
        (None, the refusal remark) when the client is past its creation rate.

        The answer to a refusal is SYSTEM_BUSY (2), the code of the reference's flow control. A Java producer's send
        raises it to the application at once as MQBrokerException with this remark: 2 is not among the codes it
        retries on other brokers (retryResponseCodes). TOPIC_NOT_EXIST would be retried at once, spending the bucket
        on every broker, and would tell the operator the wrong story; 5.x gRPC clients get TOO_MANY_REQUESTS, and no
        client takes SYSTEM_BUSY for "the topic does not exist"."""
        buckets = self.buckets
        if buckets is None:
            return topics.create_topic_in_send_callback(topic, default_topic, requester.remote_addr, queue_nums, 0), None
        address = client_address(requester)
        if not buckets.available(address):
            return None, (f"topic[{topic}] not created: the client at {address} auto-creates topics faster than this "
                          f"broker allows one client (autoCreateTopicRatePerClient={self.rate} a second, "
                          f"autoCreateTopicBurstPerClient={self.burst}); create it first (mqadmin updateTopic) or "
                          f"send again later")
        created = topics.create_topic_in_send_callback(topic, default_topic, requester.remote_addr, queue_nums, 0)
        if created is not None:
            buckets.spend(address)
        return created, None

    # ---- properties ---------------------------------------------------------------------------------------------
    def properties_refusal(self, text: str | None, what: str = "the message") -> str | None:
        """Why the properties string a client sent is refused (the MESSAGE_ILLEGAL remark), or None."""
        if not text:
            return None
        size = len(text)
        if size > self.max_bytes or (not text.isascii() and len(text.encode("utf-8", "replace")) > self.max_bytes):
            size = size if text.isascii() else len(text.encode("utf-8", "replace"))
            return (f"{what}'s properties are {size} bytes, more than this broker allows "
                    f"(maxMessagePropertiesBytes={self.max_bytes})")
        if size > self.max_count:  # n characters hold at most n entries
            count = text.count("\x02") + (0 if text.endswith("\x02") else 1)
            if count > self.max_count:
                return (f"{what} has {count} properties, more than this broker allows "
                        f"(maxMessagePropertiesCount={self.max_count})")
        return None

    def raw_properties_refusal(self, raw: bytes, what: str) -> str | None:
        """The same check on a batch entry's properties as they arrived (UTF-8 bytes)."""
        if not raw:
            return None
        if len(raw) > self.max_bytes:
            return (f"{what}'s properties are {len(raw)} bytes, more than this broker allows "
                    f"(maxMessagePropertiesBytes={self.max_bytes})")
        if len(raw) > self.max_count:
            count = raw.count(b"\x02") + (0 if raw.endswith(b"\x02") else 1)
            if count > self.max_count:
                return (f"{what} has {count} properties, more than this broker allows "
                        f"(maxMessagePropertiesCount={self.max_count})")
        return None
