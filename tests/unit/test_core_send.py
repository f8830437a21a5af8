"""broker/core/send.py and broker/core/transaction.py without a protocol: typed requests in, Outcomes out, against a
real MessageStore, topic and group registries in a temporary directory (no broker, no network)."""

from __future__ import annotations

import time

import pytest

from broker.acl.accounts import PUB, SUB
from broker.core.outcome import Outcome, Requester
from broker.core.send import (REASON_BODY_TOO_LARGE, REASON_DELIVERY_TIME, REASON_ILLEGAL_TOPIC,
                              REASON_PROPERTIES_TOO_LARGE, Message, SendRequest)
from broker.core.transaction import EndTransactionRequest, REASON_NOT_THIS_TRANSACTION
from broker.transaction.service import COMMIT, ROLLBACK, UNKNOWN
from protocol.codes import PERM_READ, ResponseCode
from protocol.properties import encode_properties
from tests.support.core_parts import CoreParts

REQUESTER = Requester("127.0.0.1:40000", "test")


class Core(CoreParts):
    """The send and end-transaction services over a real store, as the Broker builds them (tests/support)."""


async def _done(result) -> Outcome:
    return result if type(result) is Outcome else await result


def message(body: bytes = b"hello", **props: str) -> Message:
    return Message(body, encode_properties({"TAGS": "TagA", **props}))


@pytest.fixture
def core(tmp_path):
    made = Core(tmp_path)
    yield made
    made.store.close()


# ---- one message ---------------------------------------------------------------------------------------------------
async def test_a_single_send_is_stored_and_answered_with_where_it_went(core):
    core.create("Orders")
    outcome = core.send.send(SendRequest("Orders", [message(UNIQ_KEY="U1")], 2, "pg", REQUESTER))
    assert type(outcome) is Outcome  # ASYNC_FLUSH, nothing to wait for: answered at once
    assert outcome.ok and outcome.value.queue_id == 2 and outcome.value.queue_offset == 0
    assert outcome.value.transaction_id == "U1" and len(outcome.value.msg_ids) == 1
    [record] = core.read("Orders", 2)
    assert record.body == b"hello" and record.properties["UNIQ_KEY"] == "U1"
    assert record.properties["CLUSTER"] == core.config.broker_cluster_name


async def test_decoded_properties_are_stored_like_encoded_ones(core):
    core.create("Orders")
    typed = Message(b"x", None, {"TAGS": "T", "KEYS": "k1 k2", "UNIQ_KEY": "U2"})
    outcome = core.send.send(SendRequest("Orders", [typed], 0, "pg", REQUESTER))
    assert outcome.ok
    [record] = core.read("Orders", 0)
    assert record.properties["KEYS"] == "k1 k2" and record.properties["TAGS"] == "T"


async def test_a_missing_uniq_key_is_made_by_the_broker(core):
    core.create("Orders")
    outcome = core.send.send(SendRequest("Orders", [message()], 0, "pg", REQUESTER))
    [record] = core.read("Orders", 0)
    assert outcome.value.transaction_id == record.properties["UNIQ_KEY"]


@pytest.mark.parametrize(("topic", "group", "code", "reason"), [
    ("bad topic!", "pg", ResponseCode.INVALID_PARAMETER, REASON_ILLEGAL_TOPIC),
    ("Orders", "bad group!", ResponseCode.INVALID_PARAMETER, ""),
])
async def test_names_are_checked(core, topic, group, code, reason):
    core.create("Orders")
    outcome = core.send.send(SendRequest(topic, [message()], 0, group, REQUESTER))
    assert outcome.code == code and outcome.reason == reason and outcome.remark


async def test_limits_come_from_the_broker_settings(tmp_path):
    core = Core(tmp_path, max_message_size=1024, max_message_properties_count=16)
    core.create("Orders")
    big = core.send.send(SendRequest("Orders", [Message(b"x" * 1025)], 0, "pg", REQUESTER))
    assert big.code == ResponseCode.MESSAGE_ILLEGAL and big.reason == REASON_BODY_TOO_LARGE and "1024" in big.remark
    heavy = Message(b"x", encode_properties({f"p{i}": "v" for i in range(20)}))
    many = core.send.send(SendRequest("Orders", [heavy], 0, "pg", REQUESTER))
    assert many.reason == REASON_PROPERTIES_TOO_LARGE and "maxMessagePropertiesCount=16" in many.remark
    core.store.close()


