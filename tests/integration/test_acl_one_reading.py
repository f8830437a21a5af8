"""Issue 27's ACL findings against the real broker process: each attack, and the allowed account's control.

The broker reads a request once (protocol.requests.read_request) and the authorizer judges that reading, so V2's
short names on SEND_MESSAGE, msgpack bytes values and records named by offset can no longer slip past it; group
operations need the group; whole-broker listings need an admin.
"""

from __future__ import annotations

import json

import pytest

from protocol.acl_signature import sign
from protocol.codes import RequestCode, ResponseCode, SerializeType
from protocol.ids import decode_offset_msg_id

from tests.support.acl import ADMIN, APP, assert_refused, signed, write_acl
from tests.support.wire import WireClient, pull_fields, send_v1_fields, send_v2_fields

CREATE = {"defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
          "topicFilterType": "SINGLE_TAG"}


@pytest.fixture
def acl_broker(broker_factory, tmp_path):
    write_acl(tmp_path / "plain_acl.yml")  # app_key01: Orders=PUB|SUB, Reports=SUB, other topics DENY, billing=DENY
    return broker_factory(extra={"aclEnable": "true", "autoCreateTopicEnable": "true"})


async def _admin_send(client: WireClient, topic: str, body: bytes) -> int:
    """Send as the admin; the record's commit-log offset."""
    sent = await signed(client, RequestCode.SEND_MESSAGE_V2, send_v2_fields(topic), body, creds=ADMIN)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    return decode_offset_msg_id(sent.ext_fields["msgId"])[2]


async def test_send_v1_with_short_names_and_bytes_values_are_judged_as_stored(acl_broker):
    async with await WireClient.connect(acl_broker.addr) as client:
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            # V2's short names (b = topic) on either code: the topic the handler would store to is the one judged
            assert_refused(await signed(client, code, send_v2_fields("Secret"), b"x"),
                           "No PUB permission for topic:Secret, accessKey=app_key01 has DENY")
            assert_refused(await signed(client, code, send_v2_fields("Reports"), b"x"),
                           "No PUB permission for topic:Reports, accessKey=app_key01 has SUB")
            ok = await signed(client, code, send_v2_fields("Orders"), b"x")
            assert ok.code == ResponseCode.SUCCESS, ok.remark
        # msgpack values as bytes: the handler reads b"Secret" as "Secret", and so does the authorizer
        as_bytes = {k: v.encode() for k, v in send_v1_fields("Secret").items()}
        fields = dict(as_bytes, AccessKey=APP[0])
        fields["Signature"] = sign(APP[1], fields, b"x")
        refused = await client.request(RequestCode.SEND_MESSAGE, fields, b"x", serialize_type=SerializeType.MSGPACK)
        assert_refused(refused, "No PUB permission for topic:Secret, accessKey=app_key01 has DENY")
        pull = {k: v.encode() for k, v in pull_fields("Secret", "orders_cg", sys_flag=0).items()}
        fields = dict(pull, AccessKey=APP[0])
        fields["Signature"] = sign(APP[1], fields, b"")
        refused = await client.request(RequestCode.PULL_MESSAGE, fields, serialize_type=SerializeType.MSGPACK)
        assert_refused(refused, "No SUB permission for topic:Secret, accessKey=app_key01 has DENY")
        control = {k: v.encode() for k, v in send_v1_fields("Orders").items()}
        fields = dict(control, AccessKey=APP[0])
        fields["Signature"] = sign(APP[1], fields, b"x")
        ok = await client.request(RequestCode.SEND_MESSAGE, fields, b"x", serialize_type=SerializeType.MSGPACK)
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        # fields newer clients add (5.x: bname, and ones this broker does not know yet) are signed and accepted
        newer = dict(send_v2_fields("Orders"), n=acl_broker.name, bname=acl_broker.name, futureField="x")
        ok = await signed(client, RequestCode.SEND_MESSAGE_V2, newer, b"x")
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        ok = await signed(client, RequestCode.PULL_MESSAGE, dict(pull_fields("Orders", "orders_cg", sys_flag=0),
                                                                 bname=acl_broker.name))
        assert ok.code in (ResponseCode.SUCCESS, 19, 20, 21, 22, 24), (ok.code, ok.remark)
        # no topic was auto-created by a refused send
        listed = await signed(client, RequestCode.GET_ALL_TOPIC_CONFIG, {}, creds=ADMIN)
        assert listed.code == ResponseCode.SUCCESS and b'"Secret"' not in listed.body
    assert "Traceback" not in acl_broker.log_text()


