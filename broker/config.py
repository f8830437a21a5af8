"""Broker configuration: a ``BrokerConfig`` dataclass and a Java ``.properties`` loader.

Keys in broker.conf use RocketMQ's camelCase names (``listenPort``, ``brokerIP1``); the dataclass
exposes them as snake_case attributes (``listen_port``, ``broker_ip1``). Defaults follow RocketMQ
so an existing broker.conf means the same thing here.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import logging
import os
import re
import socket
from dataclasses import dataclass, field
from typing import Any, Mapping

from broker.errors import ConfigError
from broker.store.delay_levels import parse_delay_levels
from broker.tls import TlsSettings

log = logging.getLogger(__name__)

__all__ = [
    "BrokerConfig",
    "ConfigError",
    "load_broker_config",
    "parse_properties",
    "parse_delay_levels",
    "default_broker_ip",
    "key_to_attr",
    "DEFAULT_MESSAGE_DELAY_LEVEL",
]

DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
CQ_UNIT_SIZE = 20

FLUSH_DISK_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def key_to_attr(key: str) -> str:
    """RocketMQ property name -> attribute name: ``brokerIP1`` -> ``broker_ip1``."""
    return _CAMEL_BOUNDARY.sub("_", key).lower()


@functools.lru_cache(maxsize=1)
def default_broker_ip() -> str:
    """First non-loopback IPv4 address of this host; 127.0.0.1 when there is none.

    Tries the host name's addresses first, then asks the kernel which source address it would use for
    an outbound UDP "connection" (no packet is sent by connect() on a datagram socket).
    """
    candidates: list[str] = []
    try:
        candidates.extend(socket.gethostbyname_ex(socket.gethostname())[2])
    except OSError:
        pass
    for ip in candidates:
        if not ip.startswith("127.") and ip != "0.0.0.0":
            return ip
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))
            ip = probe.getsockname()[0]
            if ip and not ip.startswith("127.") and ip != "0.0.0.0":
                return ip
    except OSError:
        pass
    return "127.0.0.1"


def _default_broker_name() -> str:
    """RocketMQ's default brokerName is the local host name."""
    try:
        return socket.gethostname() or "DEFAULT_BROKER"
    except OSError:
        return "DEFAULT_BROKER"


def _env_namesrv_addr() -> str | None:
    return os.environ.get("NAMESRV_ADDR") or None


