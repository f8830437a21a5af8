"""Bodies a consumer answers the broker with when an admin asks about it (the reference client's formats).

GET_CONSUMER_RUNNING_INFO (307) -> ConsumerRunningInfo: the consumer's properties, subscriptions, one ProcessQueueInfo
per assigned queue (``mqTable``, a map keyed by MessageQueue objects written the fastjson way, see
protocol.admin_bodies) and per-topic ConsumeStatus (``statusTable``).
CONSUME_MESSAGE_DIRECTLY (309) -> ConsumeMessageDirectlyResult: what the listener did with one message (CMResult).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from protocol.admin_bodies import _as_obj, _parse_queue_table, _queue_key
from protocol.bodies import MessageQueue
from protocol.json_body import as_int, as_str
from protocol.jsonlenient import dumps_compact

__all__ = ["CMResult", "ConsumeMessageDirectlyResult", "ProcessQueueInfo", "ConsumeStatus", "ConsumerRunningInfo"]

# Keys of ConsumerRunningInfo.properties the reference tools read.
PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"


class CMResult(enum.Enum):
    """Outcome of a direct consumption (the reference's CMResult)."""

    CR_SUCCESS = "CR_SUCCESS"
    CR_LATER = "CR_LATER"
    CR_ROLLBACK = "CR_ROLLBACK"
    CR_COMMIT = "CR_COMMIT"
    CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"
    CR_RETURN_NULL = "CR_RETURN_NULL"


def _bool(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


@dataclass(slots=True)
class ConsumeMessageDirectlyResult:
    order: bool = False
    auto_commit: bool = True
    consume_result: CMResult | None = None
    remark: str | None = None
    spent_time_mills: int = 0

    def encode(self) -> bytes:
        return dumps_compact({"order": self.order, "autoCommit": self.auto_commit,
                              "consumeResult": self.consume_result.value if self.consume_result else None,
                              "remark": self.remark, "spentTimeMills": self.spent_time_mills})

    @classmethod
    def decode(cls, data: Any) -> "ConsumeMessageDirectlyResult":
        d = _as_obj(data)
        try:
            result = CMResult(d.get("consumeResult")) if d.get("consumeResult") else None
        except ValueError:
            result = None
        return cls(_bool(d.get("order")), _bool(d.get("autoCommit", True)), result, as_str(d.get("remark")),
                   as_int(d.get("spentTimeMills")))


@dataclass(slots=True)
class ProcessQueueInfo:
    """One assigned queue as the consumer sees it (the reference's ProcessQueueInfo fields)."""

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = 0
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    droped: bool = False
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0

    _KEYS = (("commit_offset", "commitOffset"), ("cached_msg_min_offset", "cachedMsgMinOffset"),
             ("cached_msg_max_offset", "cachedMsgMaxOffset"), ("cached_msg_count", "cachedMsgCount"),
             ("cached_msg_size_in_mib", "cachedMsgSizeInMiB"), ("transaction_msg_min_offset", "transactionMsgMinOffset"),
             ("transaction_msg_max_offset", "transactionMsgMaxOffset"), ("transaction_msg_count", "transactionMsgCount"),
             ("try_unlock_times", "tryUnlockTimes"), ("last_lock_timestamp", "lastLockTimestamp"),
             ("last_pull_timestamp", "lastPullTimestamp"), ("last_consume_timestamp", "lastConsumeTimestamp"))

    def to_json(self) -> dict:
        out: dict[str, Any] = {java: getattr(self, attr) for attr, java in self._KEYS}
        out["locked"] = self.locked
        out["droped"] = self.droped
        return out

    @classmethod
    def from_json(cls, obj: Any) -> "ProcessQueueInfo":
        d = _as_obj(obj)
        info = cls(**{attr: as_int(d.get(java)) for attr, java in cls._KEYS})
        info.locked = _bool(d.get("locked"))
        info.droped = _bool(d.get("droped"))
        return info


@dataclass(slots=True)
class ConsumeStatus:
    pull_rt: float = 0.0
    pull_tps: float = 0.0
    consume_rt: float = 0.0
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    consume_failed_msgs: int = 0

    def to_json(self) -> dict:
        return {"pullRT": self.pull_rt, "pullTPS": self.pull_tps, "consumeRT": self.consume_rt,
                "consumeOKTPS": self.consume_ok_tps, "consumeFailedTPS": self.consume_failed_tps,
                "consumeFailedMsgs": self.consume_failed_msgs}

    @classmethod
    def from_json(cls, obj: Any) -> "ConsumeStatus":
        d = _as_obj(obj)
        return cls(_float(d.get("pullRT")), _float(d.get("pullTPS")), _float(d.get("consumeRT")),
                   _float(d.get("consumeOKTPS")), _float(d.get("consumeFailedTPS")), as_int(d.get("consumeFailedMsgs")))


@dataclass(slots=True)
class ConsumerRunningInfo:
    properties: dict[str, str] = field(default_factory=dict)
    subscription_set: list[dict] = field(default_factory=list)  # SubscriptionData JSON objects
    mq_table: dict[MessageQueue, ProcessQueueInfo] = field(default_factory=dict)
    status_table: dict[str, ConsumeStatus] = field(default_factory=dict)
    jstack: str | None = None

    def encode(self) -> bytes:
        """fastjson shape: mqTable keyed by MessageQueue objects (what the reference's tools parse)."""
        mq_entries = ",".join(f"{_queue_key(mq)}:{dumps_compact(info.to_json()).decode('utf-8')}"
                              for mq, info in sorted(self.mq_table.items()))
        parts = [
            '"jstack":' + dumps_compact(self.jstack).decode("utf-8"),
            '"mqTable":{' + mq_entries + "}",
            '"properties":' + dumps_compact({k: str(v) for k, v in sorted(self.properties.items())}).decode("utf-8"),
            '"statusTable":' + dumps_compact({t: s.to_json() for t, s in sorted(self.status_table.items())}
                                             ).decode("utf-8"),
            '"subscriptionSet":' + dumps_compact(self.subscription_set).decode("utf-8"),
        ]
        return ("{" + ",".join(parts) + "}").encode("utf-8")

    @classmethod
    def decode(cls, data: Any) -> "ConsumerRunningInfo":
        d = _as_obj(data)
        props = d.get("properties") if isinstance(d.get("properties"), dict) else {}
        subs = d.get("subscriptionSet") if isinstance(d.get("subscriptionSet"), list) else []
        status_raw = d.get("statusTable") if isinstance(d.get("statusTable"), dict) else {}
        return cls({str(k): str(v) for k, v in props.items()}, [s for s in subs if isinstance(s, dict)],
                   _parse_queue_table(d.get("mqTable"), ProcessQueueInfo),
                   {str(t): ConsumeStatus.from_json(s) for t, s in status_raw.items() if isinstance(s, dict)},
                   as_str(d.get("jstack")))
