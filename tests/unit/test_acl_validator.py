"""The request-code resource table and the validator's order of evaluation (broker/acl)."""

from __future__ import annotations

import json

import pytest

from broker.acl.accounts import PUB, SUB, parse_acl_text
from broker.acl.resources import needed_resources
from broker.acl.validator import AclValidator
from protocol.acl_signature import sign
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.requests import read_request

ACL = """
globalWhiteRemoteAddresses: ['10.1.1.*']
accounts:
  - accessKey: admin_key1
    secretKey: admin_secret1
    admin: true
  - accessKey: app_key01
    secretKey: app_secret01
    whiteRemoteAddress: 10.9.9.9
    defaultGroupPerm: SUB
    topicPerms: [OrderEvents=PUB|SUB, AuditLog=PUB, Reports=SUB]
    groupPerms: [billing=DENY]
  - accessKey: listed_admin
    secretKey: listed_secret
    admin: true
    topicPerms: [OnlyThis=PUB]
"""


def signed(code, ext, body=b"", key="app_key01", secret="app_secret01", version=479):
    fields = dict(ext, AccessKey=key)
    fields["Signature"] = sign(secret, fields, body)
    cmd = RemotingCommand.request(code, fields, body, opaque=1)
    cmd.version = version
    return cmd


@pytest.fixture
def validator():
    return AclValidator(parse_acl_text(ACL))


SEND = {"producerGroup": "pg", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "queueId": "0",
        "sysFlag": "0", "bornTimestamp": "0", "flag": "0"}
SEND_V2 = {"a": "pg", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0"}
PULL = {"queueId": "0", "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "0"}
OFFSET = {"queueId": "0", "commitOffset": "0"}


def _read(code, ext, body=b""):
    return read_request(RemotingCommand.request(code, ext, body, opaque=1))


@pytest.mark.parametrize("code,ext,needs", [
    (RequestCode.SEND_MESSAGE, dict(SEND, topic="T"), [("T", PUB)]),
    (RequestCode.SEND_MESSAGE, dict(SEND_V2, b="T"), [("T", PUB)]),  # V2's short names on code 10: read as V2
    (RequestCode.SEND_MESSAGE_V2, dict(SEND_V2, b="T"), [("T", PUB)]),
    (RequestCode.SEND_BATCH_MESSAGE, dict(SEND_V2, b="T"), [("T", PUB)]),
    (RequestCode.RECALL_MESSAGE, {"topic": "T", "recallHandle": "h"}, [("T", PUB)]),
    (RequestCode.SEND_MESSAGE_V2, dict(SEND_V2, b="%RETRY%g"), [("%RETRY%g", SUB)]),
    (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "g", "offset": "1", "delayLevel": "0"}, [("%RETRY%g", SUB)]),
    (RequestCode.PULL_MESSAGE, dict(PULL, topic="T", consumerGroup="g"), [("T", SUB), ("%RETRY%g", SUB)]),
    (RequestCode.PULL_MESSAGE, dict(PULL, topic="%RETRY%g", consumerGroup="g"), [("%RETRY%g", SUB)]),
    (RequestCode.QUERY_MESSAGE, {"topic": "T", "key": "k", "maxNum": "1", "beginTimestamp": "0",
                                 "endTimestamp": "1"}, [("T", SUB)]),
    (RequestCode.UNREGISTER_CLIENT, {"clientID": "c"}, []),
    (RequestCode.UNREGISTER_CLIENT, {"clientID": "c", "consumerGroup": "g"}, [("%RETRY%g", SUB)]),
    (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g"}, [("%RETRY%g", SUB)]),
    (RequestCode.UPDATE_CONSUMER_OFFSET, dict(OFFSET, consumerGroup="g", topic="T"), [("T", SUB), ("%RETRY%g", SUB)]),
    (RequestCode.QUERY_CONSUMER_OFFSET, dict(OFFSET, consumerGroup="g", topic="T"), [("T", SUB), ("%RETRY%g", SUB)]),
    (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"group": "g", "topic": "T", "timestamp": "-1"},
     [("T", SUB), ("%RETRY%g", SUB)]),
    (RequestCode.GET_CONSUME_STATS, {"consumerGroup": "g"}, [("%RETRY%g", SUB)]),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g"}, [("%RETRY%g", SUB)]),
    (RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "0"}, [("T", PUB | SUB)]),
    (RequestCode.GET_TOPIC_STATS_INFO, {"topic": "T"}, [("T", PUB | SUB)]),
    (RequestCode.GET_ALL_TOPIC_CONFIG, {}, []),
])
def test_resource_table(code, ext, needs):
    assert needed_resources(code, _read(code, ext)) == needs


