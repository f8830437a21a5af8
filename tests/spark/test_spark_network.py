"""The `rocketmq` format in network mode (issue 29) against real broker processes and a real SparkSession.

The cluster (cluster_support.NetCluster): a standalone name server, broker-a (master + slave, slaveReadEnable) and
broker-b (master), every topic with 4 queues on both. What was sent is recorded as the broker stored it, so each
read is compared with exact rows: (topic, broker, queue_id, queue_offset, body) as a multiset.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import Counter
from typing import Any

import pytest

from cluster_support import (
    ACL_READER, ACL_TOPIC, BATCH_TOPICS, GROUPS, KILL_TOPIC, LOSS_TOPIC, QUEUES, STREAM_TOPIC, Sent, multiset,
    route,
)

KEY_COLUMNS = ("topic", "broker", "queue_id", "queue_offset", "body")


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return json.dumps(v)
    return str(v)


def read(spark, name_server: str, **options: Any):
    """spark.read in network mode; dict options become JSON, booleans 'true'/'false'."""
    reader = spark.read.format("rocketmq").option("nameServer", name_server)
    for key, value in options.items():
        reader = reader.option(key, _value(value))
    return reader.load()


def rows_of(df, *extra: str) -> list:
    return df.select(*KEY_COLUMNS, *extra).collect()


def reason(exc: BaseException) -> str:
    """The one-line reason the spec asks for: the first line of the error text containing 'rocketmq:'."""
    text = str(exc)
    for line in text.splitlines():
        if "rocketmq:" in line:
            return line[line.index("rocketmq:"):]
    raise AssertionError(f"no 'rocketmq:' line in the error:\n{text[-3000:]}")


def in_range(sent: list[Sent], start: dict[tuple[str, int], int], end: dict[tuple[str, int], int]) -> list[Sent]:
    """The records of [start, end) per (broker, queue)."""
    return [s for s in sent if start[(s.broker, s.queue_id)] <= s.queue_offset < end[(s.broker, s.queue_id)]]


# ---- the cluster itself -------------------------------------------------------------------------------------------
def test_the_cluster_has_two_groups_a_slave_and_the_recorded_messages(net_cluster):
    for topic in (*BATCH_TOPICS, STREAM_TOPIC, KILL_TOPIC):
        data = asyncio.run(route(net_cluster.name_server, topic))
        assert {q.broker_name: q.read_queue_nums for q in data.queue_datas} == {b: QUEUES for b in GROUPS}
        addrs = {b.broker_name: b.broker_addrs for b in data.broker_datas}
        assert addrs["broker-a"] == {0: net_cluster.master_a.addr, 1: net_cluster.slave_a.addr}
        assert addrs["broker-b"] == {0: net_cluster.master_b.addr}
    for topic in BATCH_TOPICS:  # every queue non-empty, no two queues the same length, offsets dense from 0
        ends = net_cluster.max_offsets(topic)
        assert all(ends.values()) and len(set(ends.values())) == len(ends)
        for (broker, q), end in ends.items():
            got = sorted(s.queue_offset for s in net_cluster.of(topic) if (s.broker, s.queue_id) == (broker, q))
            assert got == list(range(end))
    assert len(multiset(net_cluster.sent)) == len(net_cluster.sent)
