"""broker/core/send_back.py and the send core's waits without a protocol: send-backs, dead-letter resends and runs of
sends against a real MessageStore and registries in a temporary directory, under ASYNC_FLUSH, SYNC_FLUSH and
SYNC_MASTER (a master with no slave: every stored message is answered SLAVE_NOT_AVAILABLE, as a send is)."""

from __future__ import annotations

import pytest

from broker.core.outcome import Outcome, Requester
from broker.core.send import Message, SendRequest
from broker.core.send_back import REASON_ALREADY_RESENT, ResendRequest, SendBackRequest
from broker.store.types import MessageToStore, PutStatus
from protocol.codes import ResponseCode
from protocol.ids import pack_host
from protocol.properties import encode_properties
from tests.support.core_parts import CoreParts

REQUESTER = Requester("127.0.0.1:40000", "test", access_key="ops")


class Core(CoreParts):
    """The send and send-back services over a real store, as the Broker builds them (tests/support; no HA master: a
    SYNC_MASTER has no slave)."""

    def stored(self, topic: str, queue_id: int, body: bytes = b"failed", uniq_key: str = "U1"):
        """A message stored in ``topic`` (straight into the store: the test's starting point), as read back."""
        self.topics.create_topic_if_absent(topic, 4)
        text = encode_properties({"TAGS": "T", "UNIQ_KEY": uniq_key})
        result = self.store.append([MessageToStore(topic, queue_id, 0, 0, 1, pack_host("127.0.0.1", 1), 0, body,
                                                   text, 0, None, uniq_key)])
        assert result.status is PutStatus.PUT_OK
        return self.read(topic, queue_id)[-1]


async def done(result) -> Outcome:
    return result if type(result) is Outcome else await result


@pytest.fixture
async def core(tmp_path):
    made = Core(tmp_path)
    yield made
    made.store.close()


@pytest.fixture
async def sync_master(tmp_path):
    made = Core(tmp_path, broker_role="SYNC_MASTER")
    yield made
    made.store.close()


@pytest.fixture
async def sync_flush(tmp_path):
    made = Core(tmp_path, flush_disk_type="SYNC_FLUSH")
    await made.store.start()
    yield made
    await made.store.shutdown()


# ---- send-back -----------------------------------------------------------------------------------------------------
async def test_a_send_back_is_a_delayed_copy_for_the_retry_topic(core):
    original = core.stored("Orders", 1)
    outcome = await done(core.back.send_back(SendBackRequest("billing", original.physical_offset, 0, None, REQUESTER)))
    assert outcome.ok, outcome.remark
    [copy] = core.read("SCHEDULE_TOPIC_XXXX", 2)  # level 3 + reconsumeTimes 0 -> queue 2
    assert copy.reconsume_times == 1 and copy.body == b"failed"
    assert copy.properties["REAL_TOPIC"] == "%RETRY%billing" and copy.properties["DELAY"] == "3"
    assert copy.properties["RETRY_TOPIC"] == "Orders"
    assert copy.properties["ORIGIN_MESSAGE_ID"] == original.offset_msg_id
    assert copy.properties["UNIQ_KEY"] == original.properties["UNIQ_KEY"]


async def test_past_the_limit_or_asked_a_send_back_is_a_dead_letter(core):
    original = core.stored("Orders", 0)
    twice = await done(core.back.send_back(SendBackRequest("billing", original.physical_offset, 5, 0, REQUESTER)))
    asked = await done(core.back.send_back(SendBackRequest("billing", original.physical_offset, -1, None, REQUESTER)))
    assert twice.ok and asked.ok
    dead = core.read("%DLQ%billing", 0)
    assert [d.reconsume_times for d in dead] == [1, 1] and all("DELAY" not in d.properties for d in dead)
    assert core.read("SCHEDULE_TOPIC_XXXX", 4) == []


