"""The typed admin requests of the messaging core: what mqadmin, the Java admin tools and the web console ask of a
broker's topics, groups and figures, whichever front end brought them.

Each request says what the one Authorizer must allow (``needs()``, ``admin_only``): the same resources and the same
admin-only rule as the remoting table (broker/acl/resources.py: ADMIN_CODES and the resolvers), so a request is
decided alike whether it came over remoting or from the console."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from broker.acl.accounts import SUB, group_resource
from broker.acl.authorizer import ANY_ACCESS, Needs
from broker.acl.resources import RecordTopics, consumer_needs, topic_resource
from broker.core.outcome import Requester
from protocol.config_bodies import SubscriptionGroupConfig

__all__ = ["AdminRequest", "AllProducersRequest", "BrokerConfigRequest", "ConsumeStatsRequest",
           "ConsumerConnectionRequest", "ConsumerOffsetsRequest", "DeleteSubscriptionGroupRequest",
           "DeleteTopicRequest", "ProducerConnectionRequest", "ResendDeadLetterRequest", "RuntimeInfoRequest",
           "SubscriptionGroupsRequest", "TopicConfigsRequest", "TopicStatsRequest", "UpdateSubscriptionGroupRequest",
           "UpdateTopicRequest", "who"]


def who(requester: Requester | None) -> str:
    """The requester as the audit and log lines name it: ``accessKey@addr`` when it signed, else its address."""
    if requester is None:
        return "?"
    if requester.access_key:
        return f"{requester.access_key}@{requester.remote_addr}"
    return requester.remote_addr


@dataclass(slots=True)
class AdminRequest:
    """What every admin request shares: who asked. ``admin_only``: only an admin account may (ADMIN_CODES)."""

    admin_only: ClassVar[bool] = True

    def needs(self, records: RecordTopics | None = None) -> Needs:
        """The (resource, permission) pairs beyond the admin check; an admin-only request names none."""
        return []


# ---- topics -------------------------------------------------------------------------------------
@dataclass(slots=True)
class UpdateTopicRequest(AdminRequest):
    """Create or replace ``topic`` (UPDATE_AND_CREATE_TOPIC). ``attributes``: the changes (``+message.type=FIFO``,
    ``-key``) applied to the topic's current attributes; None changes none."""

    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str | None = "SINGLE_TAG"
    topic_sys_flag: int | None = 0
    order: bool = False
    attributes: str | None = None
    requester: Requester | None = None


@dataclass(slots=True)
class DeleteTopicRequest(AdminRequest):
    """Delete ``topic``: its config, queues and consumer offsets (DELETE_TOPIC_IN_BROKER)."""

    topic: str
    requester: Requester | None = None


@dataclass(slots=True)
class TopicConfigsRequest(AdminRequest):
    """Every topic's config (GET_ALL_TOPIC_CONFIG): the table in the reference's body shape."""

    requester: Requester | None = None


@dataclass(slots=True)
class TopicStatsRequest(AdminRequest):
    """The min/max offsets and last store time of each queue of ``topic`` (GET_TOPIC_STATS_INFO): PUB or SUB."""

    admin_only: ClassVar[bool] = False
    topic: str
    requester: Requester | None = None

    def needs(self, records: RecordTopics | None = None) -> Needs:
        return [(self.topic, ANY_ACCESS)]


# ---- consumer groups ----------------------------------------------------------------------------
@dataclass(slots=True)
class ConsumeStatsRequest(AdminRequest):
    """``group``'s offsets and lag on ``topic``, or on every topic it consumes here when None (GET_CONSUME_STATS)."""

    admin_only: ClassVar[bool] = False
    group: str
    topic: str | None = None
    requester: Requester | None = None

    def needs(self, records: RecordTopics | None = None) -> Needs:
        """SUB on the group and the topic; without a topic, SUB on each topic the group consumes (``records``)."""
        if self.topic or records is None:
            return consumer_needs(self.group, self.topic)
        needs = consumer_needs(self.group, None)
        return needs + [topic_resource(topic, SUB) for topic in sorted(records.group_topics(self.group))]


@dataclass(slots=True)
class ConsumerConnectionRequest(AdminRequest):
    """``group``'s online consumers and their subscriptions (GET_CONSUMER_CONNECTION_LIST): SUB on the group."""

    admin_only: ClassVar[bool] = False
    group: str
    requester: Requester | None = None

    def needs(self, records: RecordTopics | None = None) -> Needs:
        return [(group_resource(self.group), SUB)] if self.group else []


@dataclass(slots=True)
class UpdateSubscriptionGroupRequest(AdminRequest):
    """Create or replace a subscription group (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)."""

    config: SubscriptionGroupConfig
    requester: Requester | None = None


@dataclass(slots=True)
class DeleteSubscriptionGroupRequest(AdminRequest):
    """Delete ``group`` and, with ``clean_offset``, its committed offsets (DELETE_SUBSCRIPTIONGROUP)."""

    group: str
    clean_offset: bool = False
    requester: Requester | None = None


@dataclass(slots=True)
class SubscriptionGroupsRequest(AdminRequest):
    """Every subscription group's config (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)."""

    requester: Requester | None = None


@dataclass(slots=True)
class ConsumerOffsetsRequest(AdminRequest):
    """Every committed offset (GET_ALL_CONSUMER_OFFSET)."""

    requester: Requester | None = None


@dataclass(slots=True)
class ResendDeadLetterRequest(AdminRequest):
    """Put one dead letter of ``%DLQ%<group>`` back (RESEND_DLQ_MESSAGE, this project's extension), named by its
    commit-log ``offset`` or by ``msg_id`` (offset message id or UNIQ_KEY). The target: ``%RETRY%<group>`` by
    default, ``topic`` when given, the original topic with ``to_original_topic``; ``queue_id`` None or < 0 picks one.
    A letter resent before only with ``force``. Admin-only: it writes into any topic."""

    group: str
    offset: int | None = None
    msg_id: str | None = None
    topic: str | None = None
    queue_id: int | None = None
    to_original_topic: bool = False
    force: bool = False
    requester: Requester | None = None


# ---- producers and the broker -------------------------------------------------------------------
@dataclass(slots=True)
class ProducerConnectionRequest(AdminRequest):
    """``group``'s connected producers (GET_PRODUCER_CONNECTION_LIST): their addresses, so admin-only."""

    group: str
    requester: Requester | None = None


@dataclass(slots=True)
class AllProducersRequest(AdminRequest):
    """Every connected producer by group (GET_ALL_PRODUCER_INFO)."""

    requester: Requester | None = None


@dataclass(slots=True)
class BrokerConfigRequest(AdminRequest):
    """The broker's settings as properties (GET_BROKER_CONFIG)."""

    requester: Requester | None = None


@dataclass(slots=True)
class RuntimeInfoRequest(AdminRequest):
    """The broker's runtime figures (GET_BROKER_RUNTIME_INFO)."""

    requester: Requester | None = None
