"""TransactionProducer against the real broker: commit, rollback, UNKNOWN resolved by the broker's check (sync and
async callables, a check listener that raises), a check answered by another instance of the group that has sent
nothing (pitfall 8), a refused half send, batches, the blocking facade."""

from __future__ import annotations

import asyncio

import pytest

from client import (
    ConsumeResult,
    LocalTransactionState,
    Message,
    MQBrokerError,
    MQClientError,
    SendStatus,
    TransactionProducer,
)
from client import sync as blocking
from tests.support.broker_process import BrokerProcess

from tests.support.client_helpers import push_consumer, wait_for

# Fast checks; transactionCheckMax 5 rather than 3 so a check run that finds no producer connected (counted by the
# broker, pitfall 11) cannot exhaust a message while a test is still starting its producer.
FAST = {"transactionCheckInterval": 500, "transactionTimeOut": 500, "transactionCheckMax": 5}


@pytest.fixture(scope="module")
def tx_broker(tmp_path_factory):
    """One broker for the module; tests use distinct topics and producer groups."""
    broker = BrokerProcess(tmp_path_factory.mktemp("txc"), "broker-txc", extra=FAST).start()
    yield broker
    broker.stop()


class Seen:
    """A listener keeping every delivered message (body -> list of its properties)."""

    def __init__(self) -> None:
        self.by_body: dict[bytes, list[dict[str, str]]] = {}

    async def __call__(self, msgs):
        for m in msgs:
            self.by_body.setdefault(m.body, []).append(dict(m.properties))
        return ConsumeResult.SUCCESS

    @property
    def bodies(self) -> set[bytes]:
        return set(self.by_body)

    def once(self) -> bool:
        return all(len(v) == 1 for v in self.by_body.values())


async def consumed(ns: str, topic: str, group: str, expect: set[bytes], settle: float = 1.5) -> Seen:
    """What a fresh consumer group receives from topic: waits for `expect`, then a settle time for extras."""
    seen = Seen()
    consumer = push_consumer(group, ns, topic, seen)
    await consumer.start()
    try:
        await wait_for(lambda: expect <= seen.bodies, f"{sorted(expect)} on {topic}", 15)
        await asyncio.sleep(settle)
    finally:
        await consumer.shutdown()
    return seen


async def test_commit_and_rollback_decided_by_the_local_transaction(tx_broker):
    ns, topic = tx_broker.namesrv_addr, "TxcDecide"
    calls = []

    def local(msg, arg):  # sync: runs in the producer's thread pool
        calls.append((msg.body, arg))
        return LocalTransactionState.COMMIT if arg == "yes" else LocalTransactionState.ROLLBACK

    async def local_async(msg, arg):
        calls.append((msg.body, arg))
        await asyncio.sleep(0)
        return LocalTransactionState.COMMIT_MESSAGE

    async with TransactionProducer("txc-pg", ns, local_transaction=local) as producer:
        keep = Message(topic, b"keep", tags="T", keys=["k-1"], properties={"color": "red"}, delay_level=3)
        ok = await producer.send_in_transaction(keep, "yes")
        no = await producer.send_in_transaction(Message(topic, b"drop"), "no")
        also = await producer.send_in_transaction(Message(topic, b"async keep"), 1, local_transaction=local_async)
    assert ok.status is SendStatus.SEND_OK and ok.local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
    assert ok.transaction_id and ok.msg_id
    assert no.local_transaction_state is LocalTransactionState.ROLLBACK
    assert also.local_transaction_state is LocalTransactionState.COMMIT
    assert calls == [(b"keep", "yes"), (b"drop", "no"), (b"async keep", 1)]
    seen = await consumed(ns, topic, "txc-cg", {b"keep", b"async keep"})
    assert seen.bodies == {b"keep", b"async keep"} and seen.once()  # the rolled back one never
    props = seen.by_body[b"keep"][0]
    assert "DELAY" not in props and props["UNIQ_KEY"] == ok.msg_id
    assert (props["TAGS"], props["KEYS"], props["color"]) == ("T", "k-1", "red")


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
        await asyncio.sleep(1.5)  # resolved: no more checks
    assert sorted(asked) == [b"commit me", b"roll me back"]
    seen = await consumed(ns, topic, f"txc-cg-{style}", {b"commit me"})
    assert seen.bodies == {b"commit me"} and seen.once()