async def test_write_permission_and_queue_are_checked(core):
    core.create("Orders")
    outcome = core.send.send(SendRequest("Orders", [message()], 9, "pg", REQUESTER))
    assert outcome.code == ResponseCode.INVALID_PARAMETER and "queueId[9]" in outcome.remark
    core.topics.get("Orders").perm = PERM_READ
    outcome = core.send.send(SendRequest("Orders", [message()], 0, "pg", REQUESTER))
    assert outcome.code == ResponseCode.NO_PERMISSION


async def test_an_unknown_topic_is_auto_created_from_the_default(core):
    outcome = core.send.send(SendRequest("Fresh", [message()], -1, "pg", REQUESTER, "TBW102", 4))
    assert outcome.ok and core.topics.get("Fresh") is not None and 0 <= outcome.value.queue_id < 4


async def test_a_message_group_always_goes_to_one_queue(core):
    core.create("Orders", 8)
    queues = {core.send.send(SendRequest("Orders", [message(__SHARDINGKEY="order-7")], -1, "pg",
                                         REQUESTER)).value.queue_id for _ in range(10)}
    assert len(queues) == 1


async def test_delayed_and_timed_messages_wait(core):
    core.create("Orders")
    delayed = core.send.send(SendRequest("Orders", [message(DELAY="3")], 0, "pg", REQUESTER))
    assert delayed.ok and core.read("Orders", 0) == [] and core.read("SCHEDULE_TOPIC_XXXX", 2)
    later = str(int(time.time() * 1000) + 60_000)
    timed = core.send.send(SendRequest("Orders", [message(TIMER_DELIVER_MS=later)], 0, "pg", REQUESTER))
    assert timed.ok and timed.value.timed and core.read("Orders", 0) == []
    too_far = str(int(time.time() * 1000) + 10 * 365 * 86_400_000)
    refused = core.send.send(SendRequest("Orders", [message(TIMER_DELIVER_MS=too_far)], 0, "pg", REQUESTER))
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL and refused.reason == REASON_DELIVERY_TIME


async def test_a_retry_past_its_limit_goes_to_the_dead_letter_topic(core):
    core.groups.find_or_create("billing")
    core.create("%RETRY%billing", 1)
    retry = Message(b"again", encode_properties({"UNIQ_KEY": "R1"}), reconsume_times=5)
    outcome = core.send.send(SendRequest("%RETRY%billing", [retry], 0, "billing", REQUESTER, None, 1, 3))
    assert outcome.ok and outcome.value.queue_id == 0
    [record] = core.read("%DLQ%billing", 0)
    assert record.body == b"again"


# ---- several messages ----------------------------------------------------------------------------------------------
async def test_an_atomic_batch_is_one_append_to_one_queue(core):
    core.create("Orders")
    raw = [f"TAGS\x01TagA\x02UNIQ_KEY\x01B{i}\x02".encode() for i in range(5)]
    batch = [Message(b"m%d" % i, raw_properties=raw[i]) for i in range(5)]
    outcome = await _done(core.send.send(SendRequest("Orders", batch, 1, "pg", REQUESTER, batch=True)))
    assert outcome.ok and outcome.value.queue_id == 1 and len(outcome.value.msg_ids) == 5
    assert [r.body for r in core.read("Orders", 1)] == [b"m%d" % i for i in range(5)]


async def test_one_bad_message_refuses_the_whole_batch(core):
    core.create("Orders")
    batch = [message(), Message(b"x", encode_properties({"DELAY": "2"})), message()]
    outcome = await _done(core.send.send(SendRequest("Orders", batch, 0, "pg", REQUESTER, batch=True)))
    assert outcome.code == ResponseCode.MESSAGE_ILLEGAL and "delay level" in outcome.remark
    assert core.read("Orders", 0) == []


