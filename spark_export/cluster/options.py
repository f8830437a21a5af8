"""Options of the `rocketmq` source in network mode (a cluster read through its name server), parsed once.

Named as in Spark's Kafka source where one exists (startingOffsets, endingOffsets, startingTimestamp,
maxOffsetsPerTrigger, minPartitions, failOnDataLoss) and as in rocketmq-spark for the rest (nameServer, topic,
subExpression, pullBatchSize, pullTimeoutMs). Every mistake is a ValueError whose one line names the option.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from spark_export.schema import DEFAULT_BATCH_ROWS

__all__ = ["ClusterOptions", "OffsetSpec", "EARLIEST", "LATEST", "is_network_read"]

EARLIEST = -2  # as in Kafka's and rocketmq-spark's offset JSON
LATEST = -1
DEFAULT_GROUP = "spark-rocketmq-source"

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

# topic -> brokerName -> queueId -> offset (-2 earliest, -1 latest); the rocketmq-spark JSON
OffsetSpec = dict[str, dict[str, dict[int, int]]]


def is_network_read(options) -> bool:
    """Network mode is chosen by giving a name server."""
    return any(str(k).lower() == "nameserver" and v for k, v in dict(options).items())


def _flag(opts: dict, key: str, default: bool) -> bool:
    value = opts.get(key.lower())
    if value is None or value == "":
        return default
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"rocketmq: option {key}={value!r} must be true or false")


def _positive(opts: dict, key: str, default: int | None) -> int | None:
    value = opts.get(key.lower())
    if value is None or value == "":
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f"rocketmq: option {key}={value!r} must be a whole number") from None
    if number <= 0:
        raise ValueError(f"rocketmq: option {key}={value!r} must be positive")
    return number


def _offset_spec(key: str, text: str, topics: tuple[str, ...], allow_earliest: bool) -> str | OffsetSpec:
    """'earliest' / 'latest' or the JSON {"T":{"broker-a":{"0":5}}}, checked."""
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        if word == "earliest" and not allow_earliest:
            raise ValueError(f"rocketmq: option {key} cannot be 'earliest'")
        return word
    try:
        raw = json.loads(text)
    except ValueError:
        raise ValueError(f"rocketmq: option {key} must be 'earliest', 'latest' or JSON like "
                         '{"TopicA":{"broker-a":{"0":23,"1":-2}}}') from None
    if not isinstance(raw, dict):
        raise ValueError(f"rocketmq: option {key} JSON must be an object of topic -> brokerName -> queueId -> offset")
    spec: OffsetSpec = {}
    for topic, brokers in raw.items():
        if topic not in topics:
            raise ValueError(f"rocketmq: option {key} names topic {topic!r}, which is not in option topic {list(topics)}")
        if not isinstance(brokers, dict):
            raise ValueError(f"rocketmq: option {key}: topic {topic!r} must map brokerName -> queueId -> offset")
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise ValueError(f"rocketmq: option {key}: {topic}/{broker} must map queueId -> offset")
            for queue, offset in queues.items():
                try:
                    queue_id = int(queue)
                except (TypeError, ValueError):
                    raise ValueError(f"rocketmq: option {key}: queue id {queue!r} of {topic}/{broker} is not a number") from None
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                    raise ValueError(f"rocketmq: option {key}: offset {offset!r} of {topic}/{broker}/{queue} must be "
                                     "a number >= 0, -2 (earliest) or -1 (latest)")
                if offset == EARLIEST and not allow_earliest:
                    raise ValueError(f"rocketmq: option {key}: -2 (earliest) is not allowed ({topic}/{broker}/{queue})")
                spec.setdefault(topic, {}).setdefault(str(broker), {})[queue_id] = offset
    return spec


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """What a network read needs; pickled into every partition, so it holds only plain values."""

    name_servers: str
    topics: tuple[str, ...]
    starting_offsets: str | OffsetSpec | None = None  # None: the mode's default (earliest batch, latest stream)
    ending_offsets: str | OffsetSpec = "latest"
    starting_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    min_offsets_per_partition: int = 100_000  # smaller ranges of one brokerName share a task (planning.pack_ranges)
    fail_on_data_loss: bool = True
    sub_expression: str = "*"
    access_key: str | None = None
    secret_key: str | None = None
    security_token: str | None = None
    consumer_group: str = DEFAULT_GROUP
    tls: bool = False
    tls_trust_cert_path: str | None = None
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    pull_batch_size: int = 1024
    pull_timeout_ms: int = 30_000
    pulls_in_flight: int = 4
    include_body: bool = True
    decompress: bool = True
    batch_rows: int = DEFAULT_BATCH_ROWS
    columns: tuple[str, ...] | None = None

    @property
    def filtered(self) -> bool:
        """A tag expression other than '*': the broker skips messages, so offsets read have gaps."""
        return self.sub_expression.strip() not in ("", "*")

    @classmethod
    def parse(cls, options) -> "ClusterOptions":
        opts = {str(k).lower(): v for k, v in dict(options).items()}
        name_servers = str(opts.get("nameserver") or "").strip()
        addrs = [a.strip() for a in name_servers.split(";") if a.strip()]
        if not addrs:
            raise ValueError("rocketmq: option nameServer must be 'host:port[;host:port...]'")
        for addr in addrs:
            host, _, port = addr.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"rocketmq: option nameServer: {addr!r} is not host:port")
        if opts.get("path") or opts.get("paths"):
            raise ValueError("rocketmq: give either a store directory (load(path)) or option nameServer, not both")
        topic_text = str(opts.get("topic") or opts.get("topics") or "")
        topics = tuple(dict.fromkeys(t.strip() for t in topic_text.split(",") if t.strip()))
        if not topics:
            raise ValueError("rocketmq: option topic is required in network mode, e.g. .option('topic', 'T1,T2')")
        starting = opts.get("startingoffsets")
        ending = opts.get("endingoffsets")
        timestamp = opts.get("startingtimestamp")
        if timestamp not in (None, ""):
            try:
                timestamp = int(str(timestamp).strip())
            except ValueError:
                raise ValueError(f"rocketmq: option startingTimestamp={timestamp!r} must be milliseconds since the epoch") from None
            if timestamp < 0:
                raise ValueError(f"rocketmq: option startingTimestamp={timestamp} must not be negative")
        else:
            timestamp = None
        access_key = str(opts.get("accesskey") or "").strip() or None
        secret_key = str(opts.get("secretkey") or "").strip() or None
        if (access_key is None) != (secret_key is None):
            raise ValueError("rocketmq: options accessKey and secretKey go together")
        columns = opts.get("columns")
        group = str(opts.get("consumergroup") or DEFAULT_GROUP).strip()
        if not group or len(group) > 255:
            raise ValueError(f"rocketmq: option consumerGroup={group!r} is not a usable group name")
        return cls(
            name_servers=";".join(addrs),
            topics=topics,
            starting_offsets=_offset_spec("startingOffsets", str(starting), topics, True) if starting else None,
            ending_offsets=_offset_spec("endingOffsets", str(ending), topics, False) if ending else "latest",
            starting_timestamp=timestamp,
            max_offsets_per_trigger=_positive(opts, "maxOffsetsPerTrigger", None),
            min_partitions=_positive(opts, "minPartitions", None),
            min_offsets_per_partition=_positive(opts, "minOffsetsPerPartition", 100_000),
            fail_on_data_loss=_flag(opts, "failOnDataLoss", True),
            sub_expression=str(opts.get("subexpression") or "*").strip() or "*",
            access_key=access_key,
            secret_key=secret_key,
            security_token=str(opts.get("securitytoken") or "").strip() or None,
            consumer_group=group,
            tls=_flag(opts, "tls", False) or _flag(opts, "tlsEnable", False),
            tls_trust_cert_path=opts.get("tlstrustcertpath") or None,
            tls_cert_path=opts.get("tlscertpath") or None,
            tls_key_path=opts.get("tlskeypath") or None,
            pull_batch_size=_positive(opts, "pullBatchSize", 1024),
            pull_timeout_ms=_positive(opts, "pullTimeoutMs", 30_000),
            pulls_in_flight=_positive(opts, "pullsInFlight", 4),
            include_body=_flag(opts, "include_body", True),
            decompress=_flag(opts, "decompress", True),
            batch_rows=_positive(opts, "batch_rows", DEFAULT_BATCH_ROWS),
            columns=tuple(c.strip() for c in str(columns).split(",") if c.strip()) if columns else None,
        )
