"""Validation of a ``BrokerConfig``: derived defaults filled in, each key's own check from the table, then the
few rules that tie keys together, written out here. Every error is a ``ConfigError`` naming one key."""

from __future__ import annotations

from typing import Any

from broker.errors import ConfigError
from broker.tls import TlsSettings

from .defaults import default_broker_ip, expand_path
from .keys_store import CQ_UNIT_SIZE
from .table import BY_ATTR, TABLE

__all__ = ["normalize_and_check", "check_table"]


def normalize_and_check(cfg: Any) -> None:
    """Fill derived defaults and reject values RocketMQ would refuse or misbehave with (``__post_init__``)."""
    _normalize(cfg)
    check_table(cfg)
    _check_role_and_id(cfg)
    TlsSettings.from_config(cfg)  # checks the TLS values (files are read at start-up)
    _check_cross_keys(cfg)
    if cfg.enable_controller_in_namesrv:  # issue 28, controller part
        from broker.controller.config import ControllerConfig

        if not cfg.enable_embedded_namesrv:
            raise ConfigError("the controller runs in the embedded name server: set enableEmbeddedNamesrv=true",
                              "enableControllerInNamesrv")
        ControllerConfig.from_object(cfg)
    if cfg.message_delay_level != " ".join(cfg.message_delay_level.split()):
        cfg.message_delay_level = " ".join(cfg.message_delay_level.split())


def check_table(cfg: Any, when: str | None = None) -> None:
    """Each set key's own check from the table: those without a condition (``when=None``), or those that apply
    when the bool key ``when`` is on."""
    for entry in TABLE:
        if entry.check is None or entry.when != when:
            continue
        value = getattr(cfg, entry.attr)
        if value is None:
            continue
        detail = entry.check(value)
        if detail is not None:
            raise ConfigError(detail, entry.name)


def _normalize(cfg: Any) -> None:
    if cfg.broker_ip1 is None or str(cfg.broker_ip1).strip() == "":
        cfg.broker_ip1 = default_broker_ip()
    cfg.store_path_root_dir = expand_path(cfg.store_path_root_dir)
    cfg.store_path_commit_log = expand_path(cfg.store_path_commit_log) if cfg.store_path_commit_log else None
    # RocketMQ rounds the consume-queue file size up to a whole number of 20-byte units.
    if cfg.mapped_file_size_consume_queue > 0:
        units = -(-cfg.mapped_file_size_consume_queue // CQ_UNIT_SIZE)
        cfg.mapped_file_size_consume_queue = units * CQ_UNIT_SIZE


def _check_role_and_id(cfg: Any) -> None:
    """Masters always register as id 0 (as RocketMQ does), a SLAVE needs its own id; in controller mode the
    controller decides both."""
    if cfg.enable_controller_mode:
        _check_controller_mode(cfg)
    elif cfg.broker_role != "SLAVE":
        cfg.broker_id = 0
    elif cfg.broker_id <= 0:
        raise ConfigError(f"a SLAVE needs brokerId > 0, got {cfg.broker_id}", "brokerId")


def _check_controller_mode(cfg: Any) -> None:
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
    check_table(cfg, when="enable_controller_mode")
    if cfg.broker_heartbeat_interval >= cfg.controller_heart_beat_timeout_mills:
        raise ConfigError(f"must be less than controllerHeartBeatTimeoutMills ({cfg.controller_heart_beat_timeout_mills}"
                          f"), got {cfg.broker_heartbeat_interval}", "brokerHeartbeatInterval")
    cfg.broker_role = "SLAVE"  # fenced until registered: the store refuses writes
    cfg.broker_id = -1
    for attr in ("store_path_epoch_file", "store_path_broker_identity"):
        if getattr(cfg, attr):
            setattr(cfg, attr, expand_path(getattr(cfg, attr)))


def _check_cross_keys(cfg: Any) -> None:
    """Rules between keys (each key's own range is in the table)."""
    for delay, lock in (("dashboard_sign_in_delay_after", "dashboard_sign_in_lock_after"),
                        ("dashboard_sign_in_account_delay_after", "dashboard_sign_in_account_lock_after")):
        if getattr(cfg, delay) > getattr(cfg, lock):
            raise ConfigError(f"must not exceed {BY_ATTR[lock].name} ({getattr(cfg, lock)}), got "
                              f"{getattr(cfg, delay)}", BY_ATTR[delay].name)
    if cfg.grpc_client_consumer_min_long_polling_timeout_millis > cfg.grpc_client_consumer_max_long_polling_timeout_millis:
        raise ConfigError(f"must not exceed grpcClientConsumerMaxLongPollingTimeoutMillis "
                          f"({cfg.grpc_client_consumer_max_long_polling_timeout_millis}), got "
                          f"{cfg.grpc_client_consumer_min_long_polling_timeout_millis}",
                          "grpcClientConsumerMinLongPollingTimeoutMillis")
    if cfg.renew_ahead_time_millis >= cfg.default_invisible_time_mills:
        raise ConfigError(f"must be less than defaultInvisibleTimeMills ({cfg.default_invisible_time_mills}), got "
                          f"{cfg.renew_ahead_time_millis}", "renewAheadTimeMillis")
    if not 0 <= cfg.write_buffer_low_water_mark <= cfg.write_buffer_high_water_mark:
        raise ConfigError(f"expected 0 (a quarter of writeBufferHighWaterMark) up to writeBufferHighWaterMark "
                          f"({cfg.write_buffer_high_water_mark}), got {cfg.write_buffer_low_water_mark}",
                          "writeBufferLowWaterMark")
    if bool(cfg.access_key) != bool(cfg.secret_key):
        raise ConfigError("accessKey and secretKey go together: set both or neither",
                          "secretKey" if cfg.access_key else "accessKey")
    # issue 27, HA link: a SLAVE under aclEnable must be able to prove an account
    if cfg.acl_enable and cfg.broker_role == "SLAVE" and not cfg.access_key:
        raise ConfigError("a SLAVE with aclEnable=true must prove an admin account of the ACL file to its "
                          "master's HA port: set accessKey and secretKey", "accessKey")
