"""What each remoting request needs: the topics and groups it names or reaches, read from its typed form.

The resources come from the object ``protocol.requests.read_request`` made of the request, the very object its
handler acts on, so the two cannot read a field differently. Requests that reach a record by its commit-log offset
(VIEW_MESSAGE_BY_ID, CONSUMER_SEND_MSG_BACK, END_TRANSACTION, CONSUME_MESSAGE_DIRECTLY) need a permission on the
topic of the record at that offset, found through ``RecordTopics`` (the store), not on a topic the caller names.

Follows the reference's 4.x table (acl-and-tls.md §4.2/§4.3) with its 5.x fix for batch sends and these
tightenings: a send to a retry topic ``%RETRY%g`` needs SUB on group g (the retry topic *is* the group's resource);
every request that reads or changes a group's offsets, locks, consumers or statistics needs SUB on the group (and
on the topic it names); a topic's offsets and statistics need PUB or SUB on it; whole-broker listings and the
broker's configuration are admin-only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from broker.acl.accounts import PUB, RETRY_GROUP_PREFIX, SUB, group_resource
from broker.acl.authorizer import ANY_ACCESS, Needs
from broker.managers.consumer_manager import group_topics
from protocol.codes import RequestCode
from protocol.ids import decode_offset_msg_id

__all__ = ["ADMIN_CODES", "CONTROLLER_ADMIN_CODES", "NAMESRV_ADMIN_CODES", "NAMESRV_LISTING_CODES", "RESOURCE_CODES",
           "BrokerLookups", "RecordTopics", "consumer_needs", "end_transaction_needs", "needed_resources",
           "send_back_needs", "send_needs", "topic_resource"]

# Admin-only on the broker: the reference's five; this project's RESEND_DLQ_MESSAGE (writes into any topic) and
# CONSUME_MESSAGE_DIRECTLY (makes a consumer's listener run on any stored message); and the whole-broker listings
# and configuration (every topic's and group's configs and offsets, the delay offsets, the runtime figures, the
# open transactions): a non-admin account names its own topics and groups instead.
ADMIN_CODES: frozenset[int] = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG, RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.RESEND_DLQ_MESSAGE, RequestCode.CONSUME_MESSAGE_DIRECTLY,
    RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_BROKER_CONFIG, RequestCode.GET_BROKER_RUNTIME_INFO,
    RequestCode.GET_ALL_CONSUMER_OFFSET, RequestCode.GET_ALL_DELAY_OFFSET,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, RequestCode.GET_PENDING_TRANSACTIONS,
    RequestCode.GET_PRODUCER_CONNECTION_LIST, RequestCode.GET_ALL_PRODUCER_INFO,  # every producer's address
    # issue 28, broker side of controller mode: a replica's epochs, and role notices on the broker's own port
    RequestCode.GET_BROKER_EPOCH_CACHE, RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
})

# Controller-mode codes (issue 28): with ACL on, a controller (standalone or in a name server) answers only an admin
# account's signed request; brokers sign theirs like their name-server registrations.
CONTROLLER_ADMIN_CODES: frozenset[int] = frozenset({
    RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, RequestCode.CONTROLLER_ELECT_MASTER,
    RequestCode.CONTROLLER_REGISTER_BROKER, RequestCode.CONTROLLER_GET_REPLICA_INFO,
    RequestCode.CONTROLLER_GET_METADATA_INFO, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
    RequestCode.UPDATE_CONTROLLER_CONFIG, RequestCode.GET_CONTROLLER_CONFIG, RequestCode.CLEAN_BROKER_DATA,
    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, RequestCode.CONTROLLER_APPLY_BROKER_ID,
})

# Name-server codes that change routes or name-server state: only an admin account's signed request may use them
# (the reference leaves the name server open; we don't). Route queries stay open to everyone.
NAMESRV_ADMIN_CODES: frozenset[int] = frozenset({
    RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.PUT_KV_CONFIG,
    RequestCode.DELETE_KV_CONFIG, RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER,
    RequestCode.DELETE_TOPIC_IN_NAMESRV, RequestCode.UPDATE_NAMESRV_CONFIG,
}) | CONTROLLER_ADMIN_CODES

# Name-server codes that list every topic (issue 31): a known account's signed request, like any read on the broker
# (whose own listings are admin codes above). Route lookups of a named topic and the cluster table stay open.
NAMESRV_LISTING_CODES: frozenset[int] = frozenset({
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, RequestCode.GET_TOPICS_BY_CLUSTER,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, RequestCode.GET_UNIT_TOPIC_LIST, RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
    RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
})

_PROP_REAL_TOPIC = "REAL_TOPIC"


class RecordTopics(Protocol):
    """What the broker knows that a request reaches indirectly: the record at a commit-log offset (the store), and
    the topics a group consumes (for a group-wide statistic)."""

    def look_record(self, phys_offset: int) -> Any:
        """The decoded record (``.topic``, ``.properties``) or None."""

    def group_topics(self, group: str) -> set[str]:
        """The topics ``group`` has offsets on or subscribes to here."""


class BrokerLookups:
    """``RecordTopics`` over the broker's store, offsets and consumers."""

    def __init__(self, store: Any, offsets: Any, consumers: Any) -> None:
        self.look_record = store.look_record
        self._offsets = offsets
        self._consumers = consumers

    def group_topics(self, group: str) -> set[str]:
        return group_topics(self._offsets, self._consumers, group)