async def test_a_send_back_is_refused_as_the_reference_refuses_it(core):
    missing = core.back.send_back(SendBackRequest("billing", 10**12))
    assert missing.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in missing.remark
    bad = core.back.send_back(SendBackRequest("bad group!", 0))
    assert bad.code == ResponseCode.INVALID_PARAMETER and bad.reason == "group"


async def test_on_a_sync_master_without_a_slave_a_send_back_is_not_acknowledged(sync_master):
    """As a send (answered SLAVE_NOT_AVAILABLE): stored on the master, but no slave has it, so the consumer is told
    (SYSTEM_ERROR with the put status, the reference's answer) instead of SUCCESS."""
    core = sync_master
    original = core.stored("Orders", 0)
    sent = await done(core.send.send(SendRequest("Orders", [Message(b"x", "TAGS\x01T\x02")], 0, "pg", REQUESTER)))
    assert sent.code == ResponseCode.SLAVE_NOT_AVAILABLE
    result = core.back.send_back(SendBackRequest("billing", original.physical_offset, 0, None, REQUESTER))
    assert type(result) is not Outcome  # it waits, as a send does
    outcome = await result
    assert outcome.code == ResponseCode.SYSTEM_ERROR and outcome.remark == "SLAVE_NOT_AVAILABLE"
    assert len(core.read("SCHEDULE_TOPIC_XXXX", 2)) == 1  # stored anyway, as a send's copy is


async def test_under_sync_flush_a_send_back_waits_for_the_disk(sync_flush):
    core = sync_flush
    original = core.stored("Orders", 0)
    waits = core.store.stats["flush_waits"]
    outcome = await done(core.back.send_back(SendBackRequest("billing", original.physical_offset)))
    assert outcome.ok and core.store.stats["flush_waits"] == waits + 1
    assert core.store.flush_service.commit_log_flushed_offset >= core.store.commit_log_max_offset


# ---- dead-letter resend --------------------------------------------------------------------------------------------
async def test_a_dead_letter_is_resent_once_unless_forced(core):
    original = core.stored("Orders", 0, uniq_key="D1")
    assert (await done(core.back.send_back(SendBackRequest("billing", original.physical_offset, -1)))).ok
    resent = await done(core.back.resend(ResendRequest("billing", msg_id="D1", requester=REQUESTER)))
    assert resent.ok and resent.value.topic == "%RETRY%billing" and resent.value.uniq_key == "D1"
    [fresh] = core.read("%RETRY%billing", resent.value.queue_id)
    assert fresh.reconsume_times == 0 and fresh.properties["RETRY_TOPIC"] == "Orders"
    assert "ORIGIN_MESSAGE_ID" not in fresh.properties and "DELAY" not in fresh.properties
    again = await done(core.back.resend(ResendRequest("billing", msg_id="D1", to_original_topic=True)))
    assert again.code == ResponseCode.INVALID_PARAMETER and again.reason == REASON_ALREADY_RESENT
    assert again.value["by"] == "ops@127.0.0.1:40000" and again.value["count"] == 1
    forced = await done(core.back.resend(ResendRequest("billing", msg_id="D1", to_original_topic=True, queue_id=2,
                                                       force=True)))
    assert forced.ok and forced.value.topic == "Orders" and forced.value.queue_id == 2 and forced.value.count == 2
    missing = await done(core.back.resend(ResendRequest("other", msg_id="D1")))
    assert missing.code == ResponseCode.QUERY_NOT_FOUND


async def test_on_a_sync_master_without_a_slave_a_resend_says_so(sync_master):
    core = sync_master
    original = core.stored("Orders", 0, uniq_key="D2")
    await done(core.back.send_back(SendBackRequest("billing", original.physical_offset, -1)))
    resent = await done(core.back.resend(ResendRequest("billing", msg_id="D2", requester=REQUESTER)))
    assert resent.code == ResponseCode.SLAVE_NOT_AVAILABLE and resent.value.uniq_key == "D2"  # stored, not replicated
    assert core.resends.last("billing", core.read("%DLQ%billing", 0)[0].physical_offset)["count"] == 1


