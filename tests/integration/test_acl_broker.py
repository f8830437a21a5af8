"""Plain ACL against the real broker: signed requests by hand (protocol.acl_signature.sign) over raw TCP."""

from __future__ import annotations

import json

import pytest
from tests.support.broker_process import NamesrvProcess

from protocol.codes import RequestCode, ResponseCode

from tests.support.acl import ADMIN, assert_refused, signed, write_acl
from tests.support.wire import WireClient, pull_fields, send_v2_fields, wait_until

def heartbeat_body(group: str, topic: str) -> bytes:
    return json.dumps({"clientID": "acl-client", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [],
                                 "subVersion": 1, "expressionType": "TAG"}]}]}).encode()


@pytest.fixture
def acl_broker(broker_factory, tmp_path):
    write_acl(tmp_path / "plain_acl.yml")  # the default aclFile: beside the broker's .conf
    return broker_factory(extra={"aclEnable": "true"})


async def test_requests_are_judged_by_account_signature_and_permission(acl_broker):
    async with await WireClient.connect(acl_broker.addr) as client:
        ok = await signed(client, RequestCode.SEND_MESSAGE_V2, send_v2_fields("Orders"), b"hello")
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        # every refusal: code 1, a remark saying why, and the connection stays open
        assert_refused(await client.request(RequestCode.SEND_MESSAGE_V2, send_v2_fields("Orders"), b"x"),
                       "No accessKey is configured (request code=310 from 127.0.0.1 is not signed)")
        assert_refused(await signed(client, RequestCode.SEND_MESSAGE_V2, send_v2_fields("Orders"), b"x",
                                    creds=("stranger1", "whatever1")),
                       "No acl config for stranger1 (unknown accessKey)")
        assert_refused(await signed(client, RequestCode.SEND_MESSAGE_V2, send_v2_fields("Orders"), b"x",
                                    creds=("app_key01", "wrong-secret")),
                       "Check signature failed for accessKey=app_key01")
        assert_refused(await signed(client, RequestCode.SEND_MESSAGE_V2, send_v2_fields("Reports"), b"x"),
                       "No PUB permission for topic:Reports, accessKey=app_key01 has SUB")
        assert_refused(await signed(client, RequestCode.SEND_MESSAGE_V2, send_v2_fields("Payroll"), b"x"),
                       "No PUB permission for topic:Payroll, accessKey=app_key01 has DENY")
        assert_refused(await signed(client, RequestCode.PULL_MESSAGE, pull_fields("Orders", "billing")),
                       "No SUB permission for group:billing, accessKey=app_key01 has DENY")
        assert_refused(await signed(client, RequestCode.HEART_BEAT, {}, heartbeat_body("billing", "Orders")),
                       "No SUB permission for group:billing, accessKey=app_key01 has DENY")
        assert_refused(await signed(client, RequestCode.HEART_BEAT, {}, heartbeat_body("orders_cg", "Payroll")),
                       "No SUB permission for topic:Payroll, accessKey=app_key01 has DENY")
        assert_refused(await signed(client, RequestCode.UPDATE_AND_CREATE_TOPIC,
                                    {"topic": "Orders", "defaultTopic": "TBW102", "readQueueNums": "4",
                                     "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG"}),
                       "Need admin permission for request code=17, but accessKey=app_key01 is not")
        # allowed: subscribe with a group, pull, an admin's topic creation, a white-listed account unsigned
        hb = await signed(client, RequestCode.HEART_BEAT, {}, heartbeat_body("orders_cg", "Orders"))
        assert hb.code == ResponseCode.SUCCESS, hb.remark
        pulled = await signed(client, RequestCode.PULL_MESSAGE, pull_fields("Orders", "orders_cg", queue_id=0))
        assert pulled.code in (ResponseCode.SUCCESS, 19, 20, 21, 22), (pulled.code, pulled.remark)
        created = await signed(client, RequestCode.UPDATE_AND_CREATE_TOPIC,
                               {"topic": "AdminMade", "defaultTopic": "TBW102", "readQueueNums": "4",
                                "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG"}, creds=ADMIN)
        assert created.code == ResponseCode.SUCCESS, created.remark
        white = await client.request(RequestCode.SEND_MESSAGE_V2, dict(send_v2_fields("Payroll"), AccessKey="white_key1"),
                                     b"unsigned but white-listed")
        assert white.code == ResponseCode.SUCCESS, white.remark
    assert acl_broker.proc.poll() is None
    assert "Traceback" not in acl_broker.log_text()


async def test_acl_off_by_default(broker):
    async with await WireClient.connect(broker.addr) as client:
        resp = await client.request(RequestCode.SEND_MESSAGE_V2, send_v2_fields("Payroll"), b"open")
        assert resp.code == ResponseCode.SUCCESS, resp.remark


REGISTER_EXT = {"brokerName": "hijacker", "brokerAddr": "10.6.6.6:10911", "clusterName": "DefaultCluster",
                "haServerAddr": "10.6.6.6:10912", "brokerId": "0"}