def topic_resource(topic: str, perm: int) -> tuple[str, int]:
    """(topic, perm), except that a retry topic is its group's resource (shared with broker/grpc/access.py)."""
    return (topic, SUB) if topic.startswith(RETRY_GROUP_PREFIX) else (topic, perm)




def send_needs(topic: str) -> Needs:
    """What a send to ``topic`` needs, whichever protocol brought it (the messaging core's SendRequest.needs() and the
    remoting table below): PUB on the topic, SUB on group g for its retry topic ``%RETRY%g``."""
    return [topic_resource(topic, PUB)]


def _send(request: Any, _records: RecordTopics | None) -> Needs:
    return send_needs(request.topic)


def _pull(request: Any, _records: RecordTopics | None) -> Needs:
    return consumer_needs(request.consumer_group, request.topic)


def consumer_needs(group: str | None, topic: str | None) -> Needs:
    """What consuming ``topic`` as ``group`` needs, whichever protocol asks (a remoting pull, a gRPC receive, the
    core's typed requests): SUB on the topic and on the group (a group is the resource ``%RETRY%<group>``; its own
    retry topic is named once)."""
    needs: Needs = []
    if topic:
        needs.append((topic, SUB))
    if group and group_resource(group) != topic:
        needs.append((group_resource(group), SUB))
    return needs


def _group_and_topic(group_attr: str) -> Callable[[Any, RecordTopics | None], Needs]:
    def needs(request: Any, _records: RecordTopics | None) -> Needs:
        return consumer_needs(getattr(request, group_attr), request.topic)
    return needs


def _group_only(group_attr: str) -> Callable[[Any, RecordTopics | None], Needs]:
    def needs(request: Any, _records: RecordTopics | None) -> Needs:
        group = getattr(request, group_attr)
        return [(group_resource(group), SUB)] if group else []
    return needs


def _topic_any(request: Any, _records: RecordTopics | None) -> Needs:
    return [(request.topic, ANY_ACCESS)]


def _topic_sub(request: Any, _records: RecordTopics | None) -> Needs:
    return [(request.topic, SUB)]


def _record_needs(records: RecordTopics | None, offset: int | None, perm: int, real_topic: bool = False) -> Needs:
    """The permission on the topic of the record at ``offset`` (its real topic for a half message). An offset with
    no record there needs nothing: the handler answers "not found" and reveals no topic."""
    if records is None or offset is None or offset < 0:
        return []
    record = records.look_record(offset)
    if record is None:
        return []
    topic = record.topic
    if real_topic:
        topic = record.properties.get(_PROP_REAL_TOPIC) or topic
    return [topic_resource(topic, perm)]


def _view_message(request: Any, records: RecordTopics | None) -> Needs:
    return _record_needs(records, request.offset, SUB)


def send_back_needs(records: RecordTopics | None, group: str, offset: int | None) -> Needs:
    """What a send-back of the record at ``offset`` by ``group`` needs (the messaging core's SendBackRequest.needs()
    and the remoting table below): SUB on the group, and SUB on the topic of the record being sent back: the record
    is copied into the group's retry topic, from where the group reads it."""
    needs = [(group_resource(group), SUB)] if group else []
    for need in _record_needs(records, offset, SUB):
        if need not in needs:
            needs.append(need)
    return needs


def _send_back(request: Any, records: RecordTopics | None) -> Needs:
    return send_back_needs(records, request.group, request.offset)


def end_transaction_needs(records: RecordTopics | None, commit_log_offset: int | None) -> Needs:
    """What a transaction decision on the half record at ``commit_log_offset`` needs (the messaging core's
    EndTransactionRequest.needs() and the remoting table below): PUB on the half message's real topic, where a commit
    publishes it."""
    return _record_needs(records, commit_log_offset, PUB, real_topic=True)


def _end_transaction(request: Any, records: RecordTopics | None) -> Needs:
    return end_transaction_needs(records, request.commit_log_offset)


