"""The custom headers (the `extFields` of a command) of the requests and responses this project speaks, one class
each, declared with `F` (protocol/header_fields.py generates their decode/encode; the names it defines are
importable from here too).
"""

from __future__ import annotations

from protocol.header_fields import F, Header, HeaderError, JavaInt, int32, int64

__all__ = ["HeaderError", "F", "Header", "JavaInt", "int32", "int64"]  # header classes are appended at the bottom


# =============================================================================================
# Header classes (reference §3, §4). Python attribute = snake_case, wire key = Java field name.


class SendMessageRequestHeader(Header):
    """SEND_MESSAGE (10) uses the long names; SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE use a..n (decode_v2)."""

    producer_group = F("producerGroup", str, required=True, short="a")
    topic = F("topic", str, required=True, short="b")
    default_topic = F("defaultTopic", str, required=True, short="c")
    default_topic_queue_nums = F("defaultTopicQueueNums", int32, required=True, short="d")
    queue_id = F("queueId", int32, required=True, short="e")
    sys_flag = F("sysFlag", int32, required=True, short="f")
    born_timestamp = F("bornTimestamp", int64, required=True, short="g")
    flag = F("flag", int32, required=True, short="h")
    properties = F("properties", str, short="i")
    reconsume_times = F("reconsumeTimes", int32, default=0, short="j")
    unit_mode = F("unitMode", bool, default=False, short="k")
    max_reconsume_times = F("maxReconsumeTimes", int32, short="l")
    batch = F("batch", bool, default=False, short="m")
    broker_name = F("brokerName", str, short="n")


class SendMessageResponseHeader(Header):
    msg_id = F("msgId", str, required=True)
    queue_id = F("queueId", int32, required=True)
    queue_offset = F("queueOffset", int64, required=True)
    transaction_id = F("transactionId", str)
    batch_uniq_id = F("batchUniqId", str)
    # Present in every send response from the Java broker; the Java client reads them directly.
    msg_region = F("MSG_REGION", str)
    trace_on = F("TRACE_ON", str)


class PullMessageRequestHeader(Header):
    consumer_group = F("consumerGroup", str, required=True)
    topic = F("topic", str, required=True)
    queue_id = F("queueId", int32, required=True)
    queue_offset = F("queueOffset", int64, required=True)
    max_msg_nums = F("maxMsgNums", int32, required=True)
    sys_flag = F("sysFlag", int32, required=True)
    # Only read when the commit-offset flag is set; missing (None) or -1 means "nothing to commit".
    commit_offset = F("commitOffset", int64)
    suspend_timeout_millis = F("suspendTimeoutMillis", int64, default=15000)
    subscription = F("subscription", str)
    sub_version = F("subVersion", int64, default=0)
    expression_type = F("expressionType", str)
    max_msg_bytes = F("maxMsgBytes", int32)
    request_source = F("requestSource", int32)
    bname = F("bname", str)


class PullMessageResponseHeader(Header):
    suggest_which_broker_id = F("suggestWhichBrokerId", int64, required=True)
    next_begin_offset = F("nextBeginOffset", int64, required=True)
    min_offset = F("minOffset", int64, required=True)
    max_offset = F("maxOffset", int64, required=True)
    topic_sys_flag = F("topicSysFlag", int32)
    group_sys_flag = F("groupSysFlag", int32)
    offset_delta = F("offsetDelta", int64)
    forbidden_type = F("forbiddenType", int32)


class QueryConsumerOffsetRequestHeader(Header):
    consumer_group = F("consumerGroup", str, required=True)
    topic = F("topic", str, required=True)
    queue_id = F("queueId", int32, required=True)
    set_zero_if_not_found = F("setZeroIfNotFound", bool)


class QueryConsumerOffsetResponseHeader(Header):
    offset = F("offset", int64, required=True)


class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group = F("consumerGroup", str, required=True)
    topic = F("topic", str, required=True)
    queue_id = F("queueId", int32, required=True)
    commit_offset = F("commitOffset", int64, required=True)


class GetConsumerListByGroupRequestHeader(Header):
    consumer_group = F("consumerGroup", str, required=True)


