"""JSON bodies of remoting commands (heartbeat, routes, lock requests, topic configs, ...).

Every class has
* `from_json(obj)` — liberal: accepts a parsed JSON object or raw bytes/str, enums as names or ints,
  numbers as strings or ints, missing keys -> defaults, null/absent lists -> empty, unknown keys ignored;
* `to_json()` — a plain JSON-ready Python object (dicts with string keys, Java field names,
  enums written as names);
* `encode()` -> compact UTF-8 JSON bytes and `decode(data)` -> instance (via jsonlenient).
Enum-typed fields are stored as their NAMES.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, TypeVar

from protocol.jsonlenient import dumps_compact, loads_lenient

__all__ = [
    "CONSUME_TYPES",
    "MESSAGE_MODELS",
    "CONSUME_FROM_WHERE",
    "Body",
    "SubscriptionData",
    "ConsumerData",
    "ProducerData",
    "HeartbeatData",
    "QueueData",
    "BrokerData",
    "TopicRouteData",
    "ConsumerListBody",
    "MessageQueue",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "UnlockBatchRequestBody",
    "CheckClientRequestBody",
    "TopicConfig",
    "DataVersion",
    "TopicConfigSerializeWrapper",
    "RegisterBrokerBody",
    "ClusterInfo",
    "TopicList",
    "SubscriptionGroupConfig",
]

CONSUME_TYPES = {0: "CONSUME_ACTIVELY", 1: "CONSUME_PASSIVELY", 2: "CONSUME_POP"}
MESSAGE_MODELS = {0: "BROADCASTING", 1: "CLUSTERING"}
CONSUME_FROM_WHERE = {
    0: "CONSUME_FROM_LAST_OFFSET",
    1: "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    2: "CONSUME_FROM_MIN_OFFSET",
    3: "CONSUME_FROM_MAX_OFFSET",
    4: "CONSUME_FROM_FIRST_OFFSET",
    5: "CONSUME_FROM_TIMESTAMP",
}

# ---------------------------------------------------------------------------------------------
# liberal value helpers


def _int(value: Any, default: int = 0) -> int:
    if value is None or value == "":
        return default
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return int(value) if value == value and abs(value) != float("inf") else default
    try:
        return int(str(value).strip())
    except ValueError:
        try:
            return int(float(str(value).strip()))
        except (ValueError, OverflowError):
            return default


def _bool(value: Any, default: bool = False) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    return str(value).strip().lower() == "true"


def _str(value: Any, default: str | None = "") -> str | None:
    if value is None:
        return default
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _enum_name(value: Any, table: Mapping[int, str], default: str) -> str:
    """Enum given as NAME or ordinal (int or digit string) -> NAME."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return table.get(int(value), default)
    if isinstance(value, float):
        return table.get(int(value), default) if value.is_integer() else default
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return table.get(int(text), default)
    return text.upper()


def _list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    if isinstance(value, dict):
        return list(value.values())
    return [value]


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _obj(obj: Any) -> dict:
    """Accept an already-parsed object or raw JSON bytes/str; a body must be a JSON object."""
    if isinstance(obj, (bytes, bytearray, memoryview, str)):
        obj = loads_lenient(obj)
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


T = TypeVar("T", bound="Body")


class Body:
    """Shared encode/decode on top of each class's from_json/to_json."""

    __slots__ = ()

    @classmethod
    def from_json(cls: type[T], obj: Any) -> T:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_json(self) -> dict:  # pragma: no cover - overridden
        raise NotImplementedError

    def encode(self) -> bytes:
        return dumps_compact(self.to_json())

    @classmethod
    def decode(cls: type[T], data: bytes | bytearray | memoryview | str) -> T:
        """Parse a body; ValueError on invalid JSON or a non-object."""
        return cls.from_json(loads_lenient(data))


# ---------------------------------------------------------------------------------------------
# heartbeat