def _consume_directly(request: Any, records: RecordTopics | None) -> Needs:
    needs = [(group_resource(request.consumer_group), SUB)] if request.consumer_group else []
    try:
        _, _, offset = decode_offset_msg_id(request.msg_id or "")
    except ValueError:
        return needs
    return needs + _record_needs(records, offset, SUB)


def _consume_stats(request: Any, records: RecordTopics | None) -> Needs:
    """SUB on the group and on the topic named; without one, the statistic covers every topic the group consumes,
    and each of them needs SUB."""
    if request.topic or records is None:
        return consumer_needs(request.consumer_group, request.topic)
    needs = consumer_needs(request.consumer_group, None)
    needs += [topic_resource(topic, SUB) for topic in sorted(records.group_topics(request.consumer_group))]
    return needs


def _heart_beat(request: Any, _records: RecordTopics | None) -> Needs:
    """SUB on each consumer group and on each subscribed topic; producers are not checked (the reference's rule:
    a producer group names no resource)."""
    needs: Needs = []
    for consumer in request.consumers:
        if consumer.group_name:
            needs.append((group_resource(consumer.group_name), SUB))
        for subscription in consumer.subscriptions:
            if subscription.topic:
                needs.append(topic_resource(subscription.topic, SUB))
    return needs


def _lock_batch(request: Any, _records: RecordTopics | None) -> Needs:
    needs: Needs = [(group_resource(request.consumer_group), SUB)] if request.consumer_group else []
    for queue in request.mq_set:
        need = topic_resource(queue.topic, SUB)
        if need not in needs:
            needs.append(need)
    return needs


def _check_client(request: Any, _records: RecordTopics | None) -> Needs:
    sub = request.subscription_data
    return consumer_needs(request.group or None, sub.topic if sub is not None else None)


def _unregister(request: Any, _records: RecordTopics | None) -> Needs:
    return [(group_resource(request.consumer_group), SUB)] if request.consumer_group else []


_RESOLVERS: dict[int, Callable[[Any, RecordTopics | None], Needs]] = {
    RequestCode.SEND_MESSAGE: _send,
    RequestCode.SEND_REPLY_MESSAGE: _send,
    RequestCode.SEND_MESSAGE_V2: _send,
    RequestCode.SEND_REPLY_MESSAGE_V2: _send,
    RequestCode.SEND_BATCH_MESSAGE: _send,
    RequestCode.RECALL_MESSAGE: _send,  # the reference's Action.PUB on the topic it names
    RequestCode.PULL_MESSAGE: _pull,
    RequestCode.LITE_PULL_MESSAGE: _pull,
    RequestCode.QUERY_MESSAGE: _topic_sub,
    RequestCode.VIEW_MESSAGE_BY_ID: _view_message,
    RequestCode.CONSUMER_SEND_MSG_BACK: _send_back,
    RequestCode.END_TRANSACTION: _end_transaction,
    RequestCode.CONSUME_MESSAGE_DIRECTLY: _consume_directly,
    RequestCode.HEART_BEAT: _heart_beat,
    RequestCode.UNREGISTER_CLIENT: _unregister,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _group_only("consumer_group"),
    RequestCode.GET_CONSUMER_CONNECTION_LIST: _group_only("consumer_group"),
    RequestCode.GET_CONSUMER_RUNNING_INFO: _group_only("consumer_group"),
    RequestCode.QUERY_CONSUMER_OFFSET: _group_and_topic("consumer_group"),
    RequestCode.UPDATE_CONSUMER_OFFSET: _group_and_topic("consumer_group"),
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: _group_and_topic("group"),
    RequestCode.GET_CONSUME_STATS: _consume_stats,
    RequestCode.LOCK_BATCH_MQ: _lock_batch,
    RequestCode.UNLOCK_BATCH_MQ: _lock_batch,
    RequestCode.CHECK_CLIENT_CONFIG: _check_client,
    RequestCode.GET_MAX_OFFSET: _topic_any,
    RequestCode.GET_MIN_OFFSET: _topic_any,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _topic_any,
    RequestCode.GET_EARLIEST_MSG_STORETIME: _topic_any,
    RequestCode.GET_TOPIC_STATS_INFO: _topic_any,
}

RESOURCE_CODES: frozenset[int] = frozenset(int(code) for code in _RESOLVERS)


def needed_resources(code: int, request: Any, records: RecordTopics | None = None) -> Needs:
    """The (resource, permission) pairs request ``code`` needs, from its typed form ``request``; [] when
    authentication alone is enough (or, for an admin-only code, the admin check)."""
    resolve = _RESOLVERS.get(code)
    if resolve is None or request is None:
        return []
    return resolve(request, records)
