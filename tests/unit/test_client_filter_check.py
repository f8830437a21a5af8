"""CHECK_CLIENT_CONFIG from the client (ConsumerOps.check_client_config) against a fake instance: which brokers are
asked, what the body carries, and how refusals and transport failures surface."""

import json

import pytest

from client.consumer_ops import ConsumerOps
from client.errors import MQClientError, RemotingTimeoutError, SubscriptionCheckError
from client.message import MessageSelector
from protocol.codes import RequestCode, ResponseCode

from tests.support.client_fakes import FakeInstance


async def test_sql_subscription_is_checked_on_every_master_of_the_topic():
    instance = FakeInstance()
    ops = ConsumerOps(instance, "g1")
    await ops.check_client_config("T", MessageSelector.sql("a > 1"))
    assert [addr for addr, _ in instance.calls] == ["10.0.0.1:10911", "10.0.0.2:10911"]
    cmd = instance.calls[0][1]
    assert cmd.code == RequestCode.CHECK_CLIENT_CONFIG
    body = json.loads(cmd.body)
    assert body["clientId"] == "127.0.0.1@fake" and body["group"] == "g1"
    sub = body["subscriptionData"]
    assert sub["topic"] == "T" and sub["subString"] == "a > 1" and sub["expressionType"] == "SQL92"
    assert sub["tagsSet"] == [] and sub["codeSet"] == [] and sub["subVersion"] > 0


async def test_tag_subscriptions_and_unrouted_topics_are_not_checked():
    instance = FakeInstance()
    ops = ConsumerOps(instance, "g1")
    await ops.check_client_config("T", MessageSelector.tag("TagA || TagB"))
    await ops.check_client_config("Unknown", MessageSelector.sql("a > 1"))
    assert instance.calls == []


async def test_a_refusal_carries_the_brokers_code_and_remark():
    remark = "unexpected 'LIKE' after a complete expression at column 3; expected AND, OR"
    instance = FakeInstance({"10.0.0.2:10911": (ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark)})
    with pytest.raises(SubscriptionCheckError) as failed:
        await ConsumerOps(instance, "g1").check_client_config("T", MessageSelector.sql("a LIKE 'x%'"))
    err = failed.value
    assert err.code == 23 and err.remark == remark and err.addr == "10.0.0.2:10911"
    assert remark in str(err) and "'g1'" in str(err) and "'T'" in str(err) and "a LIKE" in str(err)
    huge = MessageSelector.sql("a = '" + "x" * 5000 + "'")
    instance = FakeInstance({"10.0.0.1:10911": (ResponseCode.SYSTEM_ERROR, "enablePropertyFilter=false")})
    with pytest.raises(SubscriptionCheckError) as failed:
        await ConsumerOps(instance, "g1").check_client_config("T", huge)
    assert failed.value.code == 1 and len(str(failed.value)) < 500  # the selector is clipped in the message


async def test_an_unreachable_broker_fails_the_check():
    instance = FakeInstance({"10.0.0.1:10911": RemotingTimeoutError("no answer")})
    with pytest.raises(MQClientError, match="cannot check the SQL92 subscription .* no answer"):
        await ConsumerOps(instance, "g1").check_client_config("T", MessageSelector.sql("a > 1"))