async def test_independent_messages_go_to_one_queue_each_with_its_outcome(core):
    """A gRPC SendMessage of several messages: one queue for all, one append; each message its own outcome."""
    core.create("Orders")
    messages = [message(UNIQ_KEY=f"E{i}") for i in range(4)] + [Message(b"x" * (core.config.max_message_size + 1))]
    results = [await _done(r) for r in core.send.send_each(SendRequest("Orders", messages, -1, "pg", REQUESTER))]
    assert [r.ok for r in results] == [True, True, True, True, False]
    assert results[4].reason == REASON_BODY_TOO_LARGE
    queue = {r.value.queue_id for r in results[:4]}
    assert len(queue) == 1
    assert [r.value.queue_offset for r in results[:4]] == [0, 1, 2, 3]
    assert [r.properties["UNIQ_KEY"] for r in core.read("Orders", queue.pop())] == ["E0", "E1", "E2", "E3"]


async def test_a_run_answers_each_request_as_if_alone(core):
    core.create("Orders")
    requests = [SendRequest("Orders", [message(UNIQ_KEY=f"P{i}")], i % 2, "pg", REQUESTER) for i in range(6)]
    requests.insert(3, SendRequest("Orders", [message()], 7, "pg", REQUESTER))  # refused: no queue 7
    results = core.send.send_run(requests)
    assert [type(r) is Outcome for r in results] == [True] * 7
    assert results[3].code == ResponseCode.INVALID_PARAMETER
    ok = [r for r in results if r.ok]
    assert [(r.value.queue_id, r.value.queue_offset, r.value.transaction_id) for r in ok] == [
        (0, 0, "P0"), (1, 0, "P1"), (0, 1, "P2"), (1, 1, "P3"), (0, 2, "P4"), (1, 2, "P5")]


# ---- authorization -------------------------------------------------------------------------------------------------
def test_a_request_states_what_it_needs():
    assert SendRequest("Orders", []).needs() == [("Orders", PUB)]
    assert SendRequest("%RETRY%billing", []).needs() == [("%RETRY%billing", SUB)]
    assert EndTransactionRequest("Orders", 0, 0, COMMIT, expect_topic="Orders").needs() == [("Orders", PUB)]


# ---- transactions --------------------------------------------------------------------------------------------------
async def test_a_half_message_waits_for_its_decision(core):
    core.create("Orders")
    half = Message(b"tx", encode_properties({"TAGS": "T", "UNIQ_KEY": "H1", "TRAN_MSG": "true", "PGROUP": "pg"}),
                   sys_flag=4)
    sent = await _done(core.send.send(SendRequest("Orders", [half], 0, "pg", REQUESTER)))
    assert sent.ok and core.read("Orders", 0) == []
    [stored] = core.read("RMQ_SYS_TRANS_HALF_TOPIC", 0)
    wrong = await _done(core.end.end(EndTransactionRequest("pg", sent.value.queue_offset, stored.physical_offset,
                                                           COMMIT, expect_topic="Other")))
    assert not wrong.ok and wrong.reason == REASON_NOT_THIS_TRANSACTION and core.read("Orders", 0) == []
    assert (await _done(core.end.end(EndTransactionRequest("pg", 0, stored.physical_offset, UNKNOWN)))).ok
    decided = await _done(core.end.end(EndTransactionRequest("pg", sent.value.queue_offset, stored.physical_offset,
                                                             COMMIT, expect_topic="Orders", expect_message_id="H1")))
    assert decided.ok
    [committed] = core.read("Orders", 0)
    assert committed.body == b"tx"
    again = await _done(core.end.end(EndTransactionRequest("pg", sent.value.queue_offset, stored.physical_offset,
                                                           ROLLBACK)))
    assert again.code == ResponseCode.SYSTEM_ERROR and "already" in again.remark


async def test_a_bad_decision_and_a_slave_are_refused(tmp_path):
    core = Core(tmp_path)
    assert core.end.end(EndTransactionRequest("pg", 0, 0, 5)).code == ResponseCode.INVALID_PARAMETER
    core.config.broker_role = "SLAVE"
    assert core.end.end(EndTransactionRequest("pg", 0, 0, COMMIT)).code == ResponseCode.SLAVE_NOT_AVAILABLE
    core.store.close()
