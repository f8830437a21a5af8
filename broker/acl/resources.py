"""What each request code needs: the topics/groups and the permission on each, and which codes are admin-only.

Follows the reference's 4.x table (acl-and-tls.md §4.2/§4.3) with its 5.x fix for batch sends (320 checked like
310) and one deliberate tightening: a send to a retry topic ``%RETRY%g`` needs SUB on group g (the retry topic *is*
the group's resource key), for codes 10 and 310 alike, instead of the reference's producer-group quirk.
Fields are read from the raw extFields (both the short names of SEND_MESSAGE_V2 and the long ones).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from broker.acl.accounts import PUB, RETRY_GROUP_PREFIX, SUB, group_resource
from protocol.codes import RequestCode

__all__ = ["ADMIN_CODES", "NAMESRV_ADMIN_CODES", "TRACE_TOPIC", "Needs", "needed_resources"]

Needs = list[tuple[str, int]]  # (resource, PUB or SUB); groups as "%RETRY%<group>"

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"

# Admin-only on the broker: the reference's five, plus this project's RESEND_DLQ_MESSAGE (writes into any topic) and
# CONSUME_MESSAGE_DIRECTLY (makes a consumer's listener run on any stored message).
ADMIN_CODES: frozenset[int] = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG, RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.RESEND_DLQ_MESSAGE, RequestCode.CONSUME_MESSAGE_DIRECTLY,
})

# Name-server codes that change routes or name-server state: only an admin account's signed request may use them
# (the reference leaves the name server open; we don't). Route queries stay open to everyone.
NAMESRV_ADMIN_CODES: frozenset[int] = frozenset({
    RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.PUT_KV_CONFIG,
    RequestCode.DELETE_KV_CONFIG, RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER,
    RequestCode.DELETE_TOPIC_IN_NAMESRV, RequestCode.UPDATE_NAMESRV_CONFIG,
})


def _text(fields: Mapping[str, Any], *names: str) -> str | None:
    for name in names:
        value = fields.get(name)
        if value is not None and value != "":
            return value if isinstance(value, str) else str(value)
    return None


def _send_needs(topic: str | None) -> Needs:
    if topic is None:
        return []
    if topic.startswith(RETRY_GROUP_PREFIX):
        return [(topic, SUB)]  # a retry topic is its group's resource
    return [(topic, PUB)]


def _send(fields: Mapping[str, Any], _body: bytes) -> Needs:
    return _send_needs(_text(fields, "topic"))


def _send_v2(fields: Mapping[str, Any], _body: bytes) -> Needs:
    return _send_needs(_text(fields, "b", "topic"))


def _group_and_topic(fields: Mapping[str, Any], _body: bytes) -> Needs:
    needs: Needs = []
    topic = _text(fields, "topic")
    if topic is not None:
        needs.append((topic, SUB))
    group = _text(fields, "consumerGroup")
    if group is not None and group_resource(group) != topic:
        needs.append((group_resource(group), SUB))
    return needs


def _topic_sub(fields: Mapping[str, Any], _body: bytes) -> Needs:
    topic = _text(fields, "topic")
    return [(topic, SUB)] if topic is not None else []


def _group_field(name: str) -> Callable[[Mapping[str, Any], bytes], Needs]:
    def needs(fields: Mapping[str, Any], _body: bytes) -> Needs:
        group = _text(fields, name)
        return [(group_resource(group), SUB)] if group is not None else []
    return needs


def _heart_beat(_fields: Mapping[str, Any], body: bytes) -> Needs:
    """SUB on each consumer group and on each subscribed topic; producers are not checked. ValueError if the
    body does not decode (the request is then refused with that message, as in the reference)."""
    if not body:
        return []
    from protocol.bodies import HeartbeatData

    data = HeartbeatData.decode(bytes(body))
    needs: Needs = []
    for consumer in data.consumers:
        if consumer.group_name:
            needs.append((group_resource(consumer.group_name), SUB))
        for subscription in consumer.subscriptions:
            if subscription.topic:
                needs.append((subscription.topic, SUB))
    return needs


_RESOLVERS: dict[int, Callable[[Mapping[str, Any], bytes], Needs]] = {
    RequestCode.SEND_MESSAGE: _send,
    RequestCode.SEND_REPLY_MESSAGE: _send,
    RequestCode.SEND_MESSAGE_V2: _send_v2,
    RequestCode.SEND_REPLY_MESSAGE_V2: _send_v2,
    RequestCode.SEND_BATCH_MESSAGE: _send_v2,
    RequestCode.CONSUMER_SEND_MSG_BACK: _group_field("group"),
    RequestCode.PULL_MESSAGE: _group_and_topic,
    RequestCode.LITE_PULL_MESSAGE: _group_and_topic,
    RequestCode.QUERY_MESSAGE: _topic_sub,
    RequestCode.HEART_BEAT: _heart_beat,
    RequestCode.UNREGISTER_CLIENT: _group_field("consumerGroup"),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _group_field("consumerGroup"),
    RequestCode.UPDATE_CONSUMER_OFFSET: _group_and_topic,
}


def needed_resources(code: int, ext_fields: Mapping[str, Any] | None, body: bytes) -> Needs:
    """The (resource, permission) pairs request ``code`` needs; [] when authentication alone is enough."""
    resolve = _RESOLVERS.get(code)
    if resolve is None:
        return []
    return resolve(ext_fields or {}, body)