@dataclass(slots=True)
class SubscriptionData(Body):
    topic: str = ""
    sub_string: str = "*"
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @classmethod
    def from_json(cls, obj: Any) -> "SubscriptionData":
        d = _obj(obj)
        codes = []
        for code in _list(d.get("codeSet")):
            try:
                codes.append(int(code))
            except (TypeError, ValueError, OverflowError):
                continue
        expression_type = d.get("expressionType")
        return cls(
            topic=_str(d.get("topic")),
            sub_string=_str(d.get("subString"), "*"),
            tags_set=[_str(t) for t in _list(d.get("tagsSet")) if t is not None],
            code_set=codes,
            sub_version=_int(d.get("subVersion")),
            expression_type=(_str(expression_type).strip().upper() or "TAG") if expression_type is not None else "TAG",
            class_filter_mode=_bool(d.get("classFilterMode")),
        )

    def to_json(self) -> dict:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": list(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }


@dataclass(slots=True)
class ConsumerData(Body):
    group_name: str = ""
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False

    @classmethod
    def from_json(cls, obj: Any) -> "ConsumerData":
        d = _obj(obj)
        return cls(
            group_name=_str(d.get("groupName")),
            consume_type=_enum_name(d.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
            message_model=_enum_name(d.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
            consume_from_where=_enum_name(d.get("consumeFromWhere"), CONSUME_FROM_WHERE, "CONSUME_FROM_LAST_OFFSET"),
            subscriptions=[
                SubscriptionData.from_json(s) for s in _list(d.get("subscriptionDataSet")) if isinstance(s, dict)
            ],
            unit_mode=_bool(d.get("unitMode")),
        )

    def to_json(self) -> dict:
        return {
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "groupName": self.group_name,
            "messageModel": self.message_model,
            "subscriptionDataSet": [s.to_json() for s in self.subscriptions],
            "unitMode": self.unit_mode,
        }


@dataclass(slots=True)
class ProducerData(Body):
    group_name: str = ""

    @classmethod
    def from_json(cls, obj: Any) -> "ProducerData":
        return cls(group_name=_str(_obj(obj).get("groupName")))

    def to_json(self) -> dict:
        return {"groupName": self.group_name}


@dataclass(slots=True)
class HeartbeatData(Body):
    client_id: str = ""
    producers: list[ProducerData] = field(default_factory=list)
    consumers: list[ConsumerData] = field(default_factory=list)
    heartbeat_fingerprint: int = 0
    without_sub: bool = False

    @classmethod
    def from_json(cls, obj: Any) -> "HeartbeatData":
        d = _obj(obj)
        client_id = d.get("clientID")
        if client_id is None:
            client_id = d.get("clientId")
        return cls(
            client_id=_str(client_id),
            producers=[ProducerData.from_json(p) for p in _list(d.get("producerDataSet")) if isinstance(p, dict)],
            consumers=[ConsumerData.from_json(c) for c in _list(d.get("consumerDataSet")) if isinstance(c, dict)],
            heartbeat_fingerprint=_int(d.get("heartbeatFingerprint")),
            without_sub=_bool(d.get("withoutSub")),
        )

    def to_json(self) -> dict:
        return {
            "clientID": self.client_id,
            "consumerDataSet": [c.to_json() for c in self.consumers],
            "heartbeatFingerprint": self.heartbeat_fingerprint,
            "producerDataSet": [p.to_json() for p in self.producers],
            "withoutSub": self.without_sub,
        }


# ---------------------------------------------------------------------------------------------
# routes


@dataclass(slots=True)
class QueueData(Body):
    broker_name: str = ""
    read_queue_nums: int = 0
    write_queue_nums: int = 0
    perm: int = 6
    topic_sys_flag: int = 0

    @classmethod
    def from_json(cls, obj: Any) -> "QueueData":
        d = _obj(obj)
        return cls(
            broker_name=_str(d.get("brokerName")),
            read_queue_nums=_int(d.get("readQueueNums")),
            write_queue_nums=_int(d.get("writeQueueNums")),
            perm=_int(d.get("perm"), 6),
            topic_sys_flag=_int(d.get("topicSysFlag")),
        )

    def to_json(self) -> dict:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass(slots=True)
class BrokerData(Body):
    cluster: str = ""
    broker_name: str = ""
    broker_addrs: dict[int, str] = field(default_factory=dict)  # brokerId (0 = master) -> "ip:port"
    zone_name: str | None = None
    enable_acting_master: bool = False

    @classmethod
    def from_json(cls, obj: Any) -> "BrokerData":
        d = _obj(obj)
        addrs: dict[int, str] = {}
        for key, addr in _dict(d.get("brokerAddrs")).items():
            try:
                addrs[int(key)] = _str(addr)
            except (TypeError, ValueError):
                continue
        return cls(
            cluster=_str(d.get("cluster")),
            broker_name=_str(d.get("brokerName")),
            broker_addrs=addrs,
            zone_name=_str(d.get("zoneName"), None),
            enable_acting_master=_bool(d.get("enableActingMaster")),
        )

    def to_json(self) -> dict:
        out = {
            # Quoted (string) keys: standard JSON, accepted by every client (reference §3).
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
            "enableActingMaster": self.enable_acting_master,
        }
        if self.zone_name is not None:
            out["zoneName"] = self.zone_name
        return out

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(0)


@dataclass(slots=True)
class TopicRouteData(Body):
    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None

    @classmethod
    def from_json(cls, obj: Any) -> "TopicRouteData":
        d = _obj(obj)
        return cls(
            queue_datas=[QueueData.from_json(q) for q in _list(d.get("queueDatas")) if isinstance(q, dict)],
            broker_datas=[BrokerData.from_json(b) for b in _list(d.get("brokerDatas")) if isinstance(b, dict)],
            filter_server_table={
                str(k): [_str(a) for a in _list(v)] for k, v in _dict(d.get("filterServerTable")).items()
            },
            order_topic_conf=_str(d.get("orderTopicConf"), None),
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "brokerDatas": [b.to_json() for b in self.broker_datas],
            "filterServerTable": {k: list(v) for k, v in self.filter_server_table.items()},
        }
        if self.order_topic_conf is not None:
            out["orderTopicConf"] = self.order_topic_conf
        out["queueDatas"] = [q.to_json() for q in self.queue_datas]
        return out


@dataclass(slots=True)
class ClusterInfo(Body):
    """GET_BROKER_CLUSTER_INFO (106) body."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Any) -> "ClusterInfo":
        d = _obj(obj)
        return cls(
            broker_addr_table={
                str(k): BrokerData.from_json(v)
                for k, v in _dict(d.get("brokerAddrTable")).items()
                if isinstance(v, dict)
            },
            cluster_addr_table={str(k): [_str(n) for n in _list(v)] for k, v in _dict(d.get("clusterAddrTable")).items()},
        )

    def to_json(self) -> dict:
        return {
            "brokerAddrTable": {k: v.to_json() for k, v in self.broker_addr_table.items()},
            "clusterAddrTable": {k: list(v) for k, v in self.cluster_addr_table.items()},
        }


@dataclass(slots=True)
class TopicList(Body):
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) body."""

    topic_list: list[str] = field(default_factory=list)
    broker_addr: str | None = None

    @classmethod
    def from_json(cls, obj: Any) -> "TopicList":
        d = _obj(obj)
        return cls(topic_list=[_str(t) for t in _list(d.get("topicList"))], broker_addr=_str(d.get("brokerAddr"), None))

    def to_json(self) -> dict:
        out: dict[str, Any] = {"topicList": list(self.topic_list)}
        if self.broker_addr is not None:
            out["brokerAddr"] = self.broker_addr
        return out


# ---------------------------------------------------------------------------------------------
# consumer list, queue locks, client config check


@dataclass(slots=True)
class ConsumerListBody(Body):
    consumer_id_list: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any) -> "ConsumerListBody":
        return cls(consumer_id_list=[_str(c) for c in _list(_obj(obj).get("consumerIdList")) if c is not None])

    def to_json(self) -> dict:
        return {"consumerIdList": list(self.consumer_id_list)}


@dataclass(slots=True, frozen=True, order=True)
class MessageQueue(Body):
    """Hashable and ordered (topic, broker name, queue id), as clients sort queues for allocation."""

    topic: str = ""
    broker_name: str = ""
    queue_id: int = 0

    @classmethod
    def from_json(cls, obj: Any) -> "MessageQueue":
        d = _obj(obj)
        return cls(topic=_str(d.get("topic")), broker_name=_str(d.get("brokerName")), queue_id=_int(d.get("queueId")))

    def to_json(self) -> dict:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


def _queues(value: Any) -> list[MessageQueue]:
    return [MessageQueue.from_json(q) for q in _list(value) if isinstance(q, dict)]


@dataclass(slots=True)
class LockBatchRequestBody(Body):
    consumer_group: str = ""
    client_id: str = ""
    only_this_broker: bool = False
    mq_set: list[MessageQueue] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any) -> "LockBatchRequestBody":
        d = _obj(obj)
        return cls(
            consumer_group=_str(d.get("consumerGroup")),
            client_id=_str(d.get("clientId")),
            only_this_broker=_bool(d.get("onlyThisBroker")),
            mq_set=_queues(d.get("mqSet")),
        )

    def to_json(self) -> dict:
        return {
            "clientId": self.client_id,
            "consumerGroup": self.consumer_group,
            "mqSet": [q.to_json() for q in self.mq_set],
            "onlyThisBroker": self.only_this_broker,
        }


