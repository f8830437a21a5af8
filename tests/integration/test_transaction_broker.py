"""Transactional messages on the real broker, spoken on the wire exactly as the Java 4.x producer does: a half send
(TRAN_MSG, PGROUP, sysFlag PREPARED), END_TRANSACTION one-way, CHECK_TRANSACTION_STATE one-way on the producer's own
connection (transactions.md)."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.support.broker_process import free_port

from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R
from protocol.ids import decode_offset_msg_id
from protocol.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
    decode_record,
)

from tests.support.admin import scrape
from tests.support.admin import mqadmin
from tests.support.transaction_wire import GROUP, Half, end_fields, half_send  # noqa: F401 (Half used in annotations)
from tests.support.wire import (
    WireClient,
    props,
    pull_fields,
    pull_records,
    records,
    send_v2_fields,
    wait_until,
)

FAST = {"transactionCheckInterval": 300, "transactionTimeOut": 400, "transactionCheckMax": 3}


async def visible(client: WireClient, topic: str, queue_id: int = 1, subscription: str = "*"):
    resp = await client.request(RC.PULL_MESSAGE, pull_fields(topic, "tx-reader", queue_id, 0, suspend_ms=0,
                                                             subscription=subscription))
    return records(resp.body) if resp.code == R.SUCCESS else []


async def next_check(client: WireClient, timeout: float = 10.0):
    while True:
        cmd = await asyncio.wait_for(client.server_requests.get(), timeout)
        if cmd.code == RC.CHECK_TRANSACTION_STATE:
            return cmd


async def test_commit_publishes_once_intact_and_rollback_never(broker_factory):
    broker = broker_factory("broker-tx", extra={"transactionCheckInterval": 60000})
    async with await WireClient.connect(broker.addr) as client:
        half = await half_send(client, "TxTopic", b"pay 10")
        assert half.queue_id == 1
        assert await visible(client, "TxTopic") == []  # invisible until committed
        [stored] = await pull_records(client, "RMQ_SYS_TRANS_HALF_TOPIC", 0)
        assert stored.physical_offset == half.commit_log_offset and stored.queue_offset == half.table_offset
        assert stored.properties["REAL_TOPIC"] == "TxTopic" and stored.properties["REAL_QID"] == "1"
        assert stored.properties["PGROUP"] == GROUP and stored.sys_flag & TRANSACTION_TYPE_MASK == 0

        wrong = await client.request(RC.END_TRANSACTION, end_fields(half, 8, group="other-pg"))
        assert wrong.code == R.SYSTEM_ERROR and wrong.remark == "The producer group wrong"
        bad_offset = await client.request(RC.END_TRANSACTION, end_fields(half, 8, table_offset=99))
        assert bad_offset.code == R.SYSTEM_ERROR and "state table offset wrong" in bad_offset.remark
        unknown = await client.request(RC.END_TRANSACTION, end_fields(half, 8, commit_log_offset=10**9))
        assert unknown.code == R.SYSTEM_ERROR and "Find prepared transaction message failed" in unknown.remark
        assert await visible(client, "TxTopic") == []

        await client.oneway(RC.END_TRANSACTION, end_fields(half, 8))  # what the Java producer sends
        [msg] = await wait_until(lambda: visible(client, "TxTopic", subscription="TagA"), "the committed message")
        assert msg.body == b"pay 10" and msg.queue_id == 1 and msg.properties["UNIQ_KEY"] == half.uniq
        assert msg.properties["TAGS"] == "TagA" and msg.properties["KEYS"] == "order-1"
        assert msg.properties["color"] == "blue" and msg.properties["PGROUP"] == GROUP
        assert msg.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE
        assert msg.prepared_transaction_offset == half.commit_log_offset

        again = await client.request(RC.END_TRANSACTION, end_fields(half, 8))
        assert again.code == R.SYSTEM_ERROR and "already committed or rolled back" in again.remark
        assert len(await visible(client, "TxTopic")) == 1  # no second copy
        [op] = await pull_records(client, "RMQ_SYS_TRANS_OP_HALF_TOPIC", 0)
        assert op.properties["TAGS"] == "d" and op.body == str(half.table_offset).encode()

        gone = await half_send(client, "TxTopic", b"cancelled")
        rolled = await client.request(RC.END_TRANSACTION, end_fields(gone, 12))
        assert rolled.code == R.SUCCESS
        await asyncio.sleep(0.3)
        assert [m.body for m in await visible(client, "TxTopic")] == [b"pay 10"]


async def test_unknown_is_never_answered_and_batches_cannot_be_transactional(broker_factory):
    broker = broker_factory("broker-tx-unknown", extra={"transactionCheckInterval": 60000})
    async with await WireClient.connect(broker.addr) as client:
        half = await half_send(client, "TxUnknown", b"later")
        with pytest.raises(asyncio.TimeoutError):
            await client.request(RC.END_TRANSACTION, end_fields(half, 0), timeout=0.5)
        batch = await client.request(RC.SEND_BATCH_MESSAGE, dict(send_v2_fields("TxUnknown", 0, "", sys_flag=4),
                                                                m="true"), b"")
        assert batch.code == R.MESSAGE_ILLEGAL and "transactional" in batch.remark
        stray = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("TxUnknown", 2, props(UNIQ_KEY="X1"),
                                                                         sys_flag=4), b"plain")
        assert stray.code == 0  # a PREPARED bit without TRAN_MSG: a plain, visible message (pitfall 1)
        assert [m.body for m in await visible(client, "TxUnknown", 2)] == [b"plain"]


async def test_check_back_then_commit_from_the_check(broker_factory):
    broker = broker_factory("broker-tx-check", extra=FAST)
    async with await WireClient.connect(broker.addr) as producer, await WireClient.connect(broker.addr) as reader:
        assert (await producer.heartbeat("tx-client-1", producer_group=GROUP)).code == 0
        half = await half_send(producer, "TxCheck", b"ask me")
        check = await next_check(producer)
        assert check.flag & 2  # one-way
        fields = check.ext_fields
        assert fields["msgId"] == fields["transactionId"] == half.uniq
        assert decode_offset_msg_id(fields["offsetMsgId"])[2] == int(fields["commitLogOffset"])
        body = decode_record(check.body)
        assert body.topic == "TxCheck" and body.queue_id == 1 and body.body == b"ask me"
        assert body.properties["TRANSACTION_CHECK_TIMES"] == "1"
        await producer.oneway(RC.END_TRANSACTION, {
            "producerGroup": GROUP, "tranStateTableOffset": fields["tranStateTableOffset"],
            "commitLogOffset": fields["commitLogOffset"], "commitOrRollback": "8", "fromTransactionCheck": "true",
            "msgId": half.uniq, "transactionId": fields["transactionId"]})
        [msg] = await wait_until(lambda: visible(reader, "TxCheck"), "the message committed from the check")
        assert msg.properties["UNIQ_KEY"] == half.uniq
        with pytest.raises(asyncio.TimeoutError):
            await next_check(producer, timeout=1.5)  # resolved: never checked again
        # the original send-time offsets now name a settled transaction
        late = await producer.request(RC.END_TRANSACTION, end_fields(half, 8))
        assert late.code == R.SYSTEM_ERROR and "already" in late.remark
        assert len(await visible(reader, "TxCheck")) == 1


async def test_unanswered_transaction_is_checked_up_to_the_maximum_then_given_up(broker_factory):
    broker = broker_factory("broker-tx-max", extra=FAST)
    async with await WireClient.connect(broker.addr) as producer:
        await producer.heartbeat("tx-client-max", producer_group=GROUP)
        half = await half_send(producer, "TxMax", b"nobody answers")
        counts = []
        for _ in range(3):
            check = await next_check(producer)
            counts.append(decode_record(check.body).properties["TRANSACTION_CHECK_TIMES"])
        assert counts == ["1", "2", "3"]

        async def given_up():
            return await pull_records(producer, "TRANS_CHECK_MAX_TIME_TOPIC", 0)
        [dead] = await wait_until(given_up, "the message in TRANS_CHECK_MAX_TIME_TOPIC")
        assert dead.properties["UNIQ_KEY"] == half.uniq and dead.properties["REAL_TOPIC"] == "TxMax"
        with pytest.raises(asyncio.TimeoutError):
            await next_check(producer, timeout=1.2)
        assert await visible(producer, "TxMax") == []


@pytest.mark.parametrize("how", ["sigterm", "kill -9"])
async def test_open_and_decided_transactions_survive_a_restart(broker_factory, how):
    broker = broker_factory("broker-tx-restart", extra={**FAST, "transactionCheckInterval": 60000})
    async with await WireClient.connect(broker.addr) as client:
        committed = await half_send(client, "TxRestart", b"committed before")
        assert (await client.request(RC.END_TRANSACTION, end_fields(committed, 8))).code == 0
        rolled = await half_send(client, "TxRestart", b"rolled back before")
        assert (await client.request(RC.END_TRANSACTION, end_fields(rolled, 12))).code == 0
        open_by_check = await half_send(client, "TxRestart", b"open, committed by a check")
        open_by_send = await half_send(client, "TxRestart", b"open, committed by its send-time offsets")
    if how == "sigterm":
        broker.stop()
    else:
        broker.kill()
    # checks run quickly from now on (a later key wins in broker.conf)
    broker.conf_path.write_text(broker.conf_path.read_text() + "transactionCheckInterval=300\n")
    broker.start()
    async with await WireClient.connect(broker.addr) as producer:
        await producer.heartbeat("tx-client-after", producer_group=GROUP)
        again = await producer.request(RC.END_TRANSACTION, end_fields(committed, 8))
        assert again.code == R.SYSTEM_ERROR and "already" in again.remark
        assert (await producer.request(RC.END_TRANSACTION, end_fields(open_by_send, 8))).code == 0
        checked = set()
        for _ in range(6):
            try:
                check = await next_check(producer, timeout=5)
            except asyncio.TimeoutError:
                break
            record = decode_record(check.body)
            checked.add(record.body)
            if record.body == open_by_check.body:
                f = check.ext_fields
                await producer.oneway(RC.END_TRANSACTION, {
                    "producerGroup": GROUP, "tranStateTableOffset": f["tranStateTableOffset"],
                    "commitLogOffset": f["commitLogOffset"], "commitOrRollback": "8",
                    "fromTransactionCheck": "true", "msgId": open_by_check.uniq})
                break
        assert checked == {open_by_check.body}  # decided ones are never checked

        async def bodies():
            got = sorted(m.body for m in await visible(producer, "TxRestart"))
            return got if len(got) >= 3 else None
        assert await wait_until(bodies, "three committed messages") == sorted(
            [committed.body, open_by_check.body, open_by_send.body])
        await asyncio.sleep(0.5)
        assert len(await visible(producer, "TxRestart")) == 3


async def test_operators_see_open_transactions_and_counters(broker_factory):
    port = free_port()
    broker = broker_factory("broker-tx-ops", extra={"transactionCheckInterval": 60000, "metricsPort": port})
    async with await WireClient.connect(broker.addr) as client:
        done = await half_send(client, "TxOps", b"decided")
        assert (await client.request(RC.END_TRANSACTION, end_fields(done, 8))).code == 0
        rolled = await half_send(client, "TxOps", b"rolled")
        assert (await client.request(RC.END_TRANSACTION, end_fields(rolled, 12))).code == 0
        for i in range(3):
            await half_send(client, "TxOps", b"open-%d" % i)
        await half_send(client, "TxOther", b"open elsewhere", group="tx-other-pg")
    result = await asyncio.to_thread(mqadmin, broker.namesrv_addr, "transactionStatus", "--json")
    assert result.returncode == 0, result.stderr
    [report] = json.loads(result.stdout)["brokers"]
    pending = {(r["topic"], r["producerGroup"]): r["count"] for r in report["pending"]}
    assert pending == {("TxOps", GROUP): 3, ("TxOther", "tx-other-pg"): 1}
    assert report["counters"]["commits"] == 1 and report["counters"]["rollbacks"] == 1
    human = await asyncio.to_thread(mqadmin, broker.namesrv_addr, "transactionStatus", "-t", "TxOps")
    assert human.returncode == 0 and "TxOps" in human.stdout and "TxOther" not in human.stdout
    samples = await scrape(port)
    assert samples[("rocketmq_transactions_total", (("outcome", "commit"),))] == 1
    assert samples[("rocketmq_transactions_total", (("outcome", "rollback"),))] == 1
    assert samples[("rocketmq_transaction_half_unchecked", ())] == 6
