"""A push consumer's answers to the broker's admin relays, as the reference client gives them.

GET_CONSUMER_RUNNING_INFO: the consumer's settings, subscriptions and, per assigned queue, what it holds (commit
offset, cached messages, lock). CONSUME_MESSAGE_DIRECTLY: run the listener on one message the broker sends (not
through the queue: no offset moves, nothing is sent back) and say what it returned.
"""

from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING

from client.consume_context import ConsumeConcurrentlyContext, ConsumeOrderlyContext
from client.message import ConsumeOrderlyResult, ConsumeResult, MessageExt, MessageQueue
from protocol.bodies import MessageQueue as QueueKey
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.consumer_info_bodies import (
    PROP_CLIENT_VERSION,
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    PROP_CONSUMER_START_TIMESTAMP,
    PROP_NAMESERVER_ADDR,
    PROP_THREADPOOL_CORE_SIZE,
    CMResult,
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ProcessQueueInfo,
)
from protocol.message import RecordError, decode_record

if TYPE_CHECKING:
    from client.push_consumer import PushConsumer

__all__ = ["running_info", "consume_message_directly"]

CLIENT_VERSION = "V4_9_7"  # the reference release whose semantics this client follows

_RESULTS = {
    ConsumeResult.SUCCESS: CMResult.CR_SUCCESS,
    ConsumeResult.RECONSUME_LATER: CMResult.CR_LATER,
    ConsumeOrderlyResult.SUCCESS: CMResult.CR_SUCCESS,
    ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT: CMResult.CR_LATER,
    ConsumeOrderlyResult.COMMIT: CMResult.CR_COMMIT,
    ConsumeOrderlyResult.ROLLBACK: CMResult.CR_ROLLBACK,
}


def _wall_ms(monotonic_at: float) -> int:
    if not monotonic_at:
        return 0
    return int((time.time() - (time.monotonic() - monotonic_at)) * 1000)


def running_info(consumer: "PushConsumer") -> ConsumerRunningInfo:
    """The reference's ConsumerRunningInfo of this consumer."""
    props = {
        "consumerGroup": consumer.group,
        "messageModel": consumer.message_model,
        "consumeFromWhere": consumer.consume_from_where,
        "consumeThreadMax": consumer.consume_thread_max,
        "consumeMessageBatchMaxSize": consumer.consume_message_batch_max_size,
        "pullBatchSize": consumer.pull_batch_size,
        "pullThresholdForQueue": consumer.pull_threshold_for_queue,
        "maxReconsumeTimes": consumer.max_reconsume_times,
        "consumeTimeout": consumer.consume_timeout,
        "suspendCurrentQueueTimeMillis": consumer.suspend_current_queue_time_millis,
        "allocateMessageQueueStrategy": repr(consumer.allocate_strategy),
        PROP_NAMESERVER_ADDR: ";".join(consumer.namesrv_addrs),
        PROP_CONSUME_TYPE: "CONSUME_PASSIVELY",
        PROP_CONSUME_ORDERLY: str(consumer.orderly).lower(),
        PROP_THREADPOOL_CORE_SIZE: consumer.consume_thread_max,
        PROP_CLIENT_VERSION: CLIENT_VERSION,
        PROP_CONSUMER_START_TIMESTAMP: consumer.start_timestamp_ms,
    }
    subs = consumer.subscription_data()
    table: dict[QueueKey, ProcessQueueInfo] = {}
    store = consumer.offset_store
    for mq, pq in consumer.process_queues.items():
        table[QueueKey(mq.topic, mq.broker_name, mq.queue_id)] = ProcessQueueInfo(
            commit_offset=store.read(mq) if store is not None else -1,
            cached_msg_min_offset=pq.order[0] if pq.order else 0,
            cached_msg_max_offset=pq.max_offset_seen if pq.inflight else 0,
            cached_msg_count=len(pq.inflight),
            cached_msg_size_in_mib=pq.cached_bytes // (1024 * 1024),
            locked=pq.locked, last_lock_timestamp=_wall_ms(pq.last_lock_time), droped=pq.dropped,
            last_pull_timestamp=_wall_ms(pq.last_pull_time),
        )
    return ConsumerRunningInfo({k: str(v) for k, v in props.items()}, subs, table)


async def consume_message_directly(consumer: "PushConsumer", cmd: RemotingCommand) -> RemotingCommand:
    """Run the listener on the message in cmd's body and report its result (ConsumeMessageDirectlyResult)."""
    if not consumer.consuming:
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, "the consumer is not started")
    try:
        record = decode_record(cmd.body)
    except (RecordError, ValueError) as exc:
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"unreadable message in the request body: {exc}")
    broker_name = (cmd.ext_fields or {}).get("brokerName")
    msg = MessageExt(record, str(broker_name) if broker_name else None)
    original = msg.properties.get("RETRY_TOPIC")
    if original and msg.topic.startswith("%RETRY%"):
        msg.topic = original
    mq = MessageQueue(msg.topic, msg.broker_name or "", msg.queue_id)
    context = ConsumeOrderlyContext(mq) if consumer.orderly else ConsumeConcurrentlyContext(mq)
    outcome = ConsumeMessageDirectlyResult(order=consumer.orderly)
    started = time.monotonic()
    try:
        result = await consumer.call_listener([msg], context)
    except Exception as exc:
        outcome.consume_result = CMResult.CR_THROW_EXCEPTION
        outcome.remark = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    else:
        if result is None:
            outcome.consume_result = CMResult.CR_RETURN_NULL
        else:
            outcome.consume_result = _RESULTS.get(result, CMResult.CR_LATER)
        outcome.remark = f"listener returned {getattr(result, 'name', result)}"
    outcome.spent_time_mills = int((time.monotonic() - started) * 1000)
    if isinstance(context, ConsumeOrderlyContext):
        outcome.auto_commit = context.auto_commit
    return cmd.make_response(ResponseCode.SUCCESS, None, None, outcome.encode())
