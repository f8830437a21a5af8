"""broker/core/admin without a protocol: typed admin requests in, Outcomes out, against a real MessageStore and the
real topic, group, offset, consumer, producer and resend-audit registries in a temporary directory (no broker, no
network); and each request's needs() decided by the one Authorizer alike to the remoting table."""

from __future__ import annotations

import json

import pytest

from broker.acl.accounts import PUB, SUB, parse_acl_text
from broker.acl.authorizer import Authorizer, Principal
from broker.acl.resources import ADMIN_CODES, needed_resources
from broker.config import BrokerConfig
from broker.core.admin import (AdminService, AllProducersRequest, BrokerConfigRequest, ConsumeStatsRequest,
                               ConsumerConnectionRequest, ConsumerOffsetsRequest, DeleteSubscriptionGroupRequest,
                               DeleteTopicRequest, ProducerConnectionRequest, ResendDeadLetterRequest,
                               RuntimeInfoRequest, SubscriptionGroupsRequest, TopicConfigsRequest, TopicStatsRequest,
                               UpdateSubscriptionGroupRequest, UpdateTopicRequest)
from broker.core.outcome import Outcome, Requester
from broker.core.replication import ReplicationWaiter
from broker.core.send import SendService
from broker.core.send_back import SendBackService
from broker.managers.consumer_manager import ClientInfo, ConsumerManager
from broker.managers.consumer_offset import ConsumerOffsetManager
from broker.managers.dlq_resends import DlqResendLog
from broker.managers.producer_manager import ProducerManager
from broker.managers.subscription_group import SubscriptionGroupManager
from broker.managers.topic_config import PERM_READ, TopicConfigManager
from broker.store.message_store import MessageStore
from broker.store.types import MessageToStore
from protocol.bodies import MessageQueue, SubscriptionData
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config_bodies import SubscriptionGroupConfig
from protocol.ids import pack_host
from protocol.message import iter_records
from protocol.properties import encode_properties
from protocol.requests import read_request

OPERATOR = Requester("10.0.0.7:50000", "test", access_key="ops")


class State:
    """The broker-wide figures an AdminService reads (the BrokerView's two read methods)."""

    def runtime_info(self) -> dict[str, str]:
        return {"brokerVersionDesc": "test", "topicCount": "3"}

    def consume_tps(self, group: str) -> float:
        return 2.5 if group == "cg" else 0.0


class Channel:
    def __init__(self, remote_addr: str) -> None:
        self.remote_addr = remote_addr


class Parts:
    """The registries and store an AdminService is built with, as the Broker builds them."""

    def __init__(self, root) -> None:
        self.root = root
        self.config = BrokerConfig(broker_name="adminbroker", broker_cluster_name="AdminCluster",
                                   broker_ip1="127.0.0.1", listen_port=10911, namesrv_addr=None,
                                   store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 20,
                                   mapped_file_size_consume_queue=20_000, max_hash_slot_num=997, max_index_num=4000,
                                   secret_key="never-shown", access_key="rocketmq2")
        self.store = MessageStore(self.config.to_store_config())
        self.store.load()
        self.config_dir = str(root / "config")
        self.topics = TopicConfigManager(self.config, self.config_dir)
        self.groups = SubscriptionGroupManager(self.config_dir)
        self.offsets = ConsumerOffsetManager(self.config_dir)
        self.consumers = ConsumerManager()
        self.producers = ProducerManager()
        self.resends = DlqResendLog(self.config_dir)
        for table in (self.topics, self.groups, self.offsets, self.resends):
            table.load()  # as the Broker does: the topic registry journals its changes from then on
        store = self.store
        send = SendService(self.config, store, self.topics, self.groups, sync_flush=False,
                           replication=ReplicationWaiter(self.config, lambda: None, lambda: store.commit_log_max_offset),
                           remember_half=lambda *args: None, delay_max_level=lambda: 18)
        resender = SendBackService(self.config, store, self.topics, self.groups, send, self.resends)
        self.admin = AdminService(self.config, self.store, self.topics, self.groups, self.consumers, self.offsets,
                                  State(), self.producers, resender)

    async def put(self, topic: str, queue_id: int = 0, body: bytes = b"payload", **props: str):
        message = MessageToStore(topic, queue_id, 0, 0, 1_700_000_000_000, pack_host("127.0.0.1", 40000), 0, body,
                                 encode_properties({"UNIQ_KEY": f"U{body.hex()}", **props}), 0,
                                 uniq_key=f"U{body.hex()}")
        result = await self.store.put_message(message)
        assert result.ok
        return result

    def read(self, topic: str, queue_id: int) -> list:
        result = self.store.get_messages(topic, queue_id, 0, 100)
        return list(iter_records(result.body())) if result.message_count else []