# ---- a run of sends under SYNC_FLUSH / SYNC_MASTER -----------------------------------------------------------------
def run_of(count: int, queues: int = 2, topic: str = "Orders") -> list[SendRequest]:
    return [SendRequest(topic, [Message(b"m%d" % i, f"TAGS\x01T\x02UNIQ_KEY\x01R{i}\x02")], i % queues, "pg",
                        REQUESTER) for i in range(count)]


async def test_a_run_under_sync_flush_is_one_append_per_queue_and_one_flush_wait(sync_flush):
    core = sync_flush
    core.topics.create_topic_if_absent("Orders", 4)
    requests = run_of(8)
    requests.insert(3, SendRequest("Orders", [Message(b"x")], 9, "pg", REQUESTER))  # refused: no queue 9
    stats = core.store.stats
    appends, waits = stats["put_appends"], stats["flush_waits"]
    pending = core.send.send_run(requests)
    assert stats["put_appends"] == appends + 2  # stored before any await: one append per queue
    results = [await done(r) for r in pending]
    assert stats["flush_waits"] == waits + 1
    assert results[3].code == ResponseCode.INVALID_PARAMETER
    ok = [r for r in results if r.ok]
    assert [(r.value.queue_id, r.value.queue_offset, r.value.transaction_id) for r in ok] == [
        (i % 2, i // 2, f"R{i}") for i in range(8)]
    assert core.store.flush_service.commit_log_flushed_offset >= core.store.commit_log_max_offset
    assert [r.body for r in core.read("Orders", 1)] == [b"m1", b"m3", b"m5", b"m7"]


async def test_a_grpc_send_of_several_messages_under_sync_flush_is_one_append(sync_flush):
    core = sync_flush
    core.topics.create_topic_if_absent("Orders", 4)
    appends, waits = core.store.stats["put_appends"], core.store.stats["flush_waits"]
    messages = [Message(b"g%d" % i, None, {"TAGS": "T", "UNIQ_KEY": f"G{i}"}) for i in range(5)]
    results = await core.send.send_each_settled(SendRequest("Orders", messages, -1, "pg", Requester("h:1", "grpc")))
    assert all(r.ok for r in results)
    assert [r.value.queue_offset for r in results] == [0, 1, 2, 3, 4]
    assert core.store.stats["put_appends"] == appends + 1 and core.store.stats["flush_waits"] == waits + 1


async def test_a_run_on_a_sync_master_without_a_slave_is_stored_and_each_told(sync_master):
    core = sync_master
    core.topics.create_topic_if_absent("Orders", 4)
    appends = core.store.stats["put_appends"]
    results = [await done(r) for r in core.send.send_run(run_of(6, queues=1))]
    assert core.store.stats["put_appends"] == appends + 1
    assert [r.code for r in results] == [ResponseCode.SLAVE_NOT_AVAILABLE] * 6  # as each alone would be
    assert [r.value.queue_offset for r in results] == list(range(6)) and results[0].remark == "SLAVE_NOT_AVAILABLE"
    assert len(core.read("Orders", 0)) == 6


def test_a_send_back_needs_what_the_remoting_table_asks_of_its_header(core):
    """SendBackRequest.needs() and CONSUMER_SEND_MSG_BACK's row of the ACL table are one function: SUB on the group
    and on the topic of the record at the offset (found in the store)."""
    from broker.acl.resources import needed_resources
    from protocol.codes import RequestCode
    from protocol.command import RemotingCommand
    from protocol.requests import read_request

    parts = core
    phys = parts.stored("Orders", 0).physical_offset
    header = read_request(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK,
                                                  {"group": "cg", "offset": str(phys), "delayLevel": "0"}, opaque=1))
    typed = SendBackRequest("cg", phys)
    assert typed.needs(parts.store) == needed_resources(RequestCode.CONSUMER_SEND_MSG_BACK, header, parts.store)
    assert {name for name, _ in typed.needs(parts.store)} == {"%RETRY%cg", "Orders"}