@dataclass(slots=True)
class UnlockBatchRequestBody(LockBatchRequestBody):
    """Same JSON shape as LockBatchRequestBody."""


@dataclass(slots=True)
class LockBatchResponseBody(Body):
    lock_ok_mq_set: list[MessageQueue] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any) -> "LockBatchResponseBody":
        return cls(lock_ok_mq_set=_queues(_obj(obj).get("lockOKMQSet")))

    def to_json(self) -> dict:
        return {"lockOKMQSet": [q.to_json() for q in self.lock_ok_mq_set]}


@dataclass(slots=True)
class CheckClientRequestBody(Body):
    client_id: str = ""
    group: str = ""
    subscription_data: SubscriptionData | None = None
    namespace: str | None = None

    @classmethod
    def from_json(cls, obj: Any) -> "CheckClientRequestBody":
        d = _obj(obj)
        sub = d.get("subscriptionData")
        return cls(
            client_id=_str(d.get("clientId")),
            group=_str(d.get("group")),
            subscription_data=SubscriptionData.from_json(sub) if isinstance(sub, dict) else None,
            namespace=_str(d.get("namespace"), None),
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {"clientId": self.client_id, "group": self.group}
        if self.namespace is not None:
            out["namespace"] = self.namespace
        if self.subscription_data is not None:
            out["subscriptionData"] = self.subscription_data.to_json()
        return out


# ---------------------------------------------------------------------------------------------
# topic configs, broker registration


@dataclass(slots=True)
class TopicConfig(Body):
    topic_name: str = ""
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] | None = None

    @classmethod
    def from_json(cls, obj: Any) -> "TopicConfig":
        d = _obj(obj)
        attributes = d.get("attributes")
        return cls(
            topic_name=_str(d.get("topicName")),
            read_queue_nums=_int(d.get("readQueueNums"), 16),
            write_queue_nums=_int(d.get("writeQueueNums"), 16),
            perm=_int(d.get("perm"), 6),
            topic_filter_type=_enum_name(d.get("topicFilterType"), {0: "SINGLE_TAG", 1: "MULTI_TAG"}, "SINGLE_TAG"),
            topic_sys_flag=_int(d.get("topicSysFlag")),
            order=_bool(d.get("order")),
            attributes={str(k): _str(v) for k, v in attributes.items()} if isinstance(attributes, dict) else None,
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        if self.attributes is not None:
            out["attributes"] = dict(self.attributes)
        out.update(
            {
                "order": self.order,
                "perm": self.perm,
                "readQueueNums": self.read_queue_nums,
                "topicFilterType": self.topic_filter_type,
                "topicName": self.topic_name,
                "topicSysFlag": self.topic_sys_flag,
                "writeQueueNums": self.write_queue_nums,
            }
        )
        return out


@dataclass(slots=True)
class DataVersion(Body):
    counter: int = 0
    state_version: int = 0
    timestamp: int = field(default_factory=_now_ms)

    @classmethod
    def from_json(cls, obj: Any) -> "DataVersion":
        d = _obj(obj)
        return cls(counter=_int(d.get("counter")), state_version=_int(d.get("stateVersion")), timestamp=_int(d.get("timestamp")))

    def to_json(self) -> dict:
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp}

    def next_version(self) -> None:
        """Bump after a change (Java DataVersion.nextVersion)."""
        self.counter += 1
        self.timestamp = _now_ms()


