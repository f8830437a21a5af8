"""ConsumerRunningInfo / ConsumeMessageDirectlyResult bodies: the reference's JSON shapes, read back."""

from protocol.bodies import MessageQueue
from protocol.consumer_info_bodies import (
    CMResult,
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ConsumeStatus,
    ProcessQueueInfo,
)


def test_running_info_writes_mq_table_keyed_by_queue_objects_and_reads_it_back():
    mq = MessageQueue("T", "broker-a", 3)
    info = ConsumerRunningInfo({"PROP_CONSUMEORDERLY": "true"}, [{"topic": "T", "subString": "*"}],
                               {mq: ProcessQueueInfo(commit_offset=7, cached_msg_count=2, locked=True)},
                               {"T": ConsumeStatus(consume_ok_tps=1.5)})
    raw = info.encode()
    assert b'"mqTable":{{"brokerName":"broker-a","queueId":3,"topic":"T"}:{' in raw
    assert b'"cachedMsgSizeInMiB":0' in raw and b'"droped":false' in raw
    back = ConsumerRunningInfo.decode(raw)
    assert back.mq_table[mq].commit_offset == 7 and back.mq_table[mq].locked is True
    assert back.properties == {"PROP_CONSUMEORDERLY": "true"} and back.status_table["T"].consume_ok_tps == 1.5


def test_direct_result_round_trip_and_unknown_result_names():
    raw = ConsumeMessageDirectlyResult(True, False, CMResult.CR_RETURN_NULL, "x", 12).encode()
    back = ConsumeMessageDirectlyResult.decode(raw)
    assert (back.order, back.auto_commit, back.consume_result, back.spent_time_mills) == (True, False,
                                                                                         CMResult.CR_RETURN_NULL, 12)
    assert ConsumeMessageDirectlyResult.decode(b'{"consumeResult":"CR_NEW_THING"}').consume_result is None
