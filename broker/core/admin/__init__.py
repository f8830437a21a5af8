"""Admin in the messaging core: typed requests for a broker's topics, subscription groups, offsets tables, dead
letters and figures (broker/core/admin/requests.py), each naming what the one Authorizer must allow, executed by
:class:`~broker.core.admin.service.AdminService` into one Outcome. The remoting processor (broker/processors/admin.py)
and the web console (broker/console/views.py) only translate to and from them."""

from broker.core.admin.requests import (AdminRequest, AllProducersRequest, BrokerConfigRequest, ConsumeStatsRequest,
                                        ConsumerConnectionRequest, ConsumerOffsetsRequest,
                                        DeleteSubscriptionGroupRequest, DeleteTopicRequest,
                                        ProducerConnectionRequest, ResendDeadLetterRequest, RuntimeInfoRequest,
                                        SubscriptionGroupsRequest, TopicConfigsRequest, TopicStatsRequest,
                                        UpdateSubscriptionGroupRequest, UpdateTopicRequest)
from broker.core.admin.service import MAX_QUEUE_NUMS, AdminService, BrokerState

__all__ = ["MAX_QUEUE_NUMS", "AdminRequest", "AdminService", "AllProducersRequest", "BrokerConfigRequest",
           "BrokerState", "ConsumeStatsRequest", "ConsumerConnectionRequest", "ConsumerOffsetsRequest",
           "DeleteSubscriptionGroupRequest", "DeleteTopicRequest", "ProducerConnectionRequest",
           "ResendDeadLetterRequest", "RuntimeInfoRequest", "SubscriptionGroupsRequest", "TopicConfigsRequest",
           "TopicStatsRequest", "UpdateSubscriptionGroupRequest", "UpdateTopicRequest"]
