"""Group names follow the reference client's rules (^[%|a-zA-Z0-9_-]+$, at most 255 characters) on every request
that carries one; a bad name is refused with a remark naming it and never becomes a persisted group."""

from __future__ import annotations

import json

import pytest

from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R

from tests.support.wire import WireClient, pull_fields, send_v2_fields

SUB = 0x4
BAD_GROUPS = ["bad.group", "with space", "semi;colon", "x" * 256, "tab\tgroup", "trailing-newline\n", "ümlaut", " "]
# 248: the longest consumer group whose %RETRY% topic fits 255 characters (longer ones, to 255, are good producer
# groups only: test_validation_derived_names.py)
GOOD_GROUPS = ["g", "a_b-c", "%RETRY%someGroup", "ns%group", "pipe|group", "x" * 248]


def _heartbeat_body(client_id: str, consumer_group: str | None = None, producer_group: str | None = None) -> bytes:
    consumers = []
    if consumer_group is not None:
        consumers.append({"groupName": consumer_group, "consumeType": "CONSUME_PASSIVELY",
                          "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                          "subscriptionDataSet": [], "unitMode": False})
    producers = [{"groupName": producer_group}] if producer_group is not None else []
    return json.dumps({"clientID": client_id, "consumerDataSet": consumers, "producerDataSet": producers}).encode()


def _requests(group: str, topic: str) -> dict[str, tuple[int, dict, bytes]]:
    lock_body = json.dumps({"consumerGroup": group, "clientId": "127.0.0.1@v", "mqSet": [
        {"topic": topic, "brokerName": "broker-shared", "queueId": 0}]}).encode()
    return {
        "heartbeat consumer": (RC.HEART_BEAT, {}, _heartbeat_body("127.0.0.1@v", consumer_group=group)),
        "heartbeat producer": (RC.HEART_BEAT, {}, _heartbeat_body("127.0.0.1@v", producer_group=group)),
        "send": (RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0, group=group), b"body"),
        "pull": (RC.PULL_MESSAGE, pull_fields(topic, group, 0, 0, sys_flag=SUB), b""),
        "query offset": (RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": "0"}, b""),
        "update offset": (RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": "0",
                                                      "commitOffset": "0"}, b""),
        "send back": (RC.CONSUMER_SEND_MSG_BACK, {"offset": "0", "group": group, "delayLevel": "1"}, b""),
        "lock": (RC.LOCK_BATCH_MQ, {}, lock_body),
        "unlock": (RC.UNLOCK_BATCH_MQ, {}, lock_body),
        "unregister": (RC.UNREGISTER_CLIENT, {"clientID": "127.0.0.1@v", "consumerGroup": group}, b""),
        "create group": (RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, json.dumps({"groupName": group}).encode()),
    }


async def _groups_on_broker(client: WireClient) -> set[str]:
    listed = await client.request(RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert listed.code == 0
    return set(json.loads(listed.body)["subscriptionGroupTable"])


@pytest.mark.parametrize("group", BAD_GROUPS, ids=lambda g: repr(g[:20]))
async def test_bad_group_names_are_refused_everywhere_and_never_persisted(shared_broker, group):
    topic = "GroupNameTopic"
    async with await WireClient.connect(shared_broker.addr) as client:
        seeded = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0), b"seed")
        assert seeded.code == 0, seeded.remark
        for what, (code, ext, body) in _requests(group, topic).items():
            response = await client.request(code, ext, body)
            assert response.code == R.INVALID_PARAMETER, (what, response.code, response.remark)
            assert "the specified group" in response.remark, (what, response.remark)
        assert group not in await _groups_on_broker(client)
    assert "Traceback" not in shared_broker.log_text()


async def test_good_group_names_pass_every_request(shared_broker):
    topic = "GroupNameTopic"
    async with await WireClient.connect(shared_broker.addr) as client:
        seeded = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0), b"seed")
        assert seeded.code == 0, seeded.remark
        for group in GOOD_GROUPS:
            for what, (code, ext, body) in _requests(group, topic).items():
                response = await client.request(code, ext, body)
                assert response.code != R.INVALID_PARAMETER or "group" not in (response.remark or ""), \
                    (group[:20], what, response.remark)


async def test_one_bad_group_refuses_the_whole_heartbeat_naming_it(shared_broker):
    async with await WireClient.connect(shared_broker.addr) as client:
        body = json.loads(_heartbeat_body("127.0.0.1@mixed", consumer_group="fineGroup"))
        body["consumerDataSet"].append(dict(body["consumerDataSet"][0], groupName="not.fine"))
        response = await client.request(RC.HEART_BEAT, {}, json.dumps(body).encode())
        assert response.code == R.INVALID_PARAMETER
        assert "the specified group[not.fine] contains illegal characters" in response.remark
        listed = await client.request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "fineGroup"})
        assert listed.code != 0  # nothing of the refused heartbeat was registered


@pytest.mark.parametrize("field,value", [("retryQueueNums", 2**70), ("retryQueueNums", 100_000), ("retryQueueNums", -1),
                                         ("retryMaxTimes", -2), ("retryMaxTimes", 2**31),
                                         ("groupSysFlag", 2**40), ("brokerId", 2**64)])
async def test_group_config_numbers_a_java_field_cannot_hold_are_refused(shared_broker, field, value):
    """retryQueueNums becomes the retry topic's queue count and groupSysFlag goes back to every pulling client as
    a Java int: 2^70 of either would break things far from the request that set it."""
    group = f"cfgRange_{field}"
    async with await WireClient.connect(shared_broker.addr) as client:
        body = json.dumps({"groupName": group, field: value}).encode()
        response = await client.request(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
        assert response.code == R.INVALID_PARAMETER and field in response.remark, response.remark
        assert group not in await _groups_on_broker(client)
