"""Message-store keys. Each one either names the ``broker.store.types.StoreConfig`` field it feeds (``store=``;
``BrokerConfig.to_store_config`` is built from these) or says why the store does not take it (``not_for_store=``),
so a store key cannot be added without deciding where it goes."""

from __future__ import annotations

import functools

from broker.store.delay_levels import parse_delay_levels

from .entry import OneOf, Positive, Range, Rule, key

__all__ = ["KEYS", "CQ_UNIT_SIZE", "DEFAULT_MESSAGE_DELAY_LEVEL", "FLUSH_DISK_TYPES"]

DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
CQ_UNIT_SIZE = 20
FLUSH_DISK_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")

_k = functools.partial(key, concern="store")


def _delete_when(value: str) -> str | None:
    for hour in value.split(";"):
        if not hour.strip().isdigit() or not 0 <= int(hour) <= 23:
            return f"expected hours of day 00..23 separated by ';', got {value!r}"
    return None


def _delay_levels(value: str) -> str | None:
    try:
        parse_delay_levels(value)
    except ValueError as exc:
        return str(exc)
    return None


_PERCENT = Range(1, 100, "expected a percentage between 1 and 100, got {}")

KEYS = (
    _k("storePathRootDir", str, "~/store", store="root_dir", doc="~, ${user.home}, ${ENV} expanded; made absolute"),
    _k("storePathCommitLog", str, optional=True,
       not_for_store="reaches the store as commit_log_dir through BrokerConfig.commit_log_dir (its default filled)"),
    _k("mappedFileSizeCommitLog", int, 1024 * 1024 * 1024, Positive(), store="mapped_file_size_commit_log"),
    _k("warmMapedFileEnable", bool, False, store="warm_mapped_file_enable",
       doc="RocketMQ's spelling: allocate whole commit-log files up front"),
    _k("mappedFileSizeConsumeQueue", int, 300_000 * CQ_UNIT_SIZE, Positive(), store="mapped_file_size_consume_queue",
       doc="rounded up to whole 20-byte units, as RocketMQ does"),
    _k("flushDiskType", str, "ASYNC_FLUSH", OneOf(FLUSH_DISK_TYPES), store="flush_disk_type"),
    _k("flushIntervalCommitLog", int, 500, Positive(), store="flush_interval_commit_log_ms"),
    _k("syncFlushTimeout", int, 5000, Positive(), store="sync_flush_timeout_ms"),
    _k("deleteWhen", str, "04", Rule(_delete_when), store="delete_when"),
    _k("fileReservedTime", int, 72, Range(0, None, "must be >= 0, got {}"), store="file_reserved_time_hours"),
    # RocketMQ clamps to [10, 95]; silently clamping hides typos like 750, so refuse.
    _k("diskMaxUsedSpaceRatio", int, 75, Range(10, 95, "expected a percentage between 10 and 95, got {}"),
       store="disk_max_used_space_ratio"),
    _k("diskSpaceCleanForciblyRatio", int, 85, _PERCENT, store="disk_space_clean_forcibly_ratio",
       doc="project key (a -D property in RocketMQ)"),
    _k("diskSpaceWarningLevelRatio", int, 90, _PERCENT, store="disk_space_warning_level_ratio",
       doc="project key: refuse sends above this usage"),
    _k("cleanResourceInterval", int, 10_000, Positive(), store="clean_resource_interval_ms",
       doc="ms between retention runs"),
    _k("maxMessageSize", int, 4 * 1024 * 1024, Positive(), store="max_message_size"),
    _k("maxTransferBytesOnMessageInMemory", int, 256 * 1024, Positive(),
       store="max_transfer_bytes_on_message_in_memory",
       doc="bytes of records one pull answer may carry (RocketMQ's MessageStoreConfig key; the first record always goes)"),
    _k("messageIndexEnable", bool, True, store="message_index_enable"),
    _k("maxHashSlotNum", int, 5_000_000, Positive(), store="max_hash_slot_num"),
    _k("maxIndexNum", int, 20_000_000, Positive(), store="max_index_num"),
    _k("messageDelayLevel", str, DEFAULT_MESSAGE_DELAY_LEVEL, Rule(_delay_levels), store="message_delay_level"),
    _k("accessMessageInMemoryMaxRatio", int, 40, not_for_store="read by the pull path (cold-data hint), not the store",
       doc="% of RAM behind the log end that counts as cold data"),
    _k("enabledAppendPropCRC", bool, False, not_for_store="accepted for broker.conf compatibility; not used here"),
    _k("autoMessageVersionOnTopicLen", bool, True, not_for_store="accepted for broker.conf compatibility; not used "
                                                                 "here"),
    _k("storeType", str, "default", not_for_store="accepted for broker.conf compatibility; not used here"),
)
