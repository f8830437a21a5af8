"""JSON bodies of client-facing remoting commands (heartbeat, routes, consumer lists, queue locks, ...).
Configuration bodies are in protocol.config_bodies, admin bodies in protocol.admin_bodies.

Every class has
* `from_json(obj)` — liberal: accepts a parsed JSON object or raw bytes/str, enums as names or ints,
  numbers as strings or ints, missing keys -> defaults, null/absent lists -> empty, unknown keys ignored;
* `to_json()` — a plain JSON-ready Python object (dicts with string keys, Java field names,
  enums written as names);
* `encode()` -> compact UTF-8 JSON bytes and `decode(data)` -> instance (via jsonlenient).
Enum-typed fields are stored as their NAMES.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocol.json_body import (
    Body,
    as_int,
    as_bool,
    as_str,
    as_enum_name,
    as_list,
    as_dict,
    as_object,
)

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
    "ClusterInfo",
    "TopicList",
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
        d = as_object(obj)
        codes = []
        for code in as_list(d.get("codeSet")):
            try:
                codes.append(int(code))
            except (TypeError, ValueError, OverflowError):
                continue
        expression_type = d.get("expressionType")
        return cls(
            topic=as_str(d.get("topic")),
            sub_string=as_str(d.get("subString"), "*"),
            tags_set=[as_str(t) for t in as_list(d.get("tagsSet")) if t is not None],
            code_set=codes,
            sub_version=as_int(d.get("subVersion")),
            expression_type=(as_str(expression_type).strip().upper() or "TAG") if expression_type is not None else "TAG",
            class_filter_mode=as_bool(d.get("classFilterMode")),
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
        d = as_object(obj)
        return cls(
            group_name=as_str(d.get("groupName")),
            consume_type=as_enum_name(d.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
            message_model=as_enum_name(d.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
            consume_from_where=as_enum_name(d.get("consumeFromWhere"), CONSUME_FROM_WHERE, "CONSUME_FROM_LAST_OFFSET"),
            subscriptions=[
                SubscriptionData.from_json(s) for s in as_list(d.get("subscriptionDataSet")) if isinstance(s, dict)
            ],
            unit_mode=as_bool(d.get("unitMode")),
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
        return cls(group_name=as_str(as_object(obj).get("groupName")))

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
        d = as_object(obj)
        client_id = d.get("clientID")
        if client_id is None:
            client_id = d.get("clientId")
        return cls(
            client_id=as_str(client_id),
            producers=[ProducerData.from_json(p) for p in as_list(d.get("producerDataSet")) if isinstance(p, dict)],
            consumers=[ConsumerData.from_json(c) for c in as_list(d.get("consumerDataSet")) if isinstance(c, dict)],
            heartbeat_fingerprint=as_int(d.get("heartbeatFingerprint")),
            without_sub=as_bool(d.get("withoutSub")),
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
        d = as_object(obj)
        return cls(
            broker_name=as_str(d.get("brokerName")),
            read_queue_nums=as_int(d.get("readQueueNums")),
            write_queue_nums=as_int(d.get("writeQueueNums")),
            perm=as_int(d.get("perm"), 6),
            topic_sys_flag=as_int(d.get("topicSysFlag")),
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
        d = as_object(obj)
        addrs: dict[int, str] = {}
        for key, addr in as_dict(d.get("brokerAddrs")).items():
            try:
                addrs[int(key)] = as_str(addr)
            except (TypeError, ValueError):
                continue
        return cls(
            cluster=as_str(d.get("cluster")),
            broker_name=as_str(d.get("brokerName")),
            broker_addrs=addrs,
            zone_name=as_str(d.get("zoneName"), None),
            enable_acting_master=as_bool(d.get("enableActingMaster")),
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
        d = as_object(obj)
        return cls(
            queue_datas=[QueueData.from_json(q) for q in as_list(d.get("queueDatas")) if isinstance(q, dict)],
            broker_datas=[BrokerData.from_json(b) for b in as_list(d.get("brokerDatas")) if isinstance(b, dict)],
            filter_server_table={
                str(k): [as_str(a) for a in as_list(v)] for k, v in as_dict(d.get("filterServerTable")).items()
            },
            order_topic_conf=as_str(d.get("orderTopicConf"), None),
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
        d = as_object(obj)
        return cls(
            broker_addr_table={
                str(k): BrokerData.from_json(v)
                for k, v in as_dict(d.get("brokerAddrTable")).items()
                if isinstance(v, dict)
            },
            cluster_addr_table={str(k): [as_str(n) for n in as_list(v)] for k, v in as_dict(d.get("clusterAddrTable")).items()},
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
        d = as_object(obj)
        return cls(topic_list=[as_str(t) for t in as_list(d.get("topicList"))], broker_addr=as_str(d.get("brokerAddr"), None))

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
        return cls(consumer_id_list=[as_str(c) for c in as_list(as_object(obj).get("consumerIdList")) if c is not None])

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
        d = as_object(obj)
        return cls(topic=as_str(d.get("topic")), broker_name=as_str(d.get("brokerName")), queue_id=as_int(d.get("queueId")))

    def to_json(self) -> dict:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


def _queues(value: Any) -> list[MessageQueue]:
    return [MessageQueue.from_json(q) for q in as_list(value) if isinstance(q, dict)]


@dataclass(slots=True)
class LockBatchRequestBody(Body):
    consumer_group: str = ""
    client_id: str = ""
    only_this_broker: bool = False
    mq_set: list[MessageQueue] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any) -> "LockBatchRequestBody":
        d = as_object(obj)
        return cls(
            consumer_group=as_str(d.get("consumerGroup")),
            client_id=as_str(d.get("clientId")),
            only_this_broker=as_bool(d.get("onlyThisBroker")),
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
        return cls(lock_ok_mq_set=_queues(as_object(obj).get("lockOKMQSet")))

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
        d = as_object(obj)
        sub = d.get("subscriptionData")
        return cls(
            client_id=as_str(d.get("clientId")),
            group=as_str(d.get("group")),
            subscription_data=SubscriptionData.from_json(sub) if isinstance(sub, dict) else None,
            namespace=as_str(d.get("namespace"), None),
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {"clientId": self.client_id, "group": self.group}
        if self.namespace is not None:
            out["namespace"] = self.namespace
        if self.subscription_data is not None:
            out["subscriptionData"] = self.subscription_data.to_json()
        return out