class GetMaxOffsetRequestHeader(Header):
    topic = F("topic", str, required=True)
    queue_id = F("queueId", int32, required=True)
    committed = F("committed", bool, default=True)


class GetMaxOffsetResponseHeader(Header):
    offset = F("offset", int64, required=True)


class GetMinOffsetRequestHeader(Header):
    topic = F("topic", str, required=True)
    queue_id = F("queueId", int32, required=True)


class GetMinOffsetResponseHeader(Header):
    offset = F("offset", int64, required=True)


class SearchOffsetRequestHeader(Header):
    topic = F("topic", str, required=True)
    queue_id = F("queueId", int32, required=True)
    timestamp = F("timestamp", int64, required=True)
    boundary_type = F("boundaryType", str, default="LOWER")


class SearchOffsetResponseHeader(Header):
    offset = F("offset", int64, required=True)


class GetEarliestMsgStoretimeRequestHeader(Header):
    topic = F("topic", str, required=True)
    queue_id = F("queueId", int32, required=True)


class GetEarliestMsgStoretimeResponseHeader(Header):
    timestamp = F("timestamp", int64, required=True)


class ViewMessageRequestHeader(Header):
    offset = F("offset", int64, required=True)
    topic = F("topic", str)


class QueryMessageRequestHeader(Header):
    topic = F("topic", str, required=True)
    key = F("key", str, required=True)
    max_num = F("maxNum", int32, required=True)
    begin_timestamp = F("beginTimestamp", int64, required=True)
    end_timestamp = F("endTimestamp", int64, required=True)
    unique_key_query = F("_UNIQUE_KEY_QUERY", bool, default=False)


class QueryMessageResponseHeader(Header):
    index_last_update_timestamp = F("indexLastUpdateTimestamp", int64, required=True)
    index_last_update_phyoffset = F("indexLastUpdatePhyoffset", int64, required=True)


class UnregisterClientRequestHeader(Header):
    client_id = F("clientID", str, required=True)
    producer_group = F("producerGroup", str)
    consumer_group = F("consumerGroup", str)


class ConsumerSendMsgBackRequestHeader(Header):
    offset = F("offset", int64, required=True)
    group = F("group", str, required=True)
    delay_level = F("delayLevel", int32, required=True)
    origin_msg_id = F("originMsgId", str)
    origin_topic = F("originTopic", str)
    unit_mode = F("unitMode", bool, default=False)
    max_reconsume_times = F("maxReconsumeTimes", int32)
    bname = F("bname", str)


class NotifyConsumerIdsChangedRequestHeader(Header):
    consumer_group = F("consumerGroup", str, required=True)


class GetRouteInfoRequestHeader(Header):
    topic = F("topic", str, required=True)
    accept_standard_json_only = F("acceptStandardJsonOnly", bool)


class RegisterBrokerRequestHeader(Header):
    broker_name = F("brokerName", str, required=True)
    broker_addr = F("brokerAddr", str, required=True)
    cluster_name = F("clusterName", str, required=True)
    ha_server_addr = F("haServerAddr", str, required=True)
    broker_id = F("brokerId", int64, required=True)
    heartbeat_timeout_millis = F("heartbeatTimeoutMillis", int64)
    enable_acting_master = F("enableActingMaster", bool)
    compressed = F("compressed", bool, default=False)
    body_crc32 = F("bodyCrc32", int32, default=0)


class RegisterBrokerResponseHeader(Header):
    ha_server_addr = F("haServerAddr", str)
    master_addr = F("masterAddr", str)


class UnregisterBrokerRequestHeader(Header):
    broker_name = F("brokerName", str, required=True)
    broker_addr = F("brokerAddr", str, required=True)
    cluster_name = F("clusterName", str, required=True)
    broker_id = F("brokerId", int64, required=True)


class CreateTopicRequestHeader(Header):
    topic = F("topic", str, required=True)
    default_topic = F("defaultTopic", str, default="TBW102")
    read_queue_nums = F("readQueueNums", int32, required=True)
    write_queue_nums = F("writeQueueNums", int32, required=True)
    perm = F("perm", int32, required=True)
    topic_filter_type = F("topicFilterType", str, default="SINGLE_TAG")
    topic_sys_flag = F("topicSysFlag", int32, default=0)
    order = F("order", bool, default=False)
    attributes = F("attributes", str)