async def test_records_named_by_offset_need_their_topic(acl_broker):
    async with await WireClient.connect(acl_broker.addr) as client:
        secret = await _admin_send(client, "Secret", b"payroll of the board")
        mine = await _admin_send(client, "Orders", b"an order")
        # VIEW_MESSAGE_BY_ID walks the log by offset: only records of readable topics
        assert_refused(await signed(client, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(secret)}),
                       "No SUB permission for topic:Secret, accessKey=app_key01 has DENY")
        viewed = await signed(client, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(mine)})
        assert viewed.code == ResponseCode.SUCCESS and b"an order" in viewed.body
        # send-back copies the record into the caller's %RETRY% topic: only a record the caller may read
        back = {"group": "orders_cg", "delayLevel": "1", "originTopic": "Orders"}
        assert_refused(await signed(client, RequestCode.CONSUMER_SEND_MSG_BACK, dict(back, offset=str(secret))),
                       "No SUB permission for topic:Secret, accessKey=app_key01 has DENY")
        sent_back = await signed(client, RequestCode.CONSUMER_SEND_MSG_BACK, dict(back, offset=str(mine)))
        assert sent_back.code == ResponseCode.SUCCESS, sent_back.remark
        # the admin may view anything (control)
        viewed = await signed(client, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(secret)}, creds=ADMIN)
        assert viewed.code == ResponseCode.SUCCESS and b"payroll" in viewed.body


async def test_group_operations_need_the_group_and_listings_need_an_admin(acl_broker):
    async with await WireClient.connect(acl_broker.addr) as client:
        await _admin_send(client, "Orders", b"an order")
        reset = {"topic": "Orders", "timestamp": "-1", "isForce": "true"}
        assert_refused(await signed(client, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, dict(reset, group="billing")),
                       "No SUB permission for group:billing, accessKey=app_key01 has DENY")
        ok = await signed(client, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, dict(reset, group="orders_cg"))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        lock = json.dumps({"consumerGroup": "billing", "clientId": "thief", "onlyThisBroker": True,
                           "mqSet": [{"topic": "Orders", "brokerName": acl_broker.name, "queueId": 0}]}).encode()
        assert_refused(await signed(client, RequestCode.LOCK_BATCH_MQ, {}, lock),
                       "No SUB permission for group:billing, accessKey=app_key01 has DENY")
        locked = await signed(client, RequestCode.LOCK_BATCH_MQ, {}, lock.replace(b"billing", b"orders_cg"))
        assert locked.code == ResponseCode.SUCCESS and b"Orders" in locked.body, locked.remark
        query = {"topic": "Orders", "queueId": "0"}
        assert_refused(await signed(client, RequestCode.QUERY_CONSUMER_OFFSET, dict(query, consumerGroup="billing")),
                       "No SUB permission for group:billing, accessKey=app_key01 has DENY")
        assert_refused(await signed(client, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "billing"}),
                       "No SUB permission for group:billing, accessKey=app_key01 has DENY")
        assert_refused(await signed(client, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "billing"}),
                       "No SUB permission for group:billing, accessKey=app_key01 has DENY")
        for code in (RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_BROKER_CONFIG,
                     RequestCode.GET_BROKER_RUNTIME_INFO, RequestCode.GET_ALL_CONSUMER_OFFSET,
                     RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG):
            assert_refused(await signed(client, code, {}),
                           f"Need admin permission for request code={code}, but accessKey=app_key01 is not")
            allowed = await signed(client, code, {}, creds=ADMIN)
            assert allowed.code == ResponseCode.SUCCESS, (code, allowed.remark)
        # a topic's offsets need PUB or SUB on it
        assert_refused(await signed(client, RequestCode.GET_MAX_OFFSET, {"topic": "Secret", "queueId": "0"}),
                       "No PUB or SUB permission for topic:Secret, accessKey=app_key01 has DENY")
        ok = await signed(client, RequestCode.GET_MAX_OFFSET, {"topic": "Orders", "queueId": "0"})
        assert ok.code == ResponseCode.SUCCESS, ok.remark
    assert "Traceback" not in acl_broker.log_text()


def _large_heartbeat(groups: list[str]) -> bytes:
    """A heartbeat of many consumer groups (about 1 MB): read off the event loop, judged like a small one."""
    return json.dumps({"clientID": "big-client", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "Orders", "subString": "*", "tagsSet": [], "codeSet": [],
                                 "subVersion": 1, "expressionType": "TAG"}]} for group in groups]}).encode()


async def test_a_large_heartbeat_is_judged_whole(acl_broker):
    groups = [f"cg_{i:05d}" for i in range(4000)]
    async with await WireClient.connect(acl_broker.addr) as client:
        refused_body = _large_heartbeat(groups[:2000] + ["billing"] + groups[2000:])
        assert len(refused_body) > 64 * 1024
        assert_refused(await signed(client, RequestCode.HEART_BEAT, {}, refused_body),
                       "No SUB permission for group:billing, accessKey=app_key01 has DENY")
        ok = await signed(client, RequestCode.HEART_BEAT, {}, _large_heartbeat(groups))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        listed = await signed(client, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg_03999"})
        assert listed.code == ResponseCode.SUCCESS and b"big-client" in listed.body, listed.remark
        listed = await signed(client, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "billing"})
        assert_refused(listed, "No SUB permission for group:billing, accessKey=app_key01 has DENY")
