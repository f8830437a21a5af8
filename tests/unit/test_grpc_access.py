"""The gRPC endpoint's access table and session owners (broker/grpc/access.py), without a broker: every RPC of the
service has an entry, each entry names what its handler reads from the request, and a client id stays with the
account that uses it. (Against the real broker process: tests/integration/test_grpc_acl.py.)"""

from __future__ import annotations

import hashlib
import hmac
import time

import pytest

from broker.acl.accounts import PUB, SUB, parse_acl_text
from broker.acl.authorizer import ANY_ACCESS, Authorizer
from broker.grpc.access import NEEDS, ClientOwners, GrpcAccess, needs_of
from broker.grpc.service import MessagingService
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb

T, G = pb.Resource(name="Orders"), pb.Resource(name="shop")
CONSUMER = [("Orders", SUB), ("%RETRY%shop", SUB)]


def test_every_rpc_of_the_service_has_an_entry_and_a_handler():
    rpcs = {m.name for m in spb.DESCRIPTOR.services_by_name["MessagingService"].methods}
    assert set(NEEDS) == rpcs
    for rpc in rpcs:  # each RPC is served by our class, not by the generated "unimplemented" base
        assert rpc in vars(MessagingService), rpc


@pytest.mark.parametrize(("rpc", "request_", "expected"), [
    ("QueryRoute", spb.QueryRouteRequest(topic=T), [("Orders", ANY_ACCESS)]),
    ("Heartbeat", spb.HeartbeatRequest(group=G, client_type=pb.SIMPLE_CONSUMER), [("%RETRY%shop", SUB)]),
    ("Heartbeat", spb.HeartbeatRequest(client_type=pb.PRODUCER), []),
    ("SendMessage", spb.SendMessageRequest(messages=[pb.Message(topic=T), pb.Message(topic=pb.Resource(
        name="Secrets")), pb.Message(topic=T)]), [("Orders", PUB), ("Secrets", PUB)]),
    ("QueryAssignment", spb.QueryAssignmentRequest(topic=T, group=G), CONSUMER),
    ("ReceiveMessage", spb.ReceiveMessageRequest(group=G, message_queue=pb.MessageQueue(topic=T)), CONSUMER),
    ("AckMessage", spb.AckMessageRequest(group=G, topic=T), CONSUMER),
    ("ChangeInvisibleDuration", spb.ChangeInvisibleDurationRequest(group=G, topic=T), CONSUMER),
    ("ForwardMessageToDeadLetterQueue", spb.ForwardMessageToDeadLetterQueueRequest(group=G, topic=T), CONSUMER),
    ("EndTransaction", spb.EndTransactionRequest(topic=T), [("Orders", PUB)]),
    ("RecallMessage", spb.RecallMessageRequest(topic=T), [("Orders", PUB)]),
    ("NotifyClientTermination", spb.NotifyClientTerminationRequest(group=G), [("%RETRY%shop", SUB)]),
    ("NotifyClientTermination", spb.NotifyClientTerminationRequest(), []),
    ("Telemetry", spb.TelemetryCommand(settings=pb.Settings(publishing=pb.Publishing(topics=[T, T]))),
     [("Orders", PUB)]),
    ("Telemetry", spb.TelemetryCommand(settings=pb.Settings(subscription=pb.Subscription(
        group=G, subscriptions=[pb.SubscriptionEntry(topic=T), pb.SubscriptionEntry(topic=pb.Resource(
            name="Refunds"))]))), [("%RETRY%shop", SUB), ("Orders", SUB), ("Refunds", SUB)]),
    ("Telemetry", spb.TelemetryCommand(status=pb.Status(code=pb.OK)), []),
])
def test_each_rpc_needs_what_its_request_names(rpc, request_, expected):
    assert needs_of(rpc, request_) == expected


