"""Delayed delivery, CONSUMER_SEND_MSG_BACK, DLQ, DLQ re-send and GET_ALL_DELAY_OFFSET against the real
broker process (short delay levels: level n = n * 100 ms)."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.broker_process import BrokerProcess
from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.ids import decode_offset_msg_id
from protocol.message import BatchEntry, encode_batch_body

from tests.support.wire import WireClient, props, pull_fields, records, send_v2_fields, wait_until

DELAY_LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms"


@pytest.fixture(scope="module")
def delay_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("delay"), "broker-delay",
                           extra={"messageDelayLevel": DELAY_LEVELS}).start()
    yield broker
    broker.stop()


@pytest.fixture
async def client(delay_broker):
    c = await WireClient.connect(delay_broker.addr)
    yield c
    await c.close()


async def send(client, topic, queue_id=0, body=b"hello", **properties):
    resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, queue_id, props(**properties)), body)
    assert resp.code == 0, resp.remark
    return resp


async def pull_all(client, topic, group, queue_id=0, offset=0):
    """Every record currently in the queue (non-suspending pulls)."""
    out = []
    for _ in range(100):
        resp = await client.request(RC.PULL_MESSAGE, pull_fields(topic, group, queue_id, offset, sys_flag=0x4,
                                                                  suspend_ms=0))
        if resp.code != R.SUCCESS:
            return out
        out.extend(records(resp.body))
        offset = int(resp.ext_fields["nextBeginOffset"])
    raise AssertionError("pull_all did not finish")


async def wait_records(client, topic, group, count, queue_id=0, timeout=10.0):
    async def enough():
        got = await pull_all(client, topic, group, queue_id)
        return got if len(got) >= count else None
    return await wait_until(enough, f"{count} record(s) in {topic}:{queue_id}", timeout=timeout, interval=0.03)


async def send_back(client, record, group, delay_level=0, **extra):
    fields = {"offset": str(record.physical_offset), "group": group, "delayLevel": str(delay_level)}
    fields.update({k: str(v) for k, v in extra.items()})
    return await client.request(RC.CONSUMER_SEND_MSG_BACK, fields)


async def test_producer_delayed_message_is_invisible_until_due(client):
    started = time.monotonic()
    resp = await send(client, "DelayTopic", 1, b"later", TAGS="TagD", DELAY="3")
    assert resp.ext_fields["queueId"] == "1"
    assert await pull_all(client, "DelayTopic", "delayGroup", 1) == []
    got = await wait_records(client, "DelayTopic", "delayGroup", 1, queue_id=1)
    assert time.monotonic() - started >= 0.25
    (record,) = got
    assert record.body == b"later" and record.topic == "DelayTopic" and record.queue_id == 1
    assert record.uniq_key == resp.ext_fields["transactionId"]
    assert "DELAY" not in record.properties and record.properties["REAL_TOPIC"] == "DelayTopic"
    assert record.properties["TAGS"] == "TagD" and record.reconsume_times == 0


async def test_level_above_maximum_is_clamped_and_tag_filter_still_applies(client):
    await send(client, "DelayClamp", 0, b"clamped", TAGS="TagX", DELAY="40")
    resp = await client.request(RC.PULL_MESSAGE, pull_fields("DelayClamp", "g", 0, 0, sys_flag=0x4, suspend_ms=0,
                                                              subscription="TagX"))
    assert resp.code != R.SUCCESS
    (record,) = await wait_records(client, "DelayClamp", "g", 1)
    assert record.body == b"clamped"
    resp = await client.request(RC.PULL_MESSAGE, pull_fields("DelayClamp", "g", 0, 0, sys_flag=0x4, suspend_ms=0,
                                                              subscription="TagY"))
    assert resp.code != R.SUCCESS


async def test_batch_with_delay_level_is_illegal(client):
    body = encode_batch_body([BatchEntry(0, b"a", props(UNIQ_KEY="A" * 32, DELAY="2"))])
    resp = await client.request(RC.SEND_BATCH_MESSAGE, send_v2_fields("DelayBatch", 0), body)
    assert resp.code == R.MESSAGE_ILLEGAL


async def test_three_send_backs_then_fourth_delivery_keeps_identity(client):
    group = "retryGroup3"
    sent = await send(client, "RetryTopic", 0, b"fail me", TAGS="T1", KEYS="order-1")
    uniq = sent.ext_fields["transactionId"]
    (current,) = await pull_all(client, "RetryTopic", group)
    origin_offset_id = current.offset_msg_id
    retry_topic = f"%RETRY%{group}"
    for attempt in range(1, 4):
        started = time.monotonic()
        resp = await send_back(client, current, group)  # offset, group, delayLevel only (minimal client)
        assert resp.code == 0, resp.remark
        got = await wait_records(client, retry_topic, group, attempt)
        current = got[attempt - 1]
        # delay level 3 + reconsumeTimes -> (3 + attempt - 1) * 100 ms
        assert time.monotonic() - started >= (2 + attempt) * 0.1 - 0.05
        assert current.topic == retry_topic and current.reconsume_times == attempt
    assert current.body == b"fail me" and current.uniq_key == uniq
    assert current.properties["RETRY_TOPIC"] == "RetryTopic"
    assert current.properties["ORIGIN_MESSAGE_ID"] == origin_offset_id
    assert current.properties["TAGS"] == "T1" and current.properties["KEYS"] == "order-1"
    assert "DELAY" not in current.properties


async def test_exceeding_max_reconsume_times_lands_in_dlq(client):
    group = "dlqGroup"
    await send(client, "DlqTopic", 0, b"poison")
    (current,) = await pull_all(client, "DlqTopic", group)
    for attempt in range(1, 3):
        resp = await send_back(client, current, group, maxReconsumeTimes=2)
        assert resp.code == 0, resp.remark
        current = (await wait_records(client, f"%RETRY%{group}", group, attempt))[-1]
    assert current.reconsume_times == 2
    resp = await send_back(client, current, group, maxReconsumeTimes=2)
    assert resp.code == 0, resp.remark
    (dead,) = await pull_all(client, f"%DLQ%{group}", group)  # no delay on the way to the DLQ
    assert dead.queue_id == 0 and dead.reconsume_times == 3 and dead.body == b"poison"
    assert dead.properties["RETRY_TOPIC"] == "DlqTopic" and "DELAY" not in dead.properties
    assert len(await pull_all(client, f"%RETRY%{group}", group)) == 2


async def test_negative_delay_level_goes_straight_to_dlq_and_resend_restores(client):
    group = "dlqDirect"
    sent = await send(client, "DlqDirectTopic", 2, b"dead on arrival", TAGS="Z")
    uniq = sent.ext_fields["transactionId"]
    (original,) = await pull_all(client, "DlqDirectTopic", group, 2)
    resp = await send_back(client, original, group, delay_level=-1)
    assert resp.code == 0, resp.remark
    (dead,) = await pull_all(client, f"%DLQ%{group}", group)
    assert dead.reconsume_times == 1 and dead.uniq_key == uniq

    # not in this group's DLQ -> not found
    missing = await client.request(RC.RESEND_DLQ_MESSAGE, {"group": "otherGroup", "msgId": uniq})
    assert missing.code == R.QUERY_NOT_FOUND
    to_retry = await client.request(RC.RESEND_DLQ_MESSAGE, {"group": group, "msgId": uniq})
    assert to_retry.code == 0, to_retry.remark
    assert to_retry.ext_fields["topic"] == f"%RETRY%{group}"  # the default: only this group gets it again
    (retried,) = await pull_all(client, f"%RETRY%{group}", group)
    assert retried.uniq_key == uniq and retried.reconsume_times == 0
    assert retried.properties["RETRY_TOPIC"] == "DlqDirectTopic"
    again = await client.request(RC.RESEND_DLQ_MESSAGE, {"group": group, "msgId": uniq, "toOriginalTopic": "true"})
    assert again.code == R.INVALID_PARAMETER and "already resent" in again.remark  # twice only on purpose
    assert again.ext_fields["resentCount"] == "1"
    resent = await client.request(RC.RESEND_DLQ_MESSAGE, {"group": group, "msgId": uniq, "queueId": "3",
                                                          "toOriginalTopic": "true", "force": "true"})
    assert resent.code == 0, resent.remark
    assert resent.ext_fields["topic"] == "DlqDirectTopic" and resent.ext_fields["queueId"] == "3"
    assert resent.ext_fields["uniqKey"] == uniq
    (back,) = await pull_all(client, "DlqDirectTopic", group, 3)
    assert back.body == b"dead on arrival" and back.uniq_key == uniq and back.reconsume_times == 0
    assert back.properties["TAGS"] == "Z"
    assert "RETRY_TOPIC" not in back.properties and "ORIGIN_MESSAGE_ID" not in back.properties
    assert decode_offset_msg_id(resent.ext_fields["msgId"])[2] == back.physical_offset
    by_offset = await client.request(RC.RESEND_DLQ_MESSAGE, {"group": group, "offset": str(dead.physical_offset),
                                                             "force": "true"})
    assert by_offset.code == 0, by_offset.remark
    by_offset_id = await client.request(RC.RESEND_DLQ_MESSAGE, {"group": group, "msgId": dead.offset_msg_id,
                                                                "force": "true"})
    assert by_offset_id.code == 0, by_offset_id.remark


async def test_send_back_of_unknown_offset_fails(client):
    resp = await client.request(RC.CONSUMER_SEND_MSG_BACK,
                                {"offset": str(10**12), "group": "g", "delayLevel": "0"})
    assert resp.code == R.SYSTEM_ERROR and "look message by offset failed" in resp.remark


async def test_retry_topic_send_above_max_goes_to_dlq(client):
    group = "sendDlq"
    fields = send_v2_fields(f"%RETRY%{group}", 0, props(UNIQ_KEY="B" * 32, DELAY="3"))
    fields.update({"j": "3", "l": "2"})  # reconsumeTimes 3 > maxReconsumeTimes 2
    resp = await client.request(RC.SEND_MESSAGE_V2, fields, b"too often")
    assert resp.code == 0, resp.remark
    (dead,) = await pull_all(client, f"%DLQ%{group}", group)
    assert dead.body == b"too often" and "DELAY" not in dead.properties


async def test_get_all_delay_offset_reports_progress(client):
    await send(client, "DelayOffsets", 0, b"x", DELAY="1")
    await wait_records(client, "DelayOffsets", "g", 1)
    resp = await client.request(RC.GET_ALL_DELAY_OFFSET, {})
    assert resp.code == 0
    table = json.loads(resp.body)["offsetTable"]
    assert int(table["1"]) >= 1


async def test_unknown_retry_group_is_rejected_without_auto_create(broker_factory):
    broker = broker_factory("broker-noauto", extra={"autoCreateSubscriptionGroup": "false",
                                                    "messageDelayLevel": DELAY_LEVELS})
    async with await WireClient.connect(broker.addr) as c:
        sent = await send(c, "NoAuto", 0, b"m")
        offset = decode_offset_msg_id(sent.ext_fields["msgId"])[2]
        resp = await c.request(RC.CONSUMER_SEND_MSG_BACK, {"offset": str(offset), "group": "ghost", "delayLevel": "0"})
        assert resp.code == R.SUBSCRIPTION_GROUP_NOT_EXIST
        resp = await c.request(RC.SEND_MESSAGE_V2, send_v2_fields("%RETRY%ghost", 0, props(UNIQ_KEY="C" * 32)), b"m")
        assert resp.code == R.SUBSCRIPTION_GROUP_NOT_EXIST
