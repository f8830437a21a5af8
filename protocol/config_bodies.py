"""JSON bodies of broker configuration: topic configs, subscription-group configs, data versions and the
REGISTER_BROKER body that carries them to the name server (and the same shapes in config/*.json)."""

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
    now_ms,
)

__all__ = ["TopicConfig", "DataVersion", "TopicConfigSerializeWrapper", "RegisterBrokerBody", "SubscriptionGroupConfig"]


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
        d = as_object(obj)
        attributes = d.get("attributes")
        return cls(
            topic_name=as_str(d.get("topicName")),
            read_queue_nums=as_int(d.get("readQueueNums"), 16),
            write_queue_nums=as_int(d.get("writeQueueNums"), 16),
            perm=as_int(d.get("perm"), 6),
            topic_filter_type=as_enum_name(d.get("topicFilterType"), {0: "SINGLE_TAG", 1: "MULTI_TAG"}, "SINGLE_TAG"),
            topic_sys_flag=as_int(d.get("topicSysFlag")),
            order=as_bool(d.get("order")),
            attributes={str(k): as_str(v) for k, v in attributes.items()} if isinstance(attributes, dict) else None,
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
    timestamp: int = field(default_factory=now_ms)

    @classmethod
    def from_json(cls, obj: Any) -> "DataVersion":
        d = as_object(obj)
        return cls(counter=as_int(d.get("counter")), state_version=as_int(d.get("stateVersion")), timestamp=as_int(d.get("timestamp")))

    def to_json(self) -> dict:
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp}

    def next_version(self) -> None:
        """Bump after a change (Java DataVersion.nextVersion)."""
        self.counter += 1
        self.timestamp = now_ms()


@dataclass(slots=True)
class TopicConfigSerializeWrapper(Body):
    """Shape of topics.json and of RegisterBrokerBody.topicConfigSerializeWrapper."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    @classmethod
    def from_json(cls, obj: Any) -> "TopicConfigSerializeWrapper":
        d = as_object(obj)
        table: dict[str, TopicConfig] = {}
        for name, conf in as_dict(d.get("topicConfigTable")).items():
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
        d = as_object(obj)
        wrapper = d.get("topicConfigSerializeWrapper")
        return cls(
            topic_config_wrapper=TopicConfigSerializeWrapper.from_json(wrapper if isinstance(wrapper, dict) else {}),
            filter_server_list=[as_str(s) for s in as_list(d.get("filterServerList"))],
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
        d = as_object(obj)
        attributes = d.get("attributes")
        return cls(
            group_name=as_str(d.get("groupName")),
            consume_enable=as_bool(d.get("consumeEnable"), True),
            consume_from_min_enable=as_bool(d.get("consumeFromMinEnable"), True),
            consume_broadcast_enable=as_bool(d.get("consumeBroadcastEnable"), True),
            consume_message_orderly=as_bool(d.get("consumeMessageOrderly"), False),
            retry_queue_nums=as_int(d.get("retryQueueNums"), 1),
            retry_max_times=as_int(d.get("retryMaxTimes"), 16),
            broker_id=as_int(d.get("brokerId"), 0),
            which_broker_when_consume_slowly=as_int(d.get("whichBrokerWhenConsumeSlowly"), 1),
            notify_consumer_ids_changed_enable=as_bool(d.get("notifyConsumerIdsChangedEnable"), True),
            group_sys_flag=as_int(d.get("groupSysFlag"), 0),
            consume_timeout_minute=as_int(d.get("consumeTimeoutMinute"), 15),
            attributes={str(k): as_str(v) for k, v in attributes.items()} if isinstance(attributes, dict) else None,
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
