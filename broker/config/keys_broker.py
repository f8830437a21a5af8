"""Broker keys: identity and cluster, name-server registration, topics/groups/consumption, gRPC POP consumption,
timed messages and transactions. Defaults follow RocketMQ so an existing broker.conf means the same thing here."""

from __future__ import annotations

import functools

from protocol.names import topic_problem

from .defaults import default_broker_name, env_namesrv_addr
from .entry import OneOf, Positive, Range, Rule, key

__all__ = ["KEYS", "BROKER_ROLES"]

BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")

_k = functools.partial(key, concern="broker")

KEYS = (
    # identity / cluster
    _k("brokerClusterName", str, "DefaultCluster"),
    _k("brokerName", str, factory=default_broker_name, doc="default: the host name"),
    _k("brokerId", int, 0, doc="masters register as 0; a SLAVE needs > 0 (checked with brokerRole)"),
    _k("brokerRole", str, "ASYNC_MASTER", OneOf(BROKER_ROLES)),
    _k("brokerIP1", str, optional=True, doc="unset: the first non-loopback IPv4 of the host"),
    _k("brokerIP2", str, optional=True, doc="HA address; unset: brokerIP1"),
    _k("regionId", str, "DefaultRegion"),
    _k("brokerPermission", int, 6, Range(0, 15, "expected permission bits 0..15, got {}")),
    # name servers
    _k("namesrvAddr", str, factory=env_namesrv_addr, optional=True, doc="host:port;host:port; unset: $NAMESRV_ADDR"),
    _k("enableEmbeddedNamesrv", bool, True),
    _k("registerNameServerPeriod", int, 30_000, Positive()),
    _k("channelExpiredTimeout", int, 120_000, Positive(),
       doc="ms without heartbeat before a client registration is dropped"),
    # topics / groups / consumption
    _k("autoCreateTopicEnable", bool, True),
    _k("autoCreateSubscriptionGroup", bool, True),
    _k("defaultTopicQueueNums", int, 8, Positive()),
    _k("enablePropertyFilter", bool, False),
    _k("longPollingEnable", bool, True),
    _k("shortPollingTimeMills", int, 1000, Positive()),
    _k("maxPullSuspendTimeMillis", int, 60_000, Positive(),
       doc="project key: cap on a pull's suspendTimeoutMillis (long polling)"),
    _k("slaveReadEnable", bool, False),
    _k("traceOn", bool, True),
    _k("traceTopicEnable", bool, False, doc="create the message-trace topic (msgTraceTopicName) at start-up"),
    _k("msgTraceTopicName", str, "RMQ_SYS_TRACE_TOPIC", Rule(topic_problem), doc="the topic clients write message traces to"),
    _k("flushConsumerOffsetInterval", int, 5000, Positive()),
    _k("rebalanceLockMaxLiveTime", int, 60_000, doc="project key (a -D property in RocketMQ): queue lock lifetime, ms"),
    # POP consumption over gRPC (the reference proxy's keys): the shortest invisible duration a receive may ask
    # for, and the bounds of a receive's long poll (min <= max is checked across keys)
    _k("minInvisibleTimeMillsForRecv", int, 10_000, Positive()),
    _k("grpcClientConsumerMinLongPollingTimeoutMillis", int, 5_000, Positive()),
    _k("grpcClientConsumerMaxLongPollingTimeoutMillis", int, 20_000, Positive()),
    # push consumers' auto-renewed deliveries: invisible for, renewed this long before they lapse (less than the
    # invisible time, checked across keys), renewed for at most
    _k("defaultInvisibleTimeMills", int, 60_000, Positive()),
    _k("renewAheadTimeMillis", int, 10_000, Positive()),
    _k("renewMaxTimeMillis", int, 3 * 3600 * 1000, Positive()),
    # 5.x timed messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS): how far ahead they may be
    _k("timerMaxDelaySec", int, 3 * 24 * 3600, Positive()),
    # RecallMessage (both protocols, broker/core/recall.py): off by default, as in the reference; with the broker's
    # write permission taken away, still allowed unless allowRecallWhenBrokerNotWriteable=false
    _k("recallMessageEnable", bool, False),
    _k("allowRecallWhenBrokerNotWriteable", bool, True),
    # 5.x topic message types (the topic attribute message.type, broker/managers/topic_message_type.py): a send
    # whose type is not its topic's is refused (the reference proxy's key, default true since 5.1); MIXED topics
    # (any type) may be created only with enableMixedMessageType
    _k("enableTopicMessageTypeCheck", bool, True),
    _k("enableMixedMessageType", bool, False),
    # transactions
    _k("transactionTimeOut", int, 6000, Positive()),
    _k("transactionCheckMax", int, 15, Positive()),
    _k("transactionCheckInterval", int, 60_000, Positive()),
    _k("rejectTransactionMessage", bool, False),
)