def test_heartbeat_and_lock_bodies_need_each_group_and_topic():
    body = json.dumps({"clientID": "c", "producerDataSet": [{"groupName": "pg"}], "consumerDataSet": [
        {"groupName": "g", "subscriptionDataSet": [{"topic": "T", "subString": "*"},
                                                    {"topic": "%RETRY%g", "subString": "*"}]}]}).encode()
    assert needed_resources(RequestCode.HEART_BEAT, _read(RequestCode.HEART_BEAT, {}, body)) == \
        [("%RETRY%g", SUB), ("T", SUB), ("%RETRY%g", SUB)]
    lock = json.dumps({"consumerGroup": "g", "clientId": "c", "mqSet": [
        {"topic": "T", "brokerName": "b", "queueId": 0}, {"topic": "T", "brokerName": "b", "queueId": 1},
        {"topic": "U", "brokerName": "b", "queueId": 0}]}).encode()
    for code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        assert needed_resources(code, _read(code, {}, lock)) == [("%RETRY%g", SUB), ("T", SUB), ("U", SUB)]


class _Records:
    """A store stand-in answering look_record for the offset-addressed requests."""

    def __init__(self, records):
        self.records = records

    def look_record(self, offset):
        return self.records.get(offset)


def test_offset_addressed_requests_need_the_records_topic():
    class Rec:
        def __init__(self, topic, properties=None):
            self.topic, self.properties = topic, properties or {}
    records = _Records({100: Rec("Secret"), 200: Rec("RMQ_SYS_TRANS_HALF_TOPIC", {"REAL_TOPIC": "Orders"}),
                        300: Rec("%RETRY%other")})
    view = _read(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "100"})
    assert needed_resources(RequestCode.VIEW_MESSAGE_BY_ID, view, records) == [("Secret", SUB)]
    assert needed_resources(RequestCode.VIEW_MESSAGE_BY_ID, _read(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "7"}),
                            records) == []
    back = _read(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "g", "offset": "300", "delayLevel": "1"})
    assert needed_resources(RequestCode.CONSUMER_SEND_MSG_BACK, back, records) == [("%RETRY%g", SUB),
                                                                                   ("%RETRY%other", SUB)]
    end = _read(RequestCode.END_TRANSACTION, {"producerGroup": "pg", "tranStateTableOffset": "0",
                                              "commitLogOffset": "200", "commitOrRollback": "8", "msgId": "m"})
    assert needed_resources(RequestCode.END_TRANSACTION, end, records) == [("Orders", PUB)]


def test_order_global_white_list_needs_nothing(validator):
    cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "X"}, opaque=1)
    assert validator.verify(cmd, "10.1.1.5") is None
    assert validator.verify(cmd, "::ffff:10.1.1.5") is None


def test_order_missing_and_unknown_access_key(validator):
    unsigned = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "OrderEvents"}, opaque=1)
    assert validator.verify(unsigned, "127.0.0.1") == (
        ResponseCode.SYSTEM_ERROR, "AclException: No accessKey is configured (request code=10 from 127.0.0.1 is not signed)")
    stranger = signed(RequestCode.SEND_MESSAGE, dict(SEND, topic="OrderEvents"), key="stranger1", secret="whatever1")
    assert validator.verify(stranger, "127.0.0.1")[1] == "AclException: No acl config for stranger1 (unknown accessKey)"
    empty = signed(RequestCode.SEND_MESSAGE, {"topic": "OrderEvents"}, key="", secret="")
    assert "No acl config for " in validator.verify(empty, "127.0.0.1")[1]


def test_order_account_white_list_skips_signature_and_admin(validator):
    cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                  {"AccessKey": "app_key01", "topic": "Payroll"}, opaque=1)
    assert validator.verify(cmd, "10.9.9.9") is None
    assert "Check signature failed for accessKey=app_key01" in validator.verify(cmd, "10.9.9.8")[1]


def test_signature_covers_fields_and_body(validator):
    cmd = signed(RequestCode.SEND_MESSAGE, dict(SEND, topic="OrderEvents"), b"hello")
    assert validator.verify(cmd, "127.0.0.1") is None
    cmd.body = b"hellO"
    assert validator.verify(cmd, "127.0.0.1")[1] == "AclException: Check signature failed for accessKey=app_key01"
    cmd = signed(RequestCode.SEND_MESSAGE, dict(SEND, topic="OrderEvents"), b"hello")
    cmd.ext_fields["topic"] = "AuditLog"
    assert "Check signature failed" in validator.verify(cmd, "127.0.0.1")[1]