async def test_a_check_listener_that_raises_is_asked_again(tx_broker):
    ns, topic = tx_broker.namesrv_addr, "TxcCheckRaises"
    asked = []

    def check(msg):
        asked.append(msg.msg_id)
        if len(asked) == 1:
            raise ConnectionError("state store briefly down")  # UNKNOWN: the broker asks again next run
        return LocalTransactionState.COMMIT

    async with TransactionProducer("txc-pg-raises", ns, check_listener=check) as producer:
        result = await producer.send_in_transaction(Message(topic, b"eventually"),
                                                    local_transaction=lambda m, a: LocalTransactionState.UNKNOWN)
        await wait_for(lambda: len(asked) >= 2, "a second check after the failed one", 15)
        await asyncio.sleep(1.5)
    assert asked == [result.msg_id, result.msg_id]
    seen = await consumed(ns, topic, "txc-cg-raises", {b"eventually"})
    assert seen.bodies == {b"eventually"} and seen.once()


async def test_another_instance_of_the_group_answers_the_check(tx_broker):
    ns, topic = tx_broker.namesrv_addr, "TxcShared"
    asked_b = []

    def check_b(msg):
        asked_b.append(msg.msg_id)
        return LocalTransactionState.COMMIT

    async with TransactionProducer("txc-shared", ns, instance_name="a") as a:
        result = await a.send_in_transaction(Message(topic, b"shared"),
                                             local_transaction=lambda m, arg: LocalTransactionState.UNKNOWN)
    # instance a is gone; b (same group, its own check listener) has sent nothing yet is connected and asked
    async with TransactionProducer("txc-shared", ns, instance_name="b", check_listener=check_b):
        await wait_for(lambda: asked_b == [result.msg_id], "the check reaching instance b", 15)
        await asyncio.sleep(1.0)
    assert asked_b == [result.msg_id]
    seen = await consumed(ns, topic, "txc-cg-shared", {b"shared"})
    assert seen.bodies == {b"shared"} and seen.once()


async def test_batches_and_unstarted_producers_are_refused(tx_broker):
    producer = TransactionProducer("txc-pg-refuse", tx_broker.namesrv_addr,
                                   local_transaction=lambda m, a: LocalTransactionState.COMMIT)
    with pytest.raises(MQClientError, match="not started"):
        await producer.send_in_transaction(Message("TxcRefuse", b"x"))
    async with producer:
        with pytest.raises(MQClientError, match="batches cannot be transactional"):
            await producer.send_in_transaction([Message("TxcRefuse", b"a"), Message("TxcRefuse", b"b")])


async def test_a_refused_half_send_raises_without_running_the_local_transaction(broker_factory):
    broker = broker_factory("broker-txc-reject", extra={"rejectTransactionMessage": "true"})
    ran = []
    async with TransactionProducer("txc-pg-reject", broker.namesrv_addr, retry_times_when_send_failed=0) as producer:
        with pytest.raises(MQBrokerError) as refused:
            await producer.send_in_transaction(Message("TxcReject", b"x"), local_transaction=lambda m, a: ran.append(1))
    assert refused.value.code == 16 and not ran


def test_blocking_facade_sends_in_a_transaction(tx_broker):
    ns = tx_broker.namesrv_addr
    asked = []

    class Listener:  # the reference's TransactionListener shape
        def execute_local_transaction(self, msg, arg):
            return LocalTransactionState.COMMIT if arg == 7 else LocalTransactionState.UNKNOWN

        def check_local_transaction(self, msg):
            asked.append(msg.body)
            return LocalTransactionState.COMMIT

    with blocking.TransactionProducer("txc-sync", ns, transaction_listener=Listener()) as producer:
        result = producer.send_in_transaction(Message("TxcSync", b"sync"), 7)
        assert result.local_transaction_state is LocalTransactionState.COMMIT
        later = producer.send_in_transaction(Message("TxcSync", b"checked"), 8)
        assert later.local_transaction_state is LocalTransactionState.UNKNOWN
        asyncio.run(wait_for(lambda: asked == [b"checked"], "the check of the facade's producer", 15))
    seen = asyncio.run(consumed(ns, "TxcSync", "txc-cg-sync", {b"sync", b"checked"}))
    assert seen.bodies == {b"sync", b"checked"} and seen.once()
    with blocking.TransactionProducer("txc-sync-none", ns) as producer, \
            pytest.raises(MQClientError, match="no local transaction"):
        producer.send_in_transaction(Message("TxcSync", b"none"))
