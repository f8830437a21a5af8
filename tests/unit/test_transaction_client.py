"""Pure rules of client.transaction_producer: the half send, END_TRANSACTION headers (after a send and answering a
check, transactions.md §2.1, §3.1, §7), what a send status means for the local transaction, and how the outcome of
a local transaction or check listener maps to a LocalTransactionState."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest

from client import (
    LocalTransactionState,
    Message,
    MessageQueue,
    SendResult,
    SendStatus,
    TransactionSendResult,
)
from client.outgoing import MessageEncoder
from client.transaction_producer import (
    TransactionProducer,
    check_answer_fields,
    end_transaction_fields,
    exception_remark,
    half_message,
    state_before_local_transaction,
)
from protocol.codes import RequestCode
from protocol.command import RemotingCommand, decode_command, encode_command
from protocol.ids import UniqKeyGenerator, offset_msg_id, pack_host
from protocol.message import encode_record
from protocol.properties import decode_properties, encode_properties

MQ = MessageQueue("Orders", "broker-a", 2)


def sent(status=SendStatus.SEND_OK, transaction_id=None, commit_log_offset=123456789) -> SendResult:
    offset_id = offset_msg_id(pack_host("10.0.0.7", 10911), commit_log_offset)
    return SendResult(status, "UNIQKEY0001", offset_id, 2, 17, MQ, transaction_id)


def wire_fields(fields: dict) -> dict:
    """extFields as the broker reads them off the wire (JSON header)."""
    cmd = RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=fields, remark="r")
    return decode_command(encode_command(cmd)[4:]).ext_fields


def test_state_names_are_the_references_and_the_pythonic_ones_alias_them():
    assert LocalTransactionState.COMMIT is LocalTransactionState.COMMIT_MESSAGE
    assert LocalTransactionState.ROLLBACK is LocalTransactionState.ROLLBACK_MESSAGE
    assert LocalTransactionState.UNKNOWN is LocalTransactionState.UNKNOW
    assert [s.value for s in LocalTransactionState] == [8, 12, 0]  # commitOrRollback on the wire


def test_only_send_ok_runs_the_local_transaction_and_not_safe_answers_roll_back():
    assert state_before_local_transaction(SendStatus.SEND_OK) is None
    for status in (SendStatus.FLUSH_DISK_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE):
        assert state_before_local_transaction(status) is LocalTransactionState.ROLLBACK_MESSAGE


def test_half_message_strips_delay_and_adds_tran_msg_and_pgroup_as_prepared():
    encoder = MessageEncoder(UniqKeyGenerator("127.0.0.1"), 1 << 20, 4096)
    msg = Message("Orders", b"body", tags="T", keys=["k1"], properties={"user": "v"}, delay_level=3)
    prepared = half_message(encoder, msg, "pg-orders")
    props = decode_properties(prepared.props)
    assert "DELAY" not in props
    assert props["TRAN_MSG"] == "true" and props["PGROUP"] == "pg-orders"
    assert props["TAGS"] == "T" and props["KEYS"] == "k1" and props["user"] == "v"
    assert props["UNIQ_KEY"] == prepared.msg_id
    assert prepared.sys_flag & 0xC == 0x4  # TRANSACTION_PREPARED_TYPE
    assert msg.delay_level == 3 and not msg.properties.keys() & {"TRAN_MSG", "PGROUP"}  # the caller's msg untouched


def test_end_transaction_after_a_send_names_the_half_record_of_the_answer():
    fields = end_transaction_fields("pg", sent(), LocalTransactionState.COMMIT)
    assert fields == {
        "producerGroup": "pg",
        "tranStateTableOffset": 17,
        "commitLogOffset": 123456789,
        "commitOrRollback": 8,
        "fromTransactionCheck": False,
        "msgId": "UNIQKEY0001",
        "bname": "broker-a",
    }
    assert "transactionId" not in fields  # a 4.x broker answers none
    on_wire = wire_fields(end_transaction_fields("pg", sent(transaction_id="TX9"), LocalTransactionState.ROLLBACK))
    assert on_wire == {
        "producerGroup": "pg", "tranStateTableOffset": "17", "commitLogOffset": "123456789",
        "commitOrRollback": "12", "fromTransactionCheck": "false", "msgId": "UNIQKEY0001", "bname": "broker-a",
        "transactionId": "TX9",
    }
    assert wire_fields(end_transaction_fields("pg", sent(), LocalTransactionState.UNKNOWN))["commitOrRollback"] == "0"


def test_end_transaction_needs_the_offset_msg_id():
    bad = SendResult(SendStatus.SEND_OK, "U", None, 0, 1, MQ)
    with pytest.raises(ValueError):
        end_transaction_fields("pg", bad, LocalTransactionState.COMMIT)


def test_check_answer_copies_the_checks_offsets_and_transaction_id():
    check = {"tranStateTableOffset": "41", "commitLogOffset": "9000", "msgId": "UNIQ", "transactionId": "UNIQ",
             "offsetMsgId": "ignored", "bname": "broker-b"}
    fields = check_answer_fields("pg", check, "UNIQ", LocalTransactionState.COMMIT)
    assert fields == {
        "producerGroup": "pg", "tranStateTableOffset": 41, "commitLogOffset": 9000, "commitOrRollback": 8,
        "fromTransactionCheck": True, "msgId": "UNIQ", "transactionId": "UNIQ", "bname": "broker-b",
    }
    assert wire_fields(fields)["fromTransactionCheck"] == "true"
    bare = check_answer_fields("pg", {"tranStateTableOffset": 1, "commitLogOffset": 2}, "U",
                               LocalTransactionState.ROLLBACK)
    assert "transactionId" not in bare and "bname" not in bare and bare["commitOrRollback"] == 12
    with pytest.raises(ValueError, match="tranStateTableOffset"):
        check_answer_fields("pg", {"commitLogOffset": "2"}, "U", LocalTransactionState.COMMIT)
    with pytest.raises(ValueError):
        check_answer_fields("pg", {"tranStateTableOffset": "x", "commitLogOffset": "2"}, "U",
                            LocalTransactionState.COMMIT)


def test_transaction_send_result_carries_the_state_and_a_transaction_id():
    result = TransactionSendResult(sent(), LocalTransactionState.ROLLBACK)
    assert result.transaction_id == "UNIQKEY0001" and result.local_transaction_state is LocalTransactionState.ROLLBACK
    assert TransactionSendResult(sent(transaction_id="TX"), LocalTransactionState.COMMIT).transaction_id == "TX"
    assert "ROLLBACK_MESSAGE" in repr(result)


def test_exception_remark_describes_the_exception():
    assert exception_remark("checkLocalTransactionState", KeyError("x")) == \
        "checkLocalTransactionState exception: KeyError: 'x'"
    assert len(exception_remark("w", ValueError("v" * 5000))) == 512


def _producer(**kwargs) -> TransactionProducer:
    return TransactionProducer("pg-unit", "127.0.0.1:1", **kwargs)


def test_outcomes_of_sync_and_async_callables_map_to_states(caplog):
    async def scenario():
        producer = _producer(executor=ThreadPoolExecutor(2))

        def commit(msg, arg):
            return LocalTransactionState.COMMIT

        async def rollback(msg, arg):
            await asyncio.sleep(0)
            return LocalTransactionState.ROLLBACK

        def boom(msg, arg):
            raise RuntimeError("db down")

        async def aboom(msg, arg):
            raise KeyError("row")

        outcomes = {}
        for fn in (commit, rollback, boom, aboom, lambda m, a: None, lambda m, a: "COMMIT", lambda m, a: True):
            outcomes[len(outcomes)] = await producer._decide(fn, (None, None), "executeLocalTransactionBranch", "U")
        producer._executor.shutdown()
        return outcomes

    with caplog.at_level(logging.WARNING, logger="client"):
        outcomes = asyncio.run(scenario())
    assert outcomes[0] == (LocalTransactionState.COMMIT, None)
    assert outcomes[1] == (LocalTransactionState.ROLLBACK, None)
    assert outcomes[2] == (LocalTransactionState.UNKNOWN, "executeLocalTransactionBranch exception: RuntimeError: db down")
    assert outcomes[3] == (LocalTransactionState.UNKNOWN, "executeLocalTransactionBranch exception: KeyError: 'row'")
    assert all(outcomes[i] == (LocalTransactionState.UNKNOWN, None) for i in (4, 5, 6))
    raised = [r for r in caplog.records if "db down" in r.getMessage()]
    assert len(raised) == 1  # logged once, with the remark


def test_transaction_listener_object_and_bad_arguments():
    class Listener:
        def execute_local_transaction(self, msg, arg):
            return LocalTransactionState.COMMIT

        def check_local_transaction(self, msg):
            return LocalTransactionState.ROLLBACK

    listener = Listener()
    producer = _producer(transaction_listener=listener)
    assert producer.local_transaction == listener.execute_local_transaction
    assert producer.check_listener == listener.check_local_transaction
    with pytest.raises(TypeError, match="transaction_listener"):
        _producer(transaction_listener=object())
    with pytest.raises(TypeError, match="check_listener"):
        _producer(check_listener="not callable")
    with pytest.raises(ValueError, match="check_thread_pool_max"):
        _producer(check_thread_pool_max=0)


class RecordingConnection:
    """Stands in for the broker connection a check arrives on: keeps what the producer writes back on it."""

    addr = "127.0.0.1:10911"

    def __init__(self) -> None:
        self.sent: list[RemotingCommand] = []

    def oneway(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)


def check_request(group: str, uniq: str, queue_offset: int = 41, physical_offset: int = 9000) -> RemotingCommand:
    props = {"UNIQ_KEY": uniq, "PGROUP": group, "TRAN_MSG": "true", "REAL_TOPIC": "Orders", "REAL_QID": "1",
             "TRANSACTION_CHECK_TIMES": "1"}
    body = encode_record(queue_id=1, flag=0, queue_offset=queue_offset, physical_offset=physical_offset, sys_flag=0,
                         born_timestamp=5, born_host=pack_host("127.0.0.1", 9), store_timestamp=6,
                         store_host=pack_host("127.0.0.1", 10911), reconsume_times=0, prepared_transaction_offset=0,
                         body=b"pay-" + uniq.encode(), topic=b"Orders", properties=encode_properties(props).encode())
    header = {"tranStateTableOffset": str(queue_offset), "commitLogOffset": str(physical_offset), "msgId": uniq,
              "transactionId": uniq, "offsetMsgId": offset_msg_id(pack_host("127.0.0.1", 10911), physical_offset)}
    return RemotingCommand(code=RequestCode.CHECK_TRANSACTION_STATE, ext_fields=header, body=body, flag=2)


def test_a_check_is_answered_on_its_connection_and_other_groups_are_ignored():
    asked = []
    running = [0, 0]  # now, peak

    async def check(msg):
        asked.append((msg.msg_id, msg.body, msg.topic))
        running[0] += 1
        running[1] = max(running)
        await asyncio.sleep(0.05)
        running[0] -= 1
        if msg.msg_id == "BAD":
            raise RuntimeError("lookup failed")
        return LocalTransactionState.COMMIT if msg.msg_id.startswith("C") else LocalTransactionState.ROLLBACK

    async def scenario():
        producer = _producer(check_listener=check, check_thread_pool_max=2)
        producer._started = True  # checks are only handled by a started producer; no broker is needed here
        producer._check_slots = asyncio.Semaphore(producer.check_thread_pool_max)
        conn = RecordingConnection()
        for group, uniq in (("pg-unit", "C1"), ("other-group", "C2"), ("pg-unit", "R1"), ("pg-unit", "BAD"),
                            ("pg-unit", "C3")):
            producer._on_broker_request(conn, check_request(group, uniq))
        await asyncio.wait_for(asyncio.gather(*producer._checks), 5)
        return conn.sent

    answers = asyncio.run(scenario())
    assert sorted(a[0] for a in asked) == ["BAD", "C1", "C3", "R1"]  # other-group's check never reached it
    assert ("C1", b"pay-C1", "Orders") in asked
    assert running[1] == 2  # at most check_thread_pool_max at once
    by_id = {cmd.ext_fields["msgId"]: cmd for cmd in answers}
    assert sorted(by_id) == ["BAD", "C1", "C3", "R1"]
    assert all(cmd.code == RequestCode.END_TRANSACTION for cmd in answers)
    assert by_id["C1"].ext_fields == {
        "producerGroup": "pg-unit", "tranStateTableOffset": 41, "commitLogOffset": 9000, "commitOrRollback": 8,
        "fromTransactionCheck": True, "msgId": "C1", "transactionId": "C1"}
    assert by_id["R1"].ext_fields["commitOrRollback"] == 12 and by_id["R1"].remark is None
    assert by_id["BAD"].ext_fields["commitOrRollback"] == 0
    assert by_id["BAD"].remark == "checkLocalTransactionState exception: RuntimeError: lookup failed"