def test_unique_key_query_excluded_only_for_old_clients(validator):
    ext = {"topic": "Reports", "key": "K", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": "1"}
    old = signed(RequestCode.QUERY_MESSAGE, ext, version=399)  # signed without the flag, which is then added
    old.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
    assert validator.verify(old, "127.0.0.1") is None
    new = signed(RequestCode.QUERY_MESSAGE, dict(ext, _UNIQUE_KEY_QUERY="true"), version=401)
    assert validator.verify(new, "127.0.0.1") is None
    new_unsigned_flag = signed(RequestCode.QUERY_MESSAGE, ext, version=401)
    new_unsigned_flag.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
    assert "Check signature failed" in validator.verify(new_unsigned_flag, "127.0.0.1")[1]


def test_admin_codes(validator):
    cmd = signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "OrderEvents"})
    assert validator.verify(cmd, "127.0.0.1")[1] == ("AclException: Need admin permission for request code=17, "
                                                     "but accessKey=app_key01 is not")
    admin = signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Anything", "readQueueNums": "4", "writeQueueNums": "4",
                                                         "perm": "6"}, key="admin_key1", secret="admin_secret1")
    assert validator.verify(admin, "127.0.0.1") is None
    dlq = signed(RequestCode.RESEND_DLQ_MESSAGE, {"group": "g"})
    assert "Need admin permission for request code=9001" in validator.verify(dlq, "127.0.0.1")[1]


def test_permissions(validator):
    ok = [(RequestCode.SEND_MESSAGE, dict(SEND, topic="AuditLog")),
          (RequestCode.PULL_MESSAGE, dict(PULL, topic="OrderEvents", consumerGroup="g")),
          (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "g", "offset": "0", "delayLevel": "0"})]
    for code, ext in ok:
        assert validator.verify(signed(code, ext), "127.0.0.1") is None, (code, ext)
    denied = [
        (RequestCode.SEND_MESSAGE, dict(SEND, topic="Reports"), "No PUB permission for topic:Reports, accessKey=app_key01 has SUB"),
        (RequestCode.SEND_MESSAGE, dict(SEND, topic="Elsewhere"), "No PUB permission for topic:Elsewhere, accessKey=app_key01 has DENY"),
        (RequestCode.PULL_MESSAGE, dict(PULL, topic="AuditLog", consumerGroup="g"), "No SUB permission for topic:AuditLog, accessKey=app_key01 has PUB"),
        (RequestCode.PULL_MESSAGE, dict(PULL, topic="OrderEvents", consumerGroup="billing"),
         "No SUB permission for group:billing, accessKey=app_key01 has DENY"),
    ]
    for code, ext, remark in denied:
        refusal = validator.verify(signed(code, ext), "127.0.0.1")
        assert refusal == (ResponseCode.SYSTEM_ERROR, "AclException: " + remark), refusal


def test_admin_with_lists_is_restricted_to_them(validator):
    def send(topic):
        return validator.verify(signed(RequestCode.SEND_MESSAGE, dict(SEND, topic=topic), key="listed_admin",
                                       secret="listed_secret"), "127.0.0.1")
    assert send("OnlyThis") is None
    assert "No PUB permission for topic:Other" in send("Other")[1]
    unrestricted = signed(RequestCode.SEND_MESSAGE, dict(SEND, topic="Other"), key="admin_key1", secret="admin_secret1")
    assert validator.verify(unrestricted, "127.0.0.1") is None


def test_trace_sends_always_pass_after_authentication(validator):
    cmd = signed(RequestCode.SEND_MESSAGE_V2, dict(SEND_V2, b="RMQ_SYS_TRACE_TOPIC"))
    assert validator.verify(cmd, "127.0.0.1") is None


def test_malformed_heartbeat_is_refused_with_a_remark(validator):
    refusal = validator.verify(signed(RequestCode.HEART_BEAT, {}, b"{not json"), "127.0.0.1")
    assert refusal[0] == ResponseCode.INVALID_PARAMETER and "malformed heartbeat body" in refusal[1]


def test_reload_swaps_accounts(validator):
    cmd = signed(RequestCode.SEND_MESSAGE, dict(SEND, topic="OrderEvents"))
    assert validator.verify(cmd, "127.0.0.1") is None
    validator.update(parse_acl_text("accounts: []\n"))
    assert "No acl config for app_key01" in validator.verify(cmd, "127.0.0.1")[1]


def test_namesrv_admin_codes(validator):
    ext = {"brokerName": "b", "brokerAddr": "1.2.3.4:10911", "clusterName": "c", "brokerId": "0"}
    unsigned = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, opaque=1)
    assert "No accessKey is configured" in validator.verify_admin(unsigned, "127.0.0.1")[1]
    app = signed(RequestCode.REGISTER_BROKER, ext)
    assert "Need admin permission for request code=103" in validator.verify_admin(app, "127.0.0.1")[1]
    admin = signed(RequestCode.UNREGISTER_BROKER, ext, key="admin_key1", secret="admin_secret1")
    assert validator.verify_admin(admin, "127.0.0.1") is None
    route = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, opaque=1)
    assert validator.verify_admin(route, "127.0.0.1") is None  # route queries stay open, as in the reference