class DeleteTopicRequestHeader(Header):
    topic = F("topic", str, required=True)


class EndTransactionRequestHeader(Header):
    producer_group = F("producerGroup", str, required=True)
    tran_state_table_offset = F("tranStateTableOffset", int64, required=True)
    commit_log_offset = F("commitLogOffset", int64, required=True)
    commit_or_rollback = F("commitOrRollback", int32, required=True)
    from_transaction_check = F("fromTransactionCheck", bool, default=False)
    msg_id = F("msgId", str, required=True)
    transaction_id = F("transactionId", str)
    topic = F("topic", str)


class CheckTransactionStateRequestHeader(Header):
    tran_state_table_offset = F("tranStateTableOffset", int64, required=True)
    commit_log_offset = F("commitLogOffset", int64, required=True)
    msg_id = F("msgId", str)
    transaction_id = F("transactionId", str)
    offset_msg_id = F("offsetMsgId", str)
    topic = F("topic", str)


class GetTopicStatsInfoRequestHeader(Header):
    topic = F("topic", str, required=True)


class GetConsumerConnectionListRequestHeader(Header):
    consumer_group = F("consumerGroup", str, required=True)


class GetProducerConnectionListRequestHeader(Header):
    """GET_PRODUCER_CONNECTION_LIST (204): the live connections of one producer group."""

    producer_group = F("producerGroup", str, required=True)


class GetConsumeStatsRequestHeader(Header):
    consumer_group = F("consumerGroup", str, required=True)
    topic = F("topic", str)



class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) from an admin tool, RESET_CONSUMER_CLIENT_OFFSET (220) to clients:
    ``timestamp`` in ms, -1 meaning the queues' ends."""

    topic = F("topic", str, required=True)
    group = F("group", str, required=True)
    timestamp = F("timestamp", int64, required=True)
    is_force = F("isForce", bool, default=True)


class ResendDlqMessageRequestHeader(Header):
    """Project extension RESEND_DLQ_MESSAGE (9001): re-send one dead message of ``%DLQ%<group>``.

    The message is named by ``offset`` (commit-log offset) or ``msgId`` (offset message id or UNIQ_KEY);
    The target is ``%RETRY%<group>`` by default (only that group consumes it again; RETRY_TOPIC keeps the original
    topic), ``topic`` when given, or the original topic (RETRY_TOPIC) with ``toOriginalTopic=true``;
    ``queueId`` < 0 picks one. A letter resent before is refused unless ``force=true`` (the broker keeps an audit of
    resends: broker/managers/dlq_resends.py)."""

    group = F("group", str, required=True)
    offset = F("offset", int64)
    msg_id = F("msgId", str)
    topic = F("topic", str)
    queue_id = F("queueId", int32, default=-1)
    to_original_topic = F("toOriginalTopic", bool, default=False)
    force = F("force", bool, default=False)


class DeleteTopicFromNamesrvRequestHeader(Header):
    """DELETE_TOPIC_IN_NAMESRV (216); ``clusterName`` limits the deletion to that cluster's brokers."""

    topic = F("topic", str, required=True)
    cluster_name = F("clusterName", str)


class GetConsumerRunningInfoRequestHeader(Header):
    """GET_CONSUMER_RUNNING_INFO (307): the broker forwards it to one consumer of the group."""

    consumer_group = F("consumerGroup", str)
    client_id = F("clientId", str)
    jstack_enable = F("jstackEnable", bool, default=False)


class ConsumeMessageDirectlyRequestHeader(Header):
    """CONSUME_MESSAGE_DIRECTLY (309): one stored message (``msgId``, an offset message id) to one consumer."""

    consumer_group = F("consumerGroup", str)
    client_id = F("clientId", str)
    msg_id = F("msgId", str, default="")
    broker_name = F("brokerName", str)
    topic = F("topic", str)


class DeleteSubscriptionGroupRequestHeader(Header):
    group_name = F("groupName", str, required=True)
    clean_offset = F("cleanOffset", bool, default=False)


__all__ += [name for name, obj in list(globals().items()) if isinstance(obj, type) and issubclass(obj, Header) and obj is not Header]