@dataclass(slots=True)
class TopicConfigSerializeWrapper(Body):
    """Shape of topics.json and of RegisterBrokerBody.topicConfigSerializeWrapper."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    @classmethod
    def from_json(cls, obj: Any) -> "TopicConfigSerializeWrapper":
        d = _obj(obj)
        table: dict[str, TopicConfig] = {}
        for name, conf in _dict(d.get("topicConfigTable")).items():
            if isinstance(conf, dict):
                tc = TopicConfig.from_json(conf)
                if not tc.topic_name:
                    tc.topic_name = str(name)
                table[str(name)] = tc
        version = d.get("dataVersion")
        return cls(
            topic_config_table=table,
            data_version=DataVersion.from_json(version) if isinstance(version, dict) else DataVersion(timestamp=0),
        )

    def to_json(self) -> dict:
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {k: v.to_json() for k, v in self.topic_config_table.items()},
        }


@dataclass(slots=True)
class RegisterBrokerBody(Body):
    topic_config_wrapper: TopicConfigSerializeWrapper = field(default_factory=TopicConfigSerializeWrapper)
    filter_server_list: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any) -> "RegisterBrokerBody":
        d = _obj(obj)
        wrapper = d.get("topicConfigSerializeWrapper")
        return cls(
            topic_config_wrapper=TopicConfigSerializeWrapper.from_json(wrapper if isinstance(wrapper, dict) else {}),
            filter_server_list=[_str(s) for s in _list(d.get("filterServerList"))],
        )

    def to_json(self) -> dict:
        return {
            "filterServerList": list(self.filter_server_list),
            "topicConfigSerializeWrapper": self.topic_config_wrapper.to_json(),
        }


@dataclass(slots=True)
class SubscriptionGroupConfig(Body):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) body and subscriptionGroup.json entry (reference §6.7)."""

    group_name: str = ""
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    attributes: dict[str, str] | None = None

    @classmethod
    def from_json(cls, obj: Any) -> "SubscriptionGroupConfig":
        d = _obj(obj)
        attributes = d.get("attributes")
        return cls(
            group_name=_str(d.get("groupName")),
            consume_enable=_bool(d.get("consumeEnable"), True),
            consume_from_min_enable=_bool(d.get("consumeFromMinEnable"), True),
            consume_broadcast_enable=_bool(d.get("consumeBroadcastEnable"), True),
            consume_message_orderly=_bool(d.get("consumeMessageOrderly"), False),
            retry_queue_nums=_int(d.get("retryQueueNums"), 1),
            retry_max_times=_int(d.get("retryMaxTimes"), 16),
            broker_id=_int(d.get("brokerId"), 0),
            which_broker_when_consume_slowly=_int(d.get("whichBrokerWhenConsumeSlowly"), 1),
            notify_consumer_ids_changed_enable=_bool(d.get("notifyConsumerIdsChangedEnable"), True),
            group_sys_flag=_int(d.get("groupSysFlag"), 0),
            consume_timeout_minute=_int(d.get("consumeTimeoutMinute"), 15),
            attributes={str(k): _str(v) for k, v in attributes.items()} if isinstance(attributes, dict) else None,
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        if self.attributes is not None:
            out["attributes"] = dict(self.attributes)
        out.update(
            {
                "brokerId": self.broker_id,
                "consumeBroadcastEnable": self.consume_broadcast_enable,
                "consumeEnable": self.consume_enable,
                "consumeFromMinEnable": self.consume_from_min_enable,
                "consumeMessageOrderly": self.consume_message_orderly,
                "consumeTimeoutMinute": self.consume_timeout_minute,
                "groupName": self.group_name,
                "groupSysFlag": self.group_sys_flag,
                "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
                "retryMaxTimes": self.retry_max_times,
                "retryQueueNums": self.retry_queue_nums,
                "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
            }
        )
        return out
