"""Pure parts of broker.grpc.transactions: transaction ids, the message a check carries, where checks go."""

import asyncio
import hashlib

import pytest

from broker.grpc.transactions import (
    GrpcTransactions,
    TelemetryStreams,
    half_record_message,
    parse_transaction_id,
    transaction_id,
)
from broker.transaction.half import HALF_TOPIC
from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb
from protocol.ids import offset_msg_id, pack_host
from protocol.message import decode_record, encode_record
from protocol.properties import encode_properties


def _half(queue_offset: int = 4, physical_offset: int = 1000) -> object:
    props = {"TRAN_MSG": "true", "PGROUP": "Orders", "REAL_TOPIC": "Orders", "REAL_QID": "2", "TAGS": "A",
             "KEYS": "k1 k2", "UNIQ_KEY": "01ABC", "region": "eu", "TRANSACTION_CHECK_TIMES": "1",
             "__BORNHOST": "10.0.0.1", "BORN_TIMESTAMP": "5000"}
    raw = encode_record(queue_id=0, flag=0, queue_offset=queue_offset, physical_offset=physical_offset, sys_flag=0,
                        born_timestamp=5_123, born_host=pack_host("127.0.0.1", 9), store_timestamp=6_456,
                        store_host=pack_host("127.0.0.1", 10911), reconsume_times=0, prepared_transaction_offset=0,
                        body=b"pay", topic=HALF_TOPIC.encode(), properties=encode_properties(props).encode())
    return decode_record(raw)


def test_a_transaction_id_names_the_half_record_and_reads_back():
    tx = transaction_id(offset_msg_id(pack_host("127.0.0.1", 10911), 123_456), 42)
    assert len(tx) == 48 and parse_transaction_id(tx) == (123_456, 42)
    for bad in ("", "xyz", "0" * 16, tx[:-1], tx.replace(tx[0], "G", 1)):
        with pytest.raises(ValueError):
            parse_transaction_id(bad)


def test_the_checked_message_is_the_one_the_producer_sent():
    message = half_record_message(_half())
    sp = message.system_properties
    assert message.topic.name == "Orders" and message.body == b"pay"
    # the reference's system set is left out; what it does not hold (the check count) is shown, as the reference does
    assert dict(message.user_properties) == {"region": "eu", "TRANSACTION_CHECK_TIMES": "1"}
    assert (sp.message_id, sp.tag, list(sp.keys), sp.message_type) == ("01ABC", "A", ["k1", "k2"], pb.TRANSACTION)
    assert sp.body_digest.type == pb.MD5 and sp.body_digest.checksum == hashlib.md5(b"pay").hexdigest().upper()
    assert (sp.queue_id, sp.queue_offset, sp.delivery_attempt, sp.body_encoding) == (2, 4, 1, pb.IDENTITY)
    assert sp.born_timestamp.ToMilliseconds() == 5_123 and sp.store_timestamp.ToMilliseconds() == 6_456
    assert sp.born_host == "10.0.0.1" and sp.store_host == "127.0.0.1:10911"


async def test_checks_go_round_robin_to_the_streams_publishing_the_topic():
    streams = TelemetryStreams()
    transactions = GrpcTransactions(None, streams)  # send_check needs no broker
    record = _half()
    assert not transactions.send_check("Orders", record)  # nobody publishes Orders yet
    publishing = pb.Settings(publishing=pb.Publishing(topics=[pb.Resource(name="Orders")]))
    one, two, other = streams.open("c1"), streams.open("c2"), streams.open("c3")
    one.publishing(publishing)
    two.publishing(publishing)
    other.publishing(pb.Settings(publishing=pb.Publishing(topics=[pb.Resource(name="Payments")])))

    async def client_writes_nothing():
        await asyncio.sleep(3600)
        yield spb.TelemetryCommand()

    got = []
    for stream in (one, two):
        merged = stream.merged(client_writes_nothing())
        assert transactions.send_check("Orders", record)
        pushed, command = await asyncio.wait_for(anext(merged), 1)
        got.append((stream.client_id, pushed, command))
        await merged.aclose()
    # one check per stream (round robin), none to the other topic's producer
    assert sorted(c for c, _, _ in got) == ["c1", "c2"] and all(p for _, p, _ in got)
    recover = got[0][2].recover_orphaned_transaction_command
    # the check names the transaction by the message id, as the reference asks producers
    assert recover.transaction_id == "01ABC" and recover.message.body == b"pay"
    one.close()
    two.close()
    assert not transactions.send_check("Orders", record)  # closed streams are forgotten