@dataclass
class BrokerConfig:
    """All broker settings. Attribute ``x_y`` is property ``xY`` in broker.conf (see ``key_to_attr``)."""

    # identity / cluster
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = field(default_factory=lambda: _default_broker_name())
    broker_id: int = 0
    broker_role: str = "ASYNC_MASTER"
    broker_ip1: str | None = None  # None -> first non-loopback IPv4 of the host
    broker_ip2: str | None = None  # HA address; None -> broker_ip1
    region_id: str = "DefaultRegion"
    broker_permission: int = 6
    # network
    listen_port: int = 10911
    listen_host: str = "0.0.0.0"
    ha_listen_port: int | None = None  # None -> listen_port + 1 (see ha_port)
    namesrv_addr: str | None = field(default_factory=_env_namesrv_addr)
    frame_max_length: int = 16 * 1024 * 1024
    metrics_port: int = 0
    slow_flush_warn_millis: int = 1000  # project key: log a warning when one commit-log flush takes this long
    enable_embedded_namesrv: bool = True
    namesrv_listen_port: int = 9876
    register_name_server_period: int = 30_000
    channel_expired_timeout: int = 120_000  # ms without heartbeat before a client registration is dropped
    server_channel_max_idle_time_seconds: int = 120  # connections silent this long are closed
    enable_vip_channel: bool = True  # also listen on listenPort - 2 (old Java clients send there)
    metrics_host: str = "127.0.0.1"  # project key: bind host of the metrics endpoint (loopback unless opened up)
    # project keys: the web console (broker/console). Unset port: 8082 when free (a busy default port only warns);
    # a port given in broker.conf must be free; 0 = off.
    dashboard_port: int | None = None
    dashboard_host: str = "127.0.0.1"
    # issue 27, web console part: the Host names it answers besides its own address (comma-separated; "name" any
    # port, "name:port" that port only, "*" any Host), and the slow-down and lock-out of failed sign-ins, per client
    # address and per account: a delay doubling from 1 s (capped) after DelayAfter failures, refused for
    # LockSeconds after LockAfter; failures are forgotten LockSeconds after the last one
    dashboard_allowed_hosts: str = ""
    dashboard_sign_in_delay_after: int = 5
    dashboard_sign_in_lock_after: int = 20
    dashboard_sign_in_account_delay_after: int = 20
    dashboard_sign_in_account_lock_after: int = 100
    dashboard_sign_in_max_delay_seconds: int = 60
    dashboard_sign_in_lock_seconds: int = 900
    # the gRPC endpoint of RocketMQ 5.x SDKs (broker/grpc); unset port: 8081 when free (a busy default only warns)
    enable_grpc_proxy: bool = True
    grpc_server_port: int | None = None
    # POP consumption over gRPC (the reference proxy's keys): the shortest invisible duration a receive may ask for,
    # and the bounds of a receive's long poll
    min_invisible_time_mills_for_recv: int = 10_000
    grpc_client_consumer_min_long_polling_timeout_millis: int = 5_000
    grpc_client_consumer_max_long_polling_timeout_millis: int = 20_000
    # push consumers' auto-renewed deliveries: invisible for, renewed this long before they lapse, renewed for at most
    default_invisible_time_mills: int = 60_000
    renew_ahead_time_millis: int = 10_000
    renew_max_time_millis: int = 3 * 3600 * 1000
    # 5.x timed messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS): how far ahead they may be
    timer_max_delay_sec: int = 3 * 24 * 3600
    # TLS on every remoting port of the process (broker, VIP, embedded name server); see broker/tls.py
    tls_mode: str = "disabled"  # disabled | permissive (TLS and plaintext on one port) | enforcing
    tls_server_cert_path: str | None = None  # PEM certificate chain
    tls_server_key_path: str | None = None  # PEM private key, unencrypted
    tls_server_trust_cert_path: str | None = None  # PEM CA bundle verifying client certificates
    tls_server_need_client_auth: str = "none"  # none | optional | require
    tls_enable: bool | None = None  # the broker's own connections to remote name servers; None: tlsMode=enforcing
    # connection limits, per process (broker, VIP and embedded name server ports together); see connection_guard
    server_max_connections: int = 10_000  # project key: connections over it are closed at once
    server_max_buffered_frame_bytes: int = 256 * 1024 * 1024  # project key: unfinished frames, all connections
    server_frame_stall_timeout_seconds: int = 10  # project key: budget holder silent this long while others wait
    write_buffer_high_water_mark: int = 1024 * 1024  # unread responses above it: stop reading that connection
    write_buffer_low_water_mark: int = 0  # ... until they drain below this (0: a quarter of the high mark)
    # issue 27, no flood starves others (project key): descriptors kept free for the store; new topics and
    # connections are refused once open descriptors + this reach the open-file limit (0: never refuse)
    file_descriptor_reserve: int = 128
    # store
    store_path_root_dir: str = "~/store"
    store_path_commit_log: str | None = None  # None -> <root>/commitlog (see commit_log_dir)
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    warm_maped_file_enable: bool = False  # RocketMQ's spelling: allocate whole commit-log files up front
    mapped_file_size_consume_queue: int = 300_000 * CQ_UNIT_SIZE
    flush_disk_type: str = "ASYNC_FLUSH"
    flush_interval_commit_log: int = 500
    sync_flush_timeout: int = 5000
    delete_when: str = "04"
    file_reserved_time: int = 72
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85  # project key (a -D property in RocketMQ)
    disk_space_warning_level_ratio: int = 90  # project key: refuse sends above this usage
    clean_resource_interval: int = 10_000  # ms between retention runs
    max_message_size: int = 4 * 1024 * 1024
    # bytes of records one pull answer may carry (RocketMQ's MessageStoreConfig key; the first record always goes)
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    enabled_append_prop_crc: bool = False
    auto_message_version_on_topic_len: bool = True
    store_type: str = "default"
    # topics / groups / consumption
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    enable_property_filter: bool = False
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    max_pull_suspend_time_millis: int = 60_000  # project key: cap on a pull's suspendTimeoutMillis (long polling)
    slave_read_enable: bool = False
    access_message_in_memory_max_ratio: int = 40  # % of RAM behind the log end that counts as cold data
    ha_master_address: str | None = None  # a slave's fixed master HA address (else learnt from the name server)
    slave_timeout: int | None = None  # SYNC_MASTER: ms to wait for a slave's ack; None = syncFlushTimeout
    trace_on: bool = True
    trace_topic_enable: bool = False
    flush_consumer_offset_interval: int = 5000
    rebalance_lock_max_live_time: int = 60_000  # project key (a -D property in RocketMQ): queue lock lifetime, ms
    # plain ACL (broker/acl): off by default
    acl_enable: bool = False
    acl_file: str | None = None  # None -> plain_acl.yml beside broker.conf (see load_broker_config)
    # how far a gRPC signature's x-mq-date-time may be from this broker's clock before it counts as expired
    acl_time_tolerance_seconds: int = 900
    access_key: str | None = None  # project keys: this broker's admin account, signs REGISTER_BROKER/UNREGISTER_BROKER
    secret_key: str | None = None  # ... to name servers that have ACL on
    # issue 27, HA link: connections the HA port accepts at once (past it: closed at accept, before TLS or the
    # handshake); authentication follows aclEnable (a SLAVE signs with accessKey/secretKey), TLS tlsMode=enforcing
    ha_max_connections: int = 32
    # issue 28, broker side of controller mode (broker/replicas, controller.md §3-§10): the controller names this
    # broker's id and role (no brokerId/brokerRole needed) and changes the role at run time; the store keeps an epoch
    # file; the master keeps a SyncStateSet and the ack rules of allAckInSyncStateSet / inSyncReplicas /
    # minInSyncReplicas. controllerAddr is `host:port;host:port`; brokerElectionPriority: lower wins.
    enable_controller_mode: bool = False
    controller_addr: str = ""
    broker_election_priority: int = 2**31 - 1
    controller_heart_beat_timeout_mills: int = 10_000
    sync_broker_metadata_period: int = 5000
    check_sync_state_set_period: int = 5000
    sync_controller_metadata_period: int = 10_000
    broker_heartbeat_interval: int = 1000
    all_ack_in_sync_state_set: bool = False
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    ha_max_time_slave_not_catchup: int = 15_000
    store_path_epoch_file: str | None = None  # None -> <storePathRootDir>/epochFileCheckpoint
    store_path_broker_identity: str | None = None  # None -> <storePathRootDir>/brokerIdentity
    async_learner: bool = False  # never joins the SyncStateSet, never elected
    read_un_committed: bool = False  # consumers also see messages past confirmOffset (not yet on every set member)
    # transactions
    transaction_time_out: int = 6000
    transaction_check_max: int = 15
    transaction_check_interval: int = 60_000
    reject_transaction_message: bool = False
    # issue 27, flood limits (broker/processors/send_limits.py): topics one client address may auto-create (a token
    # bucket: a burst, then so many a second; rate 0 = no limit), and properties per message a client may send
    auto_create_topic_rate_per_client: int = 10
    auto_create_topic_burst_per_client: int = 50
    max_message_properties_count: int = 256
    max_message_properties_bytes: int = 32767
    # issue 28, controller part: the embedded name server also hosts a controller (enableControllerInNamesrv), with
    # the controller's keys (broker/controller/config.py; controller.md §12)
    enable_controller_in_namesrv: bool = False
    controller_type: str = "local"
    controller_store_path: str = ""  # "" -> ~/<controllerType>Controller
    controller_etcd_endpoints: str = ""
    scan_not_active_broker_interval: int = 5000
    scan_inactive_master_interval: int = 5000
    elect_master_max_retry_count: int = 3
    enable_elect_unclean_master: bool = False
    notify_broker_role_changed: bool = True

    def __post_init__(self) -> None:
        self._normalize_and_check()

    # -- derived values ---------------------------------------------------------------------------
    @property
    def broker_addr(self) -> str:
        """``ip:port`` registered in routes and written into stored messages as store host."""
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker_ip2 or self.broker_ip1}:{self.ha_port}"

    @property
    def ha_port(self) -> int:
        """haListenPort, defaulting to listenPort + 1 like RocketMQ."""
        return self.ha_listen_port if self.ha_listen_port is not None else self.listen_port + 1

    @property
    def commit_log_dir(self) -> str:
        """storePathCommitLog, defaulting to <storePathRootDir>/commitlog."""
        return self.store_path_commit_log or os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def config_dir(self) -> str:
        """Where topics.json, consumerOffset.json, subscriptionGroup.json live."""
        return os.path.join(self.store_path_root_dir, "config")

    @property
    def namesrv_addr_list(self) -> list[str]:
        if not self.namesrv_addr:
            return []
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @property
    def controller_addrs(self) -> list[str]:
        return [a.strip() for a in self.controller_addr.split(";") if a.strip()]

    @property
    def epoch_file_path(self) -> str:
        return self.store_path_epoch_file or os.path.join(self.store_path_root_dir, "epochFileCheckpoint")

    @property
    def broker_identity_path(self) -> str:
        return self.store_path_broker_identity or os.path.join(self.store_path_root_dir, "brokerIdentity")

    @property
    def is_master(self) -> bool:
        return self.broker_role != "SLAVE"

    def delay_levels_ms(self) -> list[int]:
        """Delay per level in ms; index 0 is level 1."""
        return parse_delay_levels(self.message_delay_level)

    @classmethod
    def keys(cls) -> dict[str, str]:
        """RocketMQ property names accepted in broker.conf -> attribute names."""
        return dict(_KEY_TO_ATTR)

    def to_properties(self) -> dict[str, str]:
        """The effective configuration as RocketMQ property strings (for GET_BROKER_CONFIG style admin)."""
        out = {}
        for key, attr in _KEY_TO_ATTR.items():
            value = getattr(self, attr)
            if value is None or attr == "secret_key":  # never hand the secret out (GET_BROKER_CONFIG, -p)
                continue
            out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return out

    def to_store_config(self) -> Any:
        """Settings the message store needs, as ``broker.store.message_store.StoreConfig``."""
        try:  # imported lazily: config must load without the store
            from broker.store.message_store import StoreConfig
        except ImportError:
            from broker.store.types import StoreConfig

        values = {
            "root_dir": self.store_path_root_dir,
            "replica": self.broker_role == "SLAVE",
            "commit_log_dir": self.commit_log_dir,
            "mapped_file_size_commit_log": self.mapped_file_size_commit_log,
            "warm_mapped_file_enable": self.warm_maped_file_enable,
            "mapped_file_size_consume_queue": self.mapped_file_size_consume_queue,
            "flush_disk_type": self.flush_disk_type,
            "flush_interval_commit_log_ms": self.flush_interval_commit_log,
            "sync_flush_timeout_ms": self.sync_flush_timeout,
            "file_reserved_time_hours": self.file_reserved_time,
            "delete_when": self.delete_when,
            "disk_max_used_space_ratio": self.disk_max_used_space_ratio,
            "disk_space_clean_forcibly_ratio": self.disk_space_clean_forcibly_ratio,
            "disk_space_warning_level_ratio": self.disk_space_warning_level_ratio,
            "clean_resource_interval_ms": self.clean_resource_interval,
            "max_message_size": self.max_message_size,
            "max_transfer_bytes_on_message_in_memory": self.max_transfer_bytes_on_message_in_memory,
            "message_index_enable": self.message_index_enable,
            "max_hash_slot_num": self.max_hash_slot_num,
            "max_index_num": self.max_index_num,
            "message_delay_level": self.message_delay_level,
            "store_host": _pack_store_host(self.broker_ip1 or "127.0.0.1", self.listen_port),
        }
        accepted = {f.name for f in dataclasses.fields(StoreConfig)}
        dropped = sorted(set(values) - accepted)
        if dropped:
            log.debug("StoreConfig has no field(s) %s; not passed", ", ".join(dropped))
        return StoreConfig(**{k: v for k, v in values.items() if k in accepted})

    # -- validation -------------------------------------------------------------------------------
    def _normalize_and_check(self) -> None:
        """Fill derived defaults and reject values RocketMQ would refuse or misbehave with."""
        if self.broker_ip1 is None or str(self.broker_ip1).strip() == "":
            self.broker_ip1 = default_broker_ip()
        self.store_path_root_dir = _expand_path(self.store_path_root_dir)
        if self.store_path_commit_log:
            self.store_path_commit_log = _expand_path(self.store_path_commit_log)
        else:
            self.store_path_commit_log = None
        # RocketMQ rounds the consume-queue file size up to a whole number of 20-byte units.
        if self.mapped_file_size_consume_queue > 0:
            units = -(-self.mapped_file_size_consume_queue // CQ_UNIT_SIZE)
            self.mapped_file_size_consume_queue = units * CQ_UNIT_SIZE
        if self.flush_disk_type not in FLUSH_DISK_TYPES:
            raise ConfigError(
                f"expected one of {', '.join(FLUSH_DISK_TYPES)}, got {self.flush_disk_type!r}", "flushDiskType"
            )
        if self.broker_role not in BROKER_ROLES:
            raise ConfigError(f"expected one of {', '.join(BROKER_ROLES)}, got {self.broker_role!r}", "brokerRole")
        if self.enable_controller_mode:
            _check_controller_mode(self)  # issue 28: the controller decides role and id
        elif self.broker_role != "SLAVE":
            self.broker_id = 0  # masters always register as id 0, as RocketMQ does
        elif self.broker_id <= 0:
            raise ConfigError(f"a SLAVE needs brokerId > 0, got {self.broker_id}", "brokerId")
        for attr in ("listen_port", "namesrv_listen_port"):
            _check_port(self, attr, allow_zero=False)
        TlsSettings.from_config(self)  # checks the TLS values (files are read at start-up)
        if self.ha_listen_port is not None:
            _check_port(self, "ha_listen_port", allow_zero=False)
        _check_port(self, "metrics_port", allow_zero=True)
        if self.dashboard_port is not None:
            _check_port(self, "dashboard_port", allow_zero=True)
        if self.grpc_server_port is not None:
            _check_port(self, "grpc_server_port", allow_zero=True)
        self._check_dashboard_guards()
        for attr in (
            "mapped_file_size_commit_log",
            "mapped_file_size_consume_queue",
            "max_message_size",
            "max_transfer_bytes_on_message_in_memory",
            "frame_max_length",
            "default_topic_queue_nums",
            "max_hash_slot_num",
            "max_index_num",
            "flush_interval_commit_log",
            "sync_flush_timeout",
            "register_name_server_period",
            "channel_expired_timeout",
            "server_channel_max_idle_time_seconds",
            "server_max_connections",
            "server_max_buffered_frame_bytes",
            "server_frame_stall_timeout_seconds",
            "write_buffer_high_water_mark",
            "clean_resource_interval",
            "flush_consumer_offset_interval",
            "short_polling_time_mills",
            "max_pull_suspend_time_millis",
            "transaction_time_out",
            "transaction_check_interval",
            "transaction_check_max",
            "min_invisible_time_mills_for_recv",
            "grpc_client_consumer_min_long_polling_timeout_millis",
            "grpc_client_consumer_max_long_polling_timeout_millis",
            "timer_max_delay_sec",
            "default_invisible_time_mills",
            "renew_ahead_time_millis",
            "renew_max_time_millis",
            "acl_time_tolerance_seconds",
        ):
            if getattr(self, attr) <= 0:
                raise ConfigError(f"must be greater than 0, got {getattr(self, attr)}", _ATTR_TO_KEY[attr])
        if self.grpc_client_consumer_min_long_polling_timeout_millis > \
                self.grpc_client_consumer_max_long_polling_timeout_millis:
            raise ConfigError(f"must not exceed grpcClientConsumerMaxLongPollingTimeoutMillis "
                              f"({self.grpc_client_consumer_max_long_polling_timeout_millis}), got "
                              f"{self.grpc_client_consumer_min_long_polling_timeout_millis}",
                              "grpcClientConsumerMinLongPollingTimeoutMillis")
        if self.renew_ahead_time_millis >= self.default_invisible_time_mills:
            raise ConfigError(f"must be less than defaultInvisibleTimeMills ({self.default_invisible_time_mills}), got "
                              f"{self.renew_ahead_time_millis}", "renewAheadTimeMillis")
        if not 0 <= self.write_buffer_low_water_mark <= self.write_buffer_high_water_mark:
            raise ConfigError(f"expected 0 (a quarter of writeBufferHighWaterMark) up to writeBufferHighWaterMark "
                              f"({self.write_buffer_high_water_mark}), got {self.write_buffer_low_water_mark}",
                              "writeBufferLowWaterMark")
        if self.file_descriptor_reserve < 0:  # issue 27: the descriptor reserve
            raise ConfigError(f"must be >= 0 (0: no reserve), got {self.file_descriptor_reserve}",
                              "fileDescriptorReserve")
        if self.file_reserved_time < 0:
            raise ConfigError(f"must be >= 0, got {self.file_reserved_time}", "fileReservedTime")
        if not 10 <= self.disk_max_used_space_ratio <= 95:
            # RocketMQ clamps to [10, 95]; silently clamping hides typos like 750, so refuse.
            raise ConfigError(
                f"expected a percentage between 10 and 95, got {self.disk_max_used_space_ratio}",
                "diskMaxUsedSpaceRatio",
            )
        for attr in ("disk_space_clean_forcibly_ratio", "disk_space_warning_level_ratio"):
            if not 1 <= getattr(self, attr) <= 100:
                raise ConfigError(f"expected a percentage between 1 and 100, got {getattr(self, attr)}",
                                  _ATTR_TO_KEY[attr])
        if not 0 <= self.broker_permission <= 15:
            raise ConfigError(f"expected permission bits 0..15, got {self.broker_permission}", "brokerPermission")
        for hour in self.delete_when.split(";"):
            if not hour.strip().isdigit() or not 0 <= int(hour) <= 23:
                raise ConfigError(
                    f"expected hours of day 00..23 separated by ';', got {self.delete_when!r}", "deleteWhen"
                )
        try:
            parse_delay_levels(self.message_delay_level)
        except ValueError as exc:
            raise ConfigError(str(exc), "messageDelayLevel") from None
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("accessKey and secretKey go together: set both or neither",
                              "secretKey" if self.access_key else "accessKey")
        _check_flood_limits(self)
        _check_ha_link(self)
        if self.enable_controller_in_namesrv:  # issue 28, controller part
            from broker.controller.config import ControllerConfig

            if not self.enable_embedded_namesrv:
                raise ConfigError("the controller runs in the embedded name server: set enableEmbeddedNamesrv=true",
                                  "enableControllerInNamesrv")
            ControllerConfig.from_object(self)
        if self.message_delay_level != " ".join(self.message_delay_level.split()):
            self.message_delay_level = " ".join(self.message_delay_level.split())

    def _check_dashboard_guards(self) -> None:
        """The web console's Host list and sign-in limits (issue 27, console part)."""
        for entry in self.dashboard_allowed_hosts.split(","):
            entry = entry.strip()
            if entry and not _HOST_ENTRY.fullmatch(entry) and not _is_ipv6(entry):
                raise ConfigError(f"expected host names separated by commas (name, name:port, [v6]:port or *), "
                                  f"got {entry!r}", "dashboardAllowedHosts")
        for attr in ("dashboard_sign_in_delay_after", "dashboard_sign_in_lock_after",
                     "dashboard_sign_in_account_delay_after", "dashboard_sign_in_account_lock_after",
                     "dashboard_sign_in_max_delay_seconds", "dashboard_sign_in_lock_seconds"):
            if getattr(self, attr) <= 0:
                raise ConfigError(f"must be greater than 0, got {getattr(self, attr)}", _ATTR_TO_KEY[attr])
        for delay, lock in (("dashboard_sign_in_delay_after", "dashboard_sign_in_lock_after"),
                            ("dashboard_sign_in_account_delay_after", "dashboard_sign_in_account_lock_after")):
            if getattr(self, delay) > getattr(self, lock):
                raise ConfigError(f"must not exceed {_ATTR_TO_KEY[lock]} ({getattr(self, lock)}), got "
                                  f"{getattr(self, delay)}", _ATTR_TO_KEY[delay])



_HOST_ENTRY = re.compile(r"\*|\[[0-9A-Fa-f:.]+\](:\d{1,5})?|[A-Za-z0-9_.-]+(:\d{1,5})?")


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _check_flood_limits(cfg: BrokerConfig) -> None:
    """Issue 27's flood-limit keys (see broker/processors/send_limits.py)."""
    if cfg.auto_create_topic_rate_per_client < 0:
        raise ConfigError(f"expected topics a second (0 = no limit), got {cfg.auto_create_topic_rate_per_client}",
                          "autoCreateTopicRatePerClient")
    if cfg.auto_create_topic_burst_per_client < 1:
        raise ConfigError(f"must be at least 1, got {cfg.auto_create_topic_burst_per_client}",
                          "autoCreateTopicBurstPerClient")
    if not 16 <= cfg.max_message_properties_count <= 32767:
        raise ConfigError(f"expected 16..32767 (clients and the broker add up to a dozen properties of their own), got "
                          f"{cfg.max_message_properties_count}", "maxMessagePropertiesCount")
    if not 1024 <= cfg.max_message_properties_bytes <= 32767:
        raise ConfigError(f"expected 1024..32767 (a record holds at most 32767 bytes of properties), got "
                          f"{cfg.max_message_properties_bytes}", "maxMessagePropertiesBytes")

def _check_ha_link(cfg: BrokerConfig) -> None:
    """Issue 27, HA link: a sane connection cap; a SLAVE under aclEnable must be able to prove an account."""
    if not 1 <= cfg.ha_max_connections <= 65535:
        raise ConfigError(f"expected 1..65535, got {cfg.ha_max_connections}", "haMaxConnections")
    if cfg.acl_enable and not cfg.is_master and not cfg.access_key:
        raise ConfigError("a SLAVE with aclEnable=true must prove an admin account of the ACL file to its "
                          "master's HA port: set accessKey and secretKey", "accessKey")

def _check_controller_mode(cfg: BrokerConfig) -> None:
    """Issue 28 (broker side of controller mode): a broker starts fenced, as a SLAVE with no id, until the
    controller names its role; the controller addresses and periods must be usable."""
    addrs = [a.strip() for a in cfg.controller_addr.split(";") if a.strip()]
    if not addrs:
        raise ConfigError("enableControllerMode=true needs the controllers' addresses (host:port;host:port)",
                          "controllerAddr")
    for addr in addrs:
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ConfigError(f"expected host:port entries separated by ';', got {addr!r}", "controllerAddr")
    for attr in ("controller_heart_beat_timeout_mills", "sync_broker_metadata_period", "check_sync_state_set_period",
                 "sync_controller_metadata_period", "broker_heartbeat_interval", "ha_max_time_slave_not_catchup",
                 "in_sync_replicas", "min_in_sync_replicas"):
        if getattr(cfg, attr) <= 0:
            raise ConfigError(f"must be greater than 0, got {getattr(cfg, attr)}", _ATTR_TO_KEY[attr])
    if cfg.broker_heartbeat_interval >= cfg.controller_heart_beat_timeout_mills:
        raise ConfigError(f"must be less than controllerHeartBeatTimeoutMills ({cfg.controller_heart_beat_timeout_mills}"
                          f"), got {cfg.broker_heartbeat_interval}", "brokerHeartbeatInterval")
    cfg.broker_role = "SLAVE"  # fenced until registered: the store refuses writes
    cfg.broker_id = -1
    for attr in ("store_path_epoch_file", "store_path_broker_identity"):
        if getattr(cfg, attr):
            setattr(cfg, attr, _expand_path(getattr(cfg, attr)))


def _check_port(cfg: BrokerConfig, attr: str, *, allow_zero: bool) -> None:
    value = getattr(cfg, attr)
    low = 0 if allow_zero else 1
    if not low <= value <= 65535:
        raise ConfigError(f"expected a TCP port {low}..65535, got {value}", _ATTR_TO_KEY[attr])


def _expand_path(path: str) -> str:
    """``~``, ``${user.home}``, ``${user.dir}`` and ``${ENV}`` expanded; relative paths are made absolute
    against the current working directory (where the broker was started)."""
    path = path.replace("${user.home}", os.path.expanduser("~")).replace("${user.dir}", os.getcwd())
    path = os.path.expandvars(os.path.expanduser(path))
    return os.path.abspath(path)


def _pack_store_host(ip: str, port: int) -> bytes:
    try:
        from protocol.ids import pack_host
    except ImportError:  # protocol.ids not available yet: same 8/20-byte layout
        pack_host = None
    if pack_host is not None:
        return pack_host(ip, port)
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    return socket.inet_pton(family, ip) + port.to_bytes(4, "big")


# -- key tables -------------------------------------------------------------------------------------
_SPECIAL_KEYS = {
    "broker_ip1": "brokerIP1",
    "broker_ip2": "brokerIP2",
    "enabled_append_prop_crc": "enabledAppendPropCRC",
}


def _attr_to_key(attr: str) -> str:
    if attr in _SPECIAL_KEYS:
        return _SPECIAL_KEYS[attr]
    head, *rest = attr.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


_FIELD_TYPES: dict[str, type] = {}
_ATTR_TO_KEY: dict[str, str] = {}
_KEY_TO_ATTR: dict[str, str] = {}
for _f in dataclasses.fields(BrokerConfig):
    _type = _f.type if isinstance(_f.type, str) else _f.type.__name__
    _FIELD_TYPES[_f.name] = {"int": int, "bool": bool, "str": str}.get(_type.split(" |")[0], str)
    _ATTR_TO_KEY[_f.name] = _attr_to_key(_f.name)
    _KEY_TO_ATTR[_attr_to_key(_f.name)] = _f.name
    assert key_to_attr(_attr_to_key(_f.name)) == _f.name, _f.name
_OPTIONAL_ATTRS = {f.name for f in dataclasses.fields(BrokerConfig) if "None" in str(f.type)}


def _convert(attr: str, raw: Any) -> Any:
    """A property value (string, or an already-typed override) -> the attribute's type."""
    kind = _FIELD_TYPES[attr]
    if raw is None:
        if attr in _OPTIONAL_ATTRS:
            return None
        raise ConfigError("a value is required", _ATTR_TO_KEY[attr])
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        raise ConfigError(f"expected true or false, got {str(raw)!r}", _ATTR_TO_KEY[attr])
    if kind is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        text = str(raw).strip()
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        raise ConfigError(f"expected an integer, got {str(raw)!r}", _ATTR_TO_KEY[attr])
    text = str(raw)
    if attr in _OPTIONAL_ATTRS and text.strip() == "":
        return None
    return text


# -- .properties parsing ----------------------------------------------------------------------------
_WHITESPACE = " \t\f"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str, source: str = "broker.conf") -> list[tuple[int, str, str]]:
    """Parse Java ``.properties`` text into ``(line_number, key, value)`` in file order.

    Follows java.util.Properties.load: ``#``/``!`` comments, ``=``/``:``/whitespace separators,
    backslash line continuation (leading whitespace of the next line dropped), ``\\t \\n \\r \\f \\uXXXX``
    escapes. Unlike Java, unescaped trailing whitespace of a value is trimmed (a stray space after
    ``listenPort=10911 `` is a classic outage).
    """
    entries: list[tuple[int, str, str]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        start_line = index + 1
        line = lines[index].lstrip(_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue
        logical = line
        while _ends_with_continuation(logical) and index < len(lines):
            logical = logical[:-1] + lines[index].lstrip(_WHITESPACE)
            index += 1
        if _ends_with_continuation(logical):  # continuation at end of file: Java drops the backslash
            logical = logical[:-1]
        raw_key, raw_value = _split_key_value(logical)
        try:
            key = _unescape(raw_key)
            value = _unescape(_rstrip_unescaped(raw_value))
        except ValueError as exc:
            raise ConfigError(f"{source} line {start_line}: {exc}") from None
        entries.append((start_line, key, value))
    return entries


def _ends_with_continuation(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    pos = 0
    length = len(line)
    while pos < length:
        char = line[pos]
        if char == "\\":
            pos += 2
            continue
        if char in "=:" or char in _WHITESPACE:
            break
        pos += 1
    key = line[:pos]
    rest = line[pos:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def _rstrip_unescaped(value: str) -> str:
    end = len(value)
    while end > 0 and value[end - 1] in _WHITESPACE:
        backslashes = 0
        probe = end - 2
        while probe >= 0 and value[probe] == "\\":
            backslashes += 1
            probe -= 1
        if backslashes % 2 == 1:  # the whitespace is escaped: keep it
            break
        end -= 1
    return value[:end]


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out = []
    pos = 0
    length = len(text)
    while pos < length:
        char = text[pos]
        if char != "\\":
            out.append(char)
            pos += 1
            continue
        if pos + 1 >= length:
            pos += 1
            continue
        nxt = text[pos + 1]
        if nxt == "u":
            digits = text[pos + 2 : pos + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"malformed \\uXXXX escape {text[pos:pos + 6]!r}")
            out.append(chr(int(digits, 16)))
            pos += 6
            continue
        out.append(_SIMPLE_ESCAPES.get(nxt, nxt))
        pos += 2
    return "".join(out)


def load_broker_config(path: str | os.PathLike | None, overrides: Mapping[str, Any] | None = None) -> BrokerConfig:
    """Read broker.conf (Java properties) and apply ``overrides`` (RocketMQ key or attribute name -> value).

    Unknown keys are logged as warnings and ignored; malformed values raise ``ConfigError`` naming the
    file line and the key. ``path=None`` starts from defaults.
    """
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    source = "broker.conf"
    if path is not None:
        source = os.path.basename(os.fspath(path))
        try:
            with open(path, "r", encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise ConfigError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from None
        for line_no, key, value in parse_properties(text, source):
            attr = _KEY_TO_ATTR.get(key)
            if attr is None and key in _FIELD_TYPES:  # snake_case spelling accepted too
                attr = key
            if attr is None:
                log.warning("%s line %d: unknown key %r ignored", source, line_no, key)
                continue
            where = f"{source} line {line_no}"
            values[attr] = _convert_at(attr, value, where)
            origin[attr] = where
    for key, value in (overrides or {}).items():
        attr = _KEY_TO_ATTR.get(key) or (key if key in _FIELD_TYPES else None)
        if attr is None:
            raise ConfigError(f"override: unknown key {key!r}", key)
        values[attr] = _convert_at(attr, value, "override")
        origin[attr] = "override"
    if "acl_file" in values and values["acl_file"] and path is not None:  # relative to broker.conf's folder
        values["acl_file"] = os.path.join(os.path.dirname(os.path.abspath(path)), os.path.expanduser(values["acl_file"]))
    elif path is not None and values.get("acl_enable"):
        values.setdefault("acl_file", os.path.join(os.path.dirname(os.path.abspath(path)), "plain_acl.yml"))
    try:
        return BrokerConfig(**values)
    except ConfigError as exc:
        attr = _KEY_TO_ATTR.get(exc.key or "", "")
        where = origin.get(attr, source)
        raise ConfigError(f"{where}: key '{exc.key}': {exc.detail}", exc.key) from None


def _convert_at(attr: str, value: Any, where: str) -> Any:
    try:
        return _convert(attr, value)
    except ConfigError as exc:
        raise ConfigError(f"{where}: key '{exc.key}': {exc.detail}", exc.key) from None