def test_a_retry_topic_is_its_groups_resource():
    """The remoting rule (broker/acl/resources.py): sending to or reading %RETRY%g needs SUB on group g."""
    retry = pb.Resource(name="%RETRY%billing")
    assert needs_of("SendMessage", spb.SendMessageRequest(messages=[pb.Message(topic=retry)])) == \
        [("%RETRY%billing", SUB)]
    assert needs_of("ReceiveMessage", spb.ReceiveMessageRequest(group=pb.Resource(name="billing"), message_queue=(
        pb.MessageQueue(topic=retry)))) == [("%RETRY%billing", SUB)]


def test_a_client_id_stays_with_its_account_until_it_goes_quiet():
    now = [1000.0]
    owners = ClientOwners(idle_s=120, clock=lambda: now[0])
    assert owners.claim("host@1@1@a", "shop") is None
    refusal = owners.claim("host@1@1@a", "other")
    assert refusal is not None and "another account" in refusal and "shop" in refusal
    now[0] += 100
    assert owners.claim("host@1@1@a", "shop") is None  # the owner's calls keep it
    now[0] += 100
    assert owners.claim("host@1@1@a", "other") is not None
    now[0] += 121  # silent past the idle time: the broker counts the client gone
    assert owners.claim("host@1@1@a", "other") is None
    owners.release("host@1@1@a")
    assert owners.claim("host@1@1@a", "shop") is None


def test_owners_forget_clients_gone_quiet():
    now = [0.0]
    owners = ClientOwners(idle_s=10, clock=lambda: now[0])
    for i in range(5000):
        owners.claim(f"c{i}", "shop")
        now[0] += 0.01  # 50 s in all: most went quiet
    assert len(owners._owners) < 2100


class _Context:
    def __init__(self, metadata: tuple) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> tuple:
        return self.metadata

    def peer(self) -> str:
        return "ipv4:192.0.2.7:40000"


def _signed(access_key: str, secret: str, date: str) -> _Context:
    signature = hmac.new(secret.encode(), date.encode(), hashlib.sha1).hexdigest().upper()  # Node sends upper case
    return _Context((("x-mq-client-id", "c@1"), ("x-mq-date-time", date),
                     ("authorization", f"MQv2-HMAC-SHA1 Credential={access_key}/20261128/x, "
                                       f"SignedHeaders=x-mq-date-time, Signature={signature}")))


ACL = """
accounts:
  - accessKey: shop_ak
    secretKey: shop-secret
    defaultTopicPerm: DENY
    topicPerms: [Orders=PUB|SUB]
"""


def test_authentication_needs_a_fresh_signed_date():
    access = GrpcAccess(Authorizer(parse_acl_text(ACL), time_tolerance_s=60), client_idle_s=120)
    fmt = "%Y%m%dT%H%M%SZ"
    fresh = time.strftime(fmt, time.gmtime(time.time() - 30))
    caller, refused = access.authenticate(_signed("shop_ak", "shop-secret", fresh), "QueryRoute")
    assert refused is None and caller.identity == "shop_ak"
    for date, text in [(time.strftime(fmt, time.gmtime(time.time() - 120)), "aclTimeToleranceSeconds=60"),
                       (time.strftime(fmt, time.gmtime(time.time() + 120)), "aclTimeToleranceSeconds=60"),
                       ("20010909T014640Z", "aclTimeToleranceSeconds=60"), ("x", "not a time")]:
        caller, refused = access.authenticate(_signed("shop_ak", "shop-secret", date), "QueryRoute")
        assert caller is None and refused.code == pb.UNAUTHORIZED and text in refused.message, (date, refused)
    caller, refused = access.authenticate(_signed("shop_ak", "wrong", fresh), "QueryRoute")
    assert caller is None and "signature" in refused.message
    caller, refused = access.authenticate(_Context((("x-mq-client-id", "c@1"),)), "NotifyClientTermination")
    assert caller is None and "No accessKey" in refused.message


def test_without_acl_everything_passes_and_no_session_is_bound():
    access = GrpcAccess(None, client_idle_s=120)
    assert access.admit("NotifyClientTermination", spb.NotifyClientTerminationRequest(),
                        _Context((("x-mq-client-id", "c@1"),)), "c@1") == (None, None)