@pytest.fixture
def parts(tmp_path):
    made = Parts(tmp_path)
    yield made
    made.store.close()


async def _done(result) -> Outcome:
    return result if type(result) is Outcome else await result


def _topic(topic: str = "Orders", read: int = 4, write: int = 4, perm: int = 6, **kw) -> UpdateTopicRequest:
    return UpdateTopicRequest(topic, read, write, perm, requester=OPERATOR, **kw)


# ---- topics -------------------------------------------------------------------------------------
def test_a_topic_is_created_replaced_and_persisted(parts):
    created = parts.admin.update_topic(_topic(order=True))
    assert created.ok and created.value.topic_name == "Orders" and created.value.order
    changed = parts.admin.update_topic(_topic(read=8, write=8, perm=PERM_READ, topic_filter_type="multi_tag"))
    assert changed.ok
    reloaded = TopicConfigManager(parts.config, parts.config_dir)
    reloaded.load()
    config = reloaded.get("Orders")
    assert (config.read_queue_nums, config.write_queue_nums, config.perm, config.topic_filter_type) == \
        (8, 8, PERM_READ, "MULTI_TAG")
    assert "Orders" in parts.admin.topic_configs(TopicConfigsRequest()).value["topicConfigTable"]


def test_topic_attributes_are_applied_to_the_current_ones(parts):
    assert parts.admin.update_topic(_topic(attributes="+message.type=FIFO")).ok
    assert parts.topics.get("Orders").attributes == {"message.type": "FIFO"}
    wrong = parts.admin.update_topic(_topic(attributes="+no.such.attribute=1"))
    assert wrong.code == ResponseCode.SYSTEM_ERROR and wrong.reason == "attributes"


@pytest.mark.parametrize("request_, remark", [
    (_topic("bad topic!"), "topic"),
    (_topic("AdminCluster"), "The topic[AdminCluster] is conflict with system topic."),
    (_topic("adminbroker"), "The topic[adminbroker] is conflict with system topic."),
    (_topic(read=0), "readQueueNums must be between 1 and 1024, got 0"),
    (_topic(write=1025), "writeQueueNums must be between 1 and 1024, got 1025"),
    (_topic(perm=16), "perm must be within 0..15, got 16"),
    (_topic(perm=-1), "perm must be within 0..15, got -1"),
])
def test_an_unusable_topic_is_refused_and_nothing_is_changed(parts, request_, remark):
    before = parts.topics.get(request_.topic)  # the cluster's and broker's own topics exist from the start
    outcome = parts.admin.update_topic(request_)
    assert outcome.code == ResponseCode.INVALID_PARAMETER and remark in outcome.remark
    assert parts.topics.get(request_.topic) is before


async def test_deleting_a_topic_removes_its_config_queues_and_offsets_durably(parts):
    parts.admin.update_topic(_topic())
    await parts.put("Orders", 1)
    parts.offsets.commit_offset("cg", "Orders", 1, 1)
    parts.offsets.commit_offset("cg", "Other", 0, 3)
    deleted = await parts.admin.delete_topic(DeleteTopicRequest("Orders", OPERATOR))
    assert deleted.ok and deleted.value is True
    assert parts.topics.get("Orders") is None and parts.store.get_max_offset("Orders", 1) == 0
    stored = json.loads((parts.root / "config" / "consumerOffset.json").read_text())
    assert not any(key.startswith("Orders@") for key in stored["offsetTable"])
    assert "Other@cg" in stored["offsetTable"]
    again = await parts.admin.delete_topic(DeleteTopicRequest("Orders", OPERATOR))
    assert again.ok and again.value is False  # nothing left: still answered SUCCESS, as the reference


