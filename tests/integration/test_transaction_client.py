"""TransactionProducer against the real broker: commit, rollback, UNKNOWN resolved by the broker's check (sync and
async callables), a check answered by another instance of the group, the blocking facade."""

from __future__ import annotations

import asyncio

import pytest

from client import (
    LocalTransactionState,
    Message,
    MQClientError,
    SendStatus,
    TransactionProducer,
)
from client import sync as blocking

from .client_helpers import Recorder, push_consumer, wait_for

FAST = {"transactionCheckInterval": 300, "transactionTimeOut": 400, "transactionCheckMax": 5}


@pytest.fixture
def tx_broker(broker_factory):
    return broker_factory("broker-txc", extra=FAST)


async def consumed(ns: str, topic: str, group: str, settle: float = 1.0) -> Recorder:
    """Everything a fresh consumer group receives from topic within a short settle time."""
    rec = Recorder()
    consumer = push_consumer(group, ns, topic, rec)
    await consumer.start()
    try:
        await asyncio.sleep(settle)
    finally:
        await consumer.shutdown()
    return rec


async def test_commit_and_rollback_decided_by_the_local_transaction(tx_broker):
    ns, topic = tx_broker.namesrv_addr, "TxcDecide"
    calls = []

    def local(msg, arg):
        calls.append((msg.body, arg))
        return LocalTransactionState.COMMIT if arg == "yes" else LocalTransactionState.ROLLBACK

    async with TransactionProducer("txc-pg", ns, local_transaction=local) as producer:
        ok = await producer.send_in_transaction(Message(topic, b"keep", tags="T", delay_level=3), "yes")
        no = await producer.send_in_transaction(Message(topic, b"drop"), "no")
    assert ok.status is SendStatus.SEND_OK and ok.local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
    assert no.local_transaction_state is LocalTransactionState.ROLLBACK
    assert calls == [(b"keep", "yes"), (b"drop", "no")]
    rec = Recorder()
    consumer = push_consumer("txc-cg", ns, topic, rec)
    await consumer.start()
    try:
        await wait_for(lambda: rec.bodies == {b"keep"}, "the committed message", 15)  # no delay: DELAY stripped
        await asyncio.sleep(1.0)
    finally:
        await consumer.shutdown()
    assert rec.bodies == {b"keep"} and not rec.duplicates()


@pytest.mark.parametrize("style", ["sync", "async"])
async def test_unknown_is_resolved_by_the_check_listener(tx_broker, style):
    ns, topic = tx_broker.namesrv_addr, f"TxcCheck{style}"
    asked = []

    if style == "sync":
        def local(msg, arg):
            raise RuntimeError("database unreachable")  # an exception is UNKNOWN

        def check(msg):
            asked.append(msg.body)
            return LocalTransactionState.COMMIT if msg.body == b"commit me" else LocalTransactionState.ROLLBACK
    else:
        async def local(msg, arg):
            return LocalTransactionState.UNKNOWN

        async def check(msg):
            asked.append(msg.body)
            await asyncio.sleep(0)
            return LocalTransactionState.COMMIT if msg.body == b"commit me" else LocalTransactionState.ROLLBACK

    async with TransactionProducer(f"txc-pg-{style}", ns, check_listener=check) as producer:
        first = await producer.send_in_transaction(Message(topic, b"commit me"), local_transaction=local)
        await producer.send_in_transaction(Message(topic, b"roll me back"), local_transaction=local)
        assert first.local_transaction_state is LocalTransactionState.UNKNOW
        await wait_for(lambda: sorted(asked) == [b"commit me", b"roll me back"], "both checks", 15)
        await asyncio.sleep(1.0)  # resolved: no more checks
    assert sorted(asked) == [b"commit me", b"roll me back"]
    rec = await consumed(ns, topic, f"txc-cg-{style}", settle=2.0)
    assert rec.bodies == {b"commit me"} and not rec.duplicates()


async def test_another_instance_of_the_group_answers_the_check(tx_broker):
    ns, topic = tx_broker.namesrv_addr, "TxcShared"
    asked_b = []

    def check_b(msg):
        asked_b.append(msg.msg_id)
        return LocalTransactionState.COMMIT

    async with TransactionProducer("txc-shared", ns, instance_name="a") as a:
        result = await a.send_in_transaction(Message(topic, b"shared"),
                                             local_transaction=lambda m, arg: LocalTransactionState.UNKNOWN)
    # instance a is gone; b (same group, its own check listener) is asked
    async with TransactionProducer("txc-shared", ns, instance_name="b", check_listener=check_b) as b:
        await b.send(Message("TxcWarmUp", b"x"))  # connect to the broker so the check can reach b
        await wait_for(lambda: asked_b == [result.msg_id], "the check reaching instance b", 15)
    rec = await consumed(ns, topic, "txc-cg-shared", settle=2.0)
    assert rec.bodies == {b"shared"}


def test_blocking_facade_sends_in_a_transaction(tx_broker):
    ns = tx_broker.namesrv_addr
    with blocking.TransactionProducer("txc-sync", ns) as producer:
        result = producer.send_in_transaction(Message("TxcSync", b"sync"), 7,
                                              local_transaction=lambda m, arg: LocalTransactionState.COMMIT)
        assert result.local_transaction_state is LocalTransactionState.COMMIT
        with pytest.raises(MQClientError, match="no local transaction"):
            producer.send_in_transaction(Message("TxcSync", b"none"))
    rec = asyncio.run(consumed(ns, "TxcSync", "txc-cg-sync", settle=2.0))
    assert rec.bodies == {b"sync"}
