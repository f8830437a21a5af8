"""The Spark `messages` table over a store with transactional messages: committed messages carry transaction type
COMMIT in `sysflag` on their real topic, half records sit in RMQ_SYS_TRANS_HALF_TOPIC with `real_topic`, a rolled
back message never appears on its topic."""

from __future__ import annotations

import asyncio

from tests.support.broker_process import BrokerProcess
from tests.support.transaction_wire import end_fields, half_send
from tests.support.wire import WireClient

from protocol.codes import RequestCode as RC


def test_transaction_types_in_the_messages_table(spark, tmp_path):
    broker = BrokerProcess(tmp_path, "broker-spark-tx", extra={"transactionCheckInterval": 60000}).start()

    async def populate():
        async with await WireClient.connect(broker.addr) as client:
            kept = await half_send(client, "SparkTx", b"committed")
            assert (await client.request(RC.END_TRANSACTION, end_fields(kept, 8))).code == 0
            dropped = await half_send(client, "SparkTx", b"rolled back")
            assert (await client.request(RC.END_TRANSACTION, end_fields(dropped, 12))).code == 0
            return kept

    try:
        kept = asyncio.run(populate())
    finally:
        assert broker.stop() == 0
    rows = spark.read.format("rocketmq").load(str(broker.store_dir)).select(
        "topic", "body", "sysflag", "real_topic", "uniq_key", "prepared_transaction_offset").collect()
    on_topic = [r for r in rows if r.topic == "SparkTx"]
    assert [bytes(r.body) for r in on_topic] == [b"committed"]
    assert on_topic[0].sysflag & 0xC == 0x8 and on_topic[0].prepared_transaction_offset == kept.commit_log_offset
    halves = [r for r in rows if r.topic == "RMQ_SYS_TRANS_HALF_TOPIC"]
    assert sorted(bytes(r.body) for r in halves) == [b"committed", b"rolled back"]
    assert {r.real_topic for r in halves} == {"SparkTx"} and all(r.sysflag & 0xC == 0 for r in halves)