@pytest.mark.parametrize("topic, remark", [("bad topic!", "topic"),
                                           ("SCHEDULE_TOPIC_XXXX", "is conflict with system topic")])
async def test_an_illegal_or_system_topic_is_not_deleted(parts, topic, remark):
    outcome = await parts.admin.delete_topic(DeleteTopicRequest(topic, OPERATOR))
    assert outcome.code == ResponseCode.INVALID_PARAMETER and remark in outcome.remark


async def test_topic_stats_name_each_queue_and_refuse_an_unknown_topic(parts):
    parts.admin.update_topic(_topic(read=2, write=3))
    await parts.put("Orders", 2)
    await parts.put("Orders", 2, b"second")
    stats = parts.admin.topic_stats(TopicStatsRequest("Orders"))
    assert stats.ok and len(stats.value.offset_table) == 3
    queue = stats.value.offset_table[MessageQueue("Orders", "adminbroker", 2)]
    assert (queue.min_offset, queue.max_offset) == (0, 2) and queue.last_update_timestamp > 0
    missing = parts.admin.topic_stats(TopicStatsRequest("Nope"))
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST and missing.remark == "topic[Nope] not exist"


# ---- consumer groups ----------------------------------------------------------------------------
async def test_consume_stats_give_each_queue_its_lag_and_the_group_rate(parts):
    parts.admin.update_topic(_topic(read=2, write=2))
    for body in (b"a", b"b", b"c"):
        await parts.put("Orders", 0, body)
    parts.offsets.commit_offset("cg", "Orders", 0, 1)
    stats = parts.admin.consume_stats(ConsumeStatsRequest("cg"))
    assert stats.ok and stats.value.consume_tps == 2.5
    queue0 = stats.value.offset_table[MessageQueue("Orders", "adminbroker", 0)]
    assert (queue0.broker_offset, queue0.consumer_offset, queue0.lag) == (3, 1, 2)
    assert len(stats.value.offset_table) == 2
    assert parts.admin.consume_stats(ConsumeStatsRequest("cg", "Missing")).value.offset_table == {}


