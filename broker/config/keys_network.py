"""Network and limit keys: listening ports and hosts (remoting, VIP, name server, metrics, web console, gRPC),
connection limits (``broker.connection_guard.ConnectionLimits`` takes its fields from here) and flood limits
(broker/core/send_limits.py)."""

from __future__ import annotations

import functools

from .entry import Port, Positive, Range, key

__all__ = ["KEYS"]

_k = functools.partial(key, concern="network")

KEYS = (
    # listeners
    _k("listenPort", int, 10911, Port()),
    _k("listenHost", str, "0.0.0.0"),
    _k("enableVipChannel", bool, True, doc="also listen on listenPort - 2 (old Java clients send there)"),
    _k("namesrvListenPort", int, 9876, Port()),
    _k("frameMaxLength", int, 16 * 1024 * 1024, Positive()),
    _k("metricsPort", int, 0, Port(allow_zero=True)),
    _k("metricsHost", str, "127.0.0.1",
       doc="project key: bind host of the metrics endpoint (loopback unless opened up)"),
    _k("slowFlushWarnMillis", int, 1000, doc="project key: log a warning when one commit-log flush takes this long"),
    # project keys: the web console (broker/console). Unset port: 8082 when free (a busy default port only warns);
    # a port given in broker.conf must be free; 0 = off.
    _k("dashboardPort", int, optional=True, check=Port(allow_zero=True)),
    _k("dashboardHost", str, "127.0.0.1"),
    # the gRPC endpoint of RocketMQ 5.x SDKs (broker/grpc); unset port: 8081 when free (a busy default only warns)
    _k("enableGrpcProxy", bool, True),
    _k("grpcServerPort", int, optional=True, check=Port(allow_zero=True)),
    # connection limits, per process (broker, VIP and embedded name server ports together); see connection_guard
    _k("serverChannelMaxIdleTimeSeconds", int, 120, Positive(), doc="connections silent this long are closed"),
    _k("serverMaxConnections", int, 10_000, Positive(), doc="project key: connections over it are closed at once"),
    _k("serverMaxBufferedFrameBytes", int, 256 * 1024 * 1024, Positive(),
       doc="project key: unfinished frames, all connections"),
    _k("serverFrameStallTimeoutSeconds", int, 10, Positive(),
       doc="project key: budget holder silent this long while others wait"),
    _k("writeBufferHighWaterMark", int, 1024 * 1024, Positive(),
       doc="unread responses above it: stop reading that connection"),
    _k("writeBufferLowWaterMark", int, 0,
       doc="... until they drain below this (0: a quarter of the high mark); 0..high checked across keys"),
    # issue 27, no flood starves others (project key): descriptors kept free for the store; new topics and
    # connections are refused once open descriptors + this reach the open-file limit (0: never refuse)
    _k("fileDescriptorReserve", int, 128, Range(0, None, "must be >= 0 (0: no reserve), got {}")),
    # issue 27, flood limits: topics one client address may auto-create (a token bucket: a burst, then so many a
    # second; rate 0 = no limit), and properties per message a client may send
    _k("autoCreateTopicRatePerClient", int, 10, Range(0, None, "expected topics a second (0 = no limit), got {}")),
    _k("autoCreateTopicBurstPerClient", int, 50, Range(1, None, "must be at least 1, got {}")),
    _k("maxMessagePropertiesCount", int, 256,
       Range(16, 32767, "expected 16..32767 (clients and the broker add up to a dozen properties of their own), "
                        "got {}")),
    _k("maxMessagePropertiesBytes", int, 32767,
       Range(1024, 32767, "expected 1024..32767 (a record holds at most 32767 bytes of properties), got {}")),
)