async def test_name_server_refuses_unsigned_or_non_admin_registration(acl_broker):
    async with await WireClient.connect(acl_broker.namesrv_addr) as ns:
        assert_refused(await ns.request(RequestCode.REGISTER_BROKER, REGISTER_EXT),
                       "No accessKey is configured (request code=103 from 127.0.0.1 is not signed)")
        assert_refused(await signed(ns, RequestCode.REGISTER_BROKER, REGISTER_EXT),
                       "Need admin permission for request code=103, but accessKey=app_key01 is not")
        assert_refused(await signed(ns, RequestCode.UNREGISTER_BROKER, REGISTER_EXT),
                       "Need admin permission for request code=104, but accessKey=app_key01 is not")
        assert_refused(await ns.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Orders"}),
                       "No accessKey is configured (request code=216 from 127.0.0.1 is not signed)")
        cluster = await ns.request(RequestCode.GET_BROKER_CLUSTER_INFO, {})  # queries stay open, unsigned
        assert cluster.code == ResponseCode.SUCCESS and b"hijacker" not in cluster.body
        admin = await signed(ns, RequestCode.REGISTER_BROKER, REGISTER_EXT, creds=ADMIN)
        assert admin.code == ResponseCode.SUCCESS, admin.remark
        cluster = await ns.request(RequestCode.GET_BROKER_CLUSTER_INFO, {})
        assert b"hijacker" in cluster.body


async def test_topic_listing_needs_a_signed_request_like_any_read(acl_broker):
    async with await WireClient.connect(acl_broker.namesrv_addr) as ns:
        assert_refused(await ns.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}),
                       "No accessKey is configured (request code=206 from 127.0.0.1 is not signed)")
        assert_refused(await signed(ns, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {},
                                    creds=("app_key01", "wrong-secret")),
                       "Check signature failed for accessKey=app_key01")
        listed = await signed(ns, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})  # any account, not only admin
        assert listed.code == ResponseCode.SUCCESS, listed.remark
        assert "topicList" in json.loads(listed.body)
        route = await ns.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})  # lookups stay open
        assert route.code == ResponseCode.SUCCESS, route.remark
    async with await WireClient.connect(acl_broker.addr) as broker:  # the broker's listings too
        assert_refused(await broker.request(RequestCode.GET_ALL_TOPIC_CONFIG, {}),
                       "No accessKey is configured (request code=21 from 127.0.0.1 is not signed)")
    from tests.support.admin import mqadmin

    unsigned = mqadmin(acl_broker.namesrv_addr, "topicList")
    assert unsigned.returncode != 0 and "No accessKey is configured" in unsigned.stderr


@pytest.mark.slow
async def test_changed_file_is_reloaded_and_a_malformed_one_keeps_the_accounts(acl_broker, tmp_path):
    acl_path = tmp_path / "plain_acl.yml"
    async with await WireClient.connect(acl_broker.addr) as client:
        denied = await signed(client, RequestCode.SEND_MESSAGE_V2, send_v2_fields("Reports"), b"r")
        assert denied.code == ResponseCode.SYSTEM_ERROR
        write_acl(acl_path, reports="PUB|SUB")

        async def reports_allowed():
            resp = await signed(client, RequestCode.SEND_MESSAGE_V2, send_v2_fields("Reports"), b"r")
            return resp.code == ResponseCode.SUCCESS
        await wait_until(reports_allowed, "the changed plain_acl.yml to be applied", timeout=15)

        acl_path.write_text("accounts:\n  - accessKey: short\n    secretKey: x\n")  # does not load
        async def reload_failed():
            return "ACL file reload failed" in acl_broker.log_text()
        await wait_until(reload_failed, "the reload error", timeout=15)
        resp = await signed(client, RequestCode.SEND_MESSAGE_V2, send_v2_fields("Reports"), b"r")
        assert resp.code == ResponseCode.SUCCESS, resp.remark  # the previous accounts are still in force
    lines = [line for line in acl_broker.log_text().splitlines() if "ACL file reload failed" in line]
    assert len(lines) == 1 and "accessKey must be longer than 6 characters" in lines[0], lines


@pytest.mark.parametrize("content,fragment", [
    (None, "cannot read"),
    ("accounts:\n  - accessKey: tiny\n    secretKey: secret12\n", "accessKey must be longer than 6 characters"),
])
def test_unusable_acl_file_stops_start_up_with_one_line(broker_factory, tmp_path, content, fragment):
    acl_path = tmp_path / "custom_acl.yml"
    if content is not None:
        acl_path.write_text(content)
    broker = broker_factory(start=False, extra={"aclEnable": "true", "aclFile": "custom_acl.yml"})
    with pytest.raises(RuntimeError):
        broker.start(timeout=20)
    assert broker.proc.returncode == 2
    lines = [line for line in broker.log_text().splitlines() if "aclFile" in line]
    assert len(lines) == 1 and lines[0].startswith("mqbroker: key 'aclFile': ") and str(acl_path) in lines[0], lines
    assert fragment in lines[0] and "Traceback" not in broker.log_text()


@pytest.mark.slow
async def test_broker_signs_its_registration_to_a_name_server_with_acl(broker_factory, tmp_path):
    """A standalone mqnamesrv with aclEnable: the broker with accessKey/secretKey gets its routes in."""
    write_acl(tmp_path / "plain_acl.yml")
    namesrv = NamesrvProcess(workdir=tmp_path, conf={"aclEnable": "true"})
    try:
        addr = namesrv.addr
        broker_factory("signed", embedded_namesrv=False, namesrv_addr=addr,
                       extra={"accessKey": ADMIN[0], "secretKey": ADMIN[1]})
        broker_factory("unsigned", embedded_namesrv=False, namesrv_addr=addr)
        async with await WireClient.connect(addr) as ns:
            async def registered():
                resp = await ns.request(RequestCode.GET_BROKER_CLUSTER_INFO, {})
                return resp.code == ResponseCode.SUCCESS and b"signed" in resp.body
            await wait_until(registered, "the signed broker's registration", timeout=20)
            resp = await ns.request(RequestCode.GET_BROKER_CLUSTER_INFO, {})
            assert b'"unsigned"' not in resp.body
    finally:
        namesrv.stop()