def test_consumer_connections_only_of_an_online_group(parts):
    offline = parts.admin.consumer_connection(ConsumerConnectionRequest("cg"))
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE and offline.remark == "the consumer group[cg] not online"
    parts.consumers.register("cg", ClientInfo(Channel("10.0.0.9:1234"), "client-1", "JAVA", 453), "CONSUME_PASSIVELY",
                             "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [SubscriptionData("Orders", "TagA")])
    online = parts.admin.consumer_connection(ConsumerConnectionRequest("cg"))
    assert online.ok and [c.client_addr for c in online.value.connection_set] == ["10.0.0.9:1234"]
    assert online.value.subscription_table["Orders"].sub_string == "TagA"


async def test_a_subscription_group_is_created_and_persisted_before_the_answer(parts):
    config = SubscriptionGroupConfig("billing", retry_queue_nums=2, retry_max_times=5)
    created = await parts.admin.update_subscription_group(UpdateSubscriptionGroupRequest(config, OPERATOR))
    assert created.ok and created.value is False
    stored = json.loads((parts.root / "config" / "subscriptionGroup.json").read_text())
    assert stored["subscriptionGroupTable"]["billing"]["retryMaxTimes"] == 5
    replaced = await parts.admin.update_subscription_group(UpdateSubscriptionGroupRequest(config, OPERATOR))
    assert replaced.ok and replaced.value is True
    assert "billing" in parts.admin.subscription_groups(SubscriptionGroupsRequest()).value["subscriptionGroupTable"]


@pytest.mark.parametrize("config, remark", [
    (SubscriptionGroupConfig(""), "SubscriptionGroupConfig body needs 'groupName'"),
    (SubscriptionGroupConfig("bad group!"), "groupName: "),
    (SubscriptionGroupConfig("g" * 250), "groupName: "),
    (SubscriptionGroupConfig("billing", retry_queue_nums=1025), "retryQueueNums must be between 0 and 1024"),
    (SubscriptionGroupConfig("billing", retry_max_times=-2), "retryMaxTimes must be between -1 and"),
    (SubscriptionGroupConfig("billing", group_sys_flag=2**31), "groupSysFlag does not fit a Java int"),
    (SubscriptionGroupConfig("billing", broker_id=2**63), "brokerId does not fit a Java long"),
])
async def test_an_unusable_subscription_group_is_refused(parts, config, remark):
    outcome = await parts.admin.update_subscription_group(UpdateSubscriptionGroupRequest(config, OPERATOR))
    assert outcome.code == ResponseCode.INVALID_PARAMETER and outcome.remark.startswith(remark)
    assert parts.groups.find(config.group_name) is None


async def test_deleting_a_group_keeps_its_offsets_unless_asked(parts):
    for name in ("billing", "audit"):
        await parts.admin.update_subscription_group(
            UpdateSubscriptionGroupRequest(SubscriptionGroupConfig(name), OPERATOR))
        parts.offsets.commit_offset(name, "Orders", 0, 4)
    assert (await parts.admin.delete_subscription_group(DeleteSubscriptionGroupRequest("billing"))).ok
    assert parts.groups.find("billing") is None and parts.offsets.query_offset("billing", "Orders", 0) == 4
    assert (await parts.admin.delete_subscription_group(DeleteSubscriptionGroupRequest("audit", True))).ok
    assert parts.offsets.query_offset("audit", "Orders", 0) == -1
    stored = json.loads((parts.root / "config" / "consumerOffset.json").read_text())
    assert "Orders@audit" not in stored["offsetTable"]
    assert "Orders@billing" in parts.admin.consumer_offsets(ConsumerOffsetsRequest()).value["offsetTable"]


# ---- producers and the broker -------------------------------------------------------------------
def test_producer_connections_and_the_producer_table(parts):
    missing = parts.admin.producer_connection(ProducerConnectionRequest("pg"))
    assert missing.code == ResponseCode.SYSTEM_ERROR and missing.remark == "the producer group[pg] not exist"
    parts.producers.register("pg", ClientInfo(Channel("10.0.0.8:999"), "producer-1", "GO", 400))
    connection = parts.admin.producer_connection(ProducerConnectionRequest("pg"))
    assert [(c.client_id, c.client_addr, c.language) for c in connection.value.connection_set] == \
        [("producer-1", "10.0.0.8:999", "GO")]
    table = parts.admin.all_producers(AllProducersRequest()).value.data
    assert table["pg"][0]["remoteIP"] == "10.0.0.8:999"


def test_broker_config_never_hands_out_the_secret_and_runtime_info_is_the_states(parts):
    props = parts.admin.broker_config(BrokerConfigRequest()).value
    assert props["brokerName"] == "adminbroker" and props["accessKey"] == "rocketmq2" and "secretKey" not in props
    assert parts.admin.runtime_info(RuntimeInfoRequest()).value == State().runtime_info()


# ---- dead letters -------------------------------------------------------------------------------
async def _dead_letter(parts, body: bytes = b"dead") -> int:
    parts.admin.update_topic(_topic())
    parts.topics.create_dlq_topic("cg")
    result = await parts.put("%DLQ%cg", 0, body, RETRY_TOPIC="Orders", DELAY="3", RECONSUME_TIME="16")
    return result.physical_offset


async def test_a_dead_letter_is_resent_through_the_retry_topic_and_audited(parts):
    offset = await _dead_letter(parts)
    resent = await _done(parts.admin.resend_dead_letter(ResendDeadLetterRequest("cg", offset, requester=OPERATOR)))
    assert resent.ok and resent.value["topic"] == "%RETRY%cg" and resent.value["uniqKey"] == "U" + b"dead".hex()
    copy = parts.read("%RETRY%cg", int(resent.value["queueId"]))[0]
    assert copy.properties["RETRY_TOPIC"] == "Orders" and "DELAY" not in copy.properties
    assert copy.properties["CLUSTER"] == "AdminCluster" and copy.body == b"dead"
    assert parts.resends.last("cg", offset)["by"] == "ops@10.0.0.7:50000"

    twice = await _done(parts.admin.resend_dead_letter(ResendDeadLetterRequest("cg", offset, requester=OPERATOR)))
    assert twice.code == ResponseCode.INVALID_PARAMETER and "was already resent" in twice.remark
    assert twice.reason == "resent" and twice.value["resentBy"] == "ops@10.0.0.7:50000"
    forced = await _done(parts.admin.resend_dead_letter(
        ResendDeadLetterRequest("cg", msg_id="U" + b"dead".hex(), to_original_topic=True, queue_id=2, force=True)))
    assert forced.ok and (forced.value["topic"], forced.value["queueId"]) == ("Orders", "2")
    assert parts.resends.last("cg", offset)["count"] == 2


@pytest.mark.parametrize("make, code, remark", [
    (lambda o: ResendDeadLetterRequest("bad group!", o), ResponseCode.INVALID_PARAMETER, "group: "),
    (lambda o: ResendDeadLetterRequest("cg"), ResponseCode.INVALID_PARAMETER, "either 'offset' or 'msgId'"),
    (lambda o: ResendDeadLetterRequest("other", o), ResponseCode.QUERY_NOT_FOUND, "in %DLQ%other"),
    (lambda o: ResendDeadLetterRequest("cg", msg_id="nope"), ResponseCode.QUERY_NOT_FOUND, "no message nope"),
    (lambda o: ResendDeadLetterRequest("cg", o, topic="Absent"), ResponseCode.TOPIC_NOT_EXIST, "topic[Absent]"),
    (lambda o: ResendDeadLetterRequest("cg", o, topic="Orders", queue_id=4), ResponseCode.INVALID_PARAMETER,
     "queueId[4] is illegal"),
    (lambda o: ResendDeadLetterRequest("cg", o, topic="ReadOnly"), ResponseCode.NO_PERMISSION,
     "the topic[ReadOnly] sending message is forbidden"),
])
async def test_a_resend_that_cannot_be_done_is_refused_and_writes_nothing(parts, make, code, remark):
    offset = await _dead_letter(parts)
    parts.admin.update_topic(_topic("ReadOnly", perm=PERM_READ))
    max_before = parts.store.commit_log_max_offset
    outcome = await _done(parts.admin.resend_dead_letter(make(offset)))
    assert outcome.code == code and remark in outcome.remark
    assert parts.store.commit_log_max_offset == max_before and parts.resends.last("cg", offset) is None


# ---- what the one Authorizer decides on ---------------------------------------------------------
def _header(code: int, fields: dict[str, str]):
    return read_request(RemotingCommand.request(code, fields, b"", opaque=1))


@pytest.mark.parametrize("code, fields, typed", [
    (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"},
     _topic("T", 1, 1)),
    (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T"}, DeleteTopicRequest("T")),
    (RequestCode.GET_ALL_TOPIC_CONFIG, {}, TopicConfigsRequest()),
    (RequestCode.GET_TOPIC_STATS_INFO, {"topic": "T"}, TopicStatsRequest("T")),
    (RequestCode.GET_CONSUME_STATS, {"consumerGroup": "g", "topic": "T"}, ConsumeStatsRequest("g", "T")),
    (RequestCode.GET_CONSUME_STATS, {"consumerGroup": "g"}, ConsumeStatsRequest("g")),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g"}, ConsumerConnectionRequest("g")),
    (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, UpdateSubscriptionGroupRequest(SubscriptionGroupConfig("g"))),
    (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}, SubscriptionGroupsRequest()),
    (RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g"}, DeleteSubscriptionGroupRequest("g")),
    (RequestCode.GET_BROKER_RUNTIME_INFO, {}, RuntimeInfoRequest()),
    (RequestCode.GET_ALL_CONSUMER_OFFSET, {}, ConsumerOffsetsRequest()),
    (RequestCode.GET_BROKER_CONFIG, {}, BrokerConfigRequest()),
    (RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "pg"}, ProducerConnectionRequest("pg")),
    (RequestCode.GET_ALL_PRODUCER_INFO, {}, AllProducersRequest()),
    (RequestCode.RESEND_DLQ_MESSAGE, {"group": "g", "offset": "0"}, ResendDeadLetterRequest("g", 0)),
])
def test_each_request_needs_what_its_remoting_code_needs(parts, code, fields, typed):
    """The console's typed request and mqadmin's remoting request are decided alike."""
    parts.offsets.commit_offset("g", "Orders", 0, 1)  # the group-wide statistic reaches the group's topics
    records = _Lookups(parts)
    assert typed.admin_only == (code in ADMIN_CODES)
    assert typed.needs(records) == needed_resources(code, _header(code, fields), records)


class _Lookups:
    def __init__(self, parts) -> None:
        self.look_record = parts.store.look_record
        self._parts = parts

    def group_topics(self, group: str) -> set[str]:
        return {key.rpartition("@")[0] for key in self._parts.offsets.offset_table if key.endswith("@" + group)}


ACL = """
accounts:
  - accessKey: admin_key
    secretKey: admin_secret
    admin: true
  - accessKey: reader_key
    secretKey: reader_secret
    topicPerms: [Orders=SUB]
    groupPerms: [cg=SUB]
"""


@pytest.mark.parametrize("typed, admin_allowed, reader_allowed", [
    (_topic(), True, False),
    (DeleteTopicRequest("Orders"), True, False),
    (ResendDeadLetterRequest("cg", 0), True, False),
    (BrokerConfigRequest(), True, False),
    (ConsumerConnectionRequest("cg"), True, True),
    (ConsumerConnectionRequest("billing"), True, False),
    (ConsumeStatsRequest("cg", "Orders"), True, True),
    (TopicStatsRequest("Orders"), True, True),
    (TopicStatsRequest("Payments"), True, False),
])
def test_the_one_authorizer_decides_on_the_typed_request(typed, admin_allowed, reader_allowed):
    config = parse_acl_text(ACL)
    authorizer = Authorizer(config)
    for key, allowed in (("admin_key", admin_allowed), ("reader_key", reader_allowed)):
        refusal = authorizer.decide(Principal(key, config.accounts[key]), typed.needs(),
                                    admin_only=typed.admin_only, what="the request")
        assert (refusal is None) == allowed, (key, refusal)


def test_needs_name_the_group_as_its_retry_resource():
    assert ConsumerConnectionRequest("cg").needs() == [("%RETRY%cg", SUB)]
    assert ConsumeStatsRequest("cg", "Orders").needs() == [("Orders", SUB), ("%RETRY%cg", SUB)]
    assert TopicStatsRequest("Orders").needs() == [("Orders", PUB | SUB)]


def test_the_console_authorizes_a_typed_request_and_reads_its_outcome():
    from broker.console.access import ConsoleError, Viewer, outcome_value

    config = parse_acl_text(ACL)
    authorizer = Authorizer(config)
    admin = Viewer(authorizer, Principal("admin_key", config.accounts["admin_key"]))
    reader = Viewer(authorizer, Principal("reader_key", config.accounts["reader_key"]))
    admin.require_request(DeleteTopicRequest("Orders"), "deleting topic Orders")
    reader.require_request(ConsumerConnectionRequest("cg"), "reading consumer group cg")
    with pytest.raises(ConsoleError) as refused:
        reader.require_request(DeleteTopicRequest("Orders"), "deleting topic Orders")
    assert refused.value.status == 403 and "Need admin permission for deleting topic Orders" in refused.value.message
    Viewer.operator().require_request(DeleteTopicRequest("Orders"), "deleting topic Orders")  # ACL off

    assert outcome_value(Outcome.success(7)) == 7
    for code, status in ((ResponseCode.INVALID_PARAMETER, 400), (ResponseCode.SYSTEM_ERROR, 500)):
        with pytest.raises(ConsoleError) as failed:
            outcome_value(Outcome.refused(code, "why"))
        assert (failed.value.status, failed.value.message) == (status, f"why (code {int(code)})")
