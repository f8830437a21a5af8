"""Client transport and producer error paths against tiny fake peers on 127.0.0.1 (tests.support.client_fakes).

The fakes only exist to provoke failures (timeouts, closed connections, busy brokers, unknown topics) and to observe
what the client puts on the wire; real behaviour is covered by the integration tests against the real broker.
"""

import asyncio
import json

import pytest

from client import Message, Producer
from client.errors import MQBrokerError, RemotingClosedError, RemotingConnectError, RemotingTimeoutError
from client.instance import NameServerClient
from client.remoting import RemotingClient
from protocol.codes import SerializeType
from protocol.command import RemotingCommand, encode_command
from protocol.headers import SendMessageRequestHeader
from protocol.properties import decode_properties
from tests.support.broker_process import free_port
from tests.support.client_fakes import FakePeer, broker_handler, name_server, route_body

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def peers():
    started = []

    async def make(handler=None):
        peer = await FakePeer(handler).start()
        started.append(peer)
        return peer

    yield make
    for peer in started:
        await peer.stop()



# ----------------------------------------------------------------------------------------------- transport
async def test_pipelined_requests_out_of_order(peers):
    waiting = []

    async def handler(peer, writer, cmd):
        waiting.append(cmd)
        if len(waiting) == 50:  # answer everything at once, newest first
            for c in reversed(waiting):
                writer.write(encode_command(c.make_response(0, remark=str(c.ext_fields["i"]))))
        return None

    peer = await peers(handler)
    client = RemotingClient()
    try:
        replies = await asyncio.wait_for(
            asyncio.gather(
                *(client.invoke(peer.addr, RemotingCommand(code=999, ext_fields={"i": i}), 3.0) for i in range(50))
            ),
            5,
        )
        assert [r.remark for r in replies] == [str(i) for i in range(50)]
        assert peer.connections == 1
    finally:
        await client.close()


async def test_timeout_then_late_response_is_dropped(peers):
    held = []

    def handler(peer, writer, cmd):
        held.append((writer, cmd))
        return None

    peer = await peers(handler)
    client = RemotingClient()
    try:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(RemotingTimeoutError, match="timed out"):
            await client.invoke(peer.addr, RemotingCommand(code=999), 0.2)
        assert 0.15 < loop.time() - start < 1.0
        writer, cmd = held[0]
        writer.write(encode_command(cmd.make_response(0)))  # too late: must be ignored
        await asyncio.sleep(0.05)
        conn = client.connected(peer.addr)
        assert conn is not None and not conn.pending
    finally:
        await client.close()


async def test_closed_connection_fails_pending_and_reconnects(peers):
    def handler(peer, writer, cmd):
        if cmd.code == 1:
            writer.close()
            return None
        return cmd.make_response(0)

    peer = await peers(handler)
    client = RemotingClient()
    try:
        with pytest.raises(RemotingClosedError, match="closed"):
            await asyncio.wait_for(client.invoke(peer.addr, RemotingCommand(code=1), 3.0), 3)
        reply = await asyncio.wait_for(client.invoke(peer.addr, RemotingCommand(code=2), 3.0), 3)
        assert reply.code == 0 and peer.connections == 2
    finally:
        await client.close()


async def test_connect_error_is_clear():
    client = RemotingClient(connect_timeout=1.0)
    port = free_port()
    with pytest.raises(RemotingConnectError, match=f"127.0.0.1:{port}"):
        await client.invoke(f"127.0.0.1:{port}", RemotingCommand(code=1), 1.0)
    await client.close()


async def test_broker_to_client_requests(peers):
    seen = []

    def handler(peer, writer, cmd):
        # push a one-way notify and an unknown two-way request at the client, then answer
        writer.write(encode_command(RemotingCommand(code=40, opaque=900, flag=2, ext_fields={"consumerGroup": "g"})))
        writer.write(encode_command(RemotingCommand(code=221, opaque=901)))
        return cmd.make_response(0)

    peer = await peers(handler)

    def client_handler(conn, cmd):
        seen.append(cmd.code)
        return None

    client = RemotingClient(request_handler=client_handler)
    try:
        await client.invoke(peer.addr, RemotingCommand(code=5), 3.0)
        for _ in range(100):
            if any(c.flag & 1 for c in peer.received):
                break
            await asyncio.sleep(0.01)
        assert seen == [40, 221]
        replies = [c for c in peer.received if c.flag & 1]
        assert len(replies) == 1 and replies[0].opaque == 901 and replies[0].code == 3  # not supported
    finally:
        await client.close()


@pytest.mark.parametrize("announce,allow,expected", [
    (True, True, SerializeType.MSGPACK),
    (False, True, SerializeType.JSON),
    (True, False, SerializeType.JSON),
])
async def test_msgpack_negotiation(peers, announce, allow, expected):
    def handler(peer, writer, cmd):
        if cmd.code == 34 and announce:
            return cmd.make_response(0, ext_fields={"serializeTypes": "JSON,ROCKETMQ,MSGPACK"})
        return cmd.make_response(0)

    peer = await peers(handler)
    client = RemotingClient(heartbeat_body=lambda: b'{"clientID":"x"}', allow_msgpack=allow)
    try:
        reply = await client.invoke(peer.addr, RemotingCommand(code=30, ext_fields={"topic": "T", "queueId": 1}), 3.0)
        assert reply.code == 0
        first, second = peer.received[:2]
        assert first.code == 34 and first.serialize_type == SerializeType.JSON and first.body == b'{"clientID":"x"}'
        assert second.code == 30 and second.serialize_type == expected
        assert second.ext_fields["topic"] == "T"
    finally:
        await client.close()


async def test_name_server_fallback(peers):
    route = {"brokerDatas": [{"brokerName": "b", "cluster": "C", "brokerAddrs": {"0": "127.0.0.1:1"}}],
             "queueDatas": [{"brokerName": "b", "perm": 6, "readQueueNums": 2, "writeQueueNums": 2}]}

    def handler(peer, writer, cmd):
        assert cmd.code == 105 and cmd.serialize_type == SerializeType.JSON
        if cmd.ext_fields["topic"] == "T":
            return cmd.make_response(0, body=json.dumps(route).encode())
        return cmd.make_response(17, remark="No topic route info")

    peer = await peers(handler)
    ns = NameServerClient(f"127.0.0.1:{free_port()}; {peer.addr}", timeout=1.0)
    try:
        r = await ns.get_route("T")
        assert r.broker("b").master_addr == "127.0.0.1:1"
        with pytest.raises(MQBrokerError) as info:
            await ns.get_route("Missing")
        assert info.value.code == 17
    finally:
        await ns.close()


# ----------------------------------------------------------------------------------------------- producer error paths
async def test_send_retries_on_another_broker_with_stable_uniq_key(peers):
    busy = await peers(broker_handler(2))
    ok = await peers(broker_handler(0))
    ns = await name_server(peers, {"T": route_body([("a", busy.addr), ("b", ok.addr)])})
    async with Producer("pg", ns.addr, send_timeout=3.0) as producer:
        results = [await producer.send(Message("T", b"hi", tags="X")) for _ in range(4)]
    assert all(r.status.name == "SEND_OK" and r.message_queue.broker_name == "b" for r in results)
    assert all(r.queue_offset == 12 and r.offset_msg_id.startswith("7F000001") for r in results)
    busy_ids = [decode_properties(SendMessageRequestHeader.decode_v2(c.ext_fields).properties)["UNIQ_KEY"]
                for c in busy.received if c.code == 310]
    ok_ids = [decode_properties(SendMessageRequestHeader.decode_v2(c.ext_fields).properties)["UNIQ_KEY"]
              for c in ok.received if c.code == 310]
    assert busy_ids and set(busy_ids) <= set(ok_ids)
    assert [r.msg_id for r in results] == ok_ids
    # shutdown unregisters the producer group on every broker it talked to
    for peer in (busy, ok):
        unreg = [c for c in peer.received if c.code == 35]
        assert unreg and unreg[0].ext_fields["producerGroup"] == "pg"


async def test_send_does_not_retry_non_retryable_code(peers):
    bad = await peers(broker_handler(13))
    ns = await name_server(peers, {"T": route_body([("a", bad.addr)])})
    async with Producer("pg", ns.addr) as producer:
        with pytest.raises(MQBrokerError) as info:
            await producer.send(Message("T", b"x"))
    assert info.value.code == 13
    assert len([c for c in bad.received if c.code == 310]) == 1


async def test_send_gives_up_after_retry_budget(peers):
    busy = await peers(broker_handler(14))
    ns = await name_server(peers, {"T": route_body([("a", busy.addr)], queues=2)})
    async with Producer("pg", ns.addr, retry_times_when_send_failed=2) as producer:
        with pytest.raises(MQBrokerError) as info:
            await producer.send(Message("T", b"x"))
    assert info.value.code == 14
    assert len([c for c in busy.received if c.code == 310]) == 3


async def test_send_timeout(peers):
    silent = await peers(broker_handler(lambda cmd: None))
    ns = await name_server(peers, {"T": route_body([("a", silent.addr)])})
    async with Producer("pg", ns.addr, send_timeout=0.3) as producer:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(RemotingTimeoutError):
            await producer.send(Message("T", b"x"))
        assert loop.time() - start < 1.5


async def test_unknown_topic_uses_tbw102_route(peers):
    broker = await peers(broker_handler(0))
    ns = await name_server(peers, {"TBW102": route_body([("a", broker.addr)], queues=8)})
    async with Producer("pg", ns.addr) as producer:
        queues = await producer.fetch_publish_message_queues("Brand_New")
        assert len(queues) == 4 and {q.topic for q in queues} == {"Brand_New"}
        r = await producer.send(Message("Brand_New", b"x"))
    assert r.status.name == "SEND_OK"
    [send] = [c for c in broker.received if c.code == 310]
    h = SendMessageRequestHeader.decode_v2(send.ext_fields)
    assert h.topic == "Brand_New" and h.default_topic == "TBW102" and h.default_topic_queue_nums == 4


async def test_producer_heartbeats_first_and_uses_msgpack_only_when_announced(peers):
    def handler(peer, writer, cmd):
        if cmd.code == 34:
            return cmd.make_response(0, ext_fields={"serializeTypes": "JSON,MSGPACK"})
        return broker_handler(0)(peer, writer, cmd)

    broker = await peers(handler)
    ns = await name_server(peers, {"T": route_body([("a", broker.addr)])})
    async with Producer("pg", ns.addr) as producer:
        await producer.send(Message("T", b"x"))
        await producer.send_batch([Message("T", b"y"), Message("T", b"z")])
        await producer.send_oneway(Message("T", b"w"))
        for _ in range(100):
            if len([c for c in broker.received if c.code == 310]) == 2:
                break
            await asyncio.sleep(0.01)
    first = broker.received[0]
    assert first.code == 34 and first.serialize_type == SerializeType.JSON
    hb = json.loads(first.body)
    assert {"groupName": "pg"} in hb["producerDataSet"] and hb["clientID"] == producer.client_id
    sends = [c for c in broker.received if c.code in (310, 320)]
    assert [c.code for c in sends] == [310, 320, 310]
    assert all(c.serialize_type == SerializeType.MSGPACK for c in sends)
    assert sends[2].flag == 2  # one-way
    assert SendMessageRequestHeader.decode_v2(sends[1].ext_fields).batch is True


async def test_send_before_start_is_an_error():
    producer = Producer("pg", "127.0.0.1:1")
    with pytest.raises(Exception, match="not started"):
        await producer.send(Message("T", b"x"))


# ----------------------------------------------------------------------------------------------- pull consumer wire
async def test_pull_consumer_request_fields_and_status_mapping(peers):
    from client import PullConsumer, PullStatus

    def broker(peer, writer, cmd):
        if cmd.code == 11:
            if cmd.ext_fields["topic"] == "Denied":
                return cmd.make_response(24, remark="subscription not exist")
            ext = {"nextBeginOffset": "5", "minOffset": "0", "maxOffset": "5", "suggestWhichBrokerId": "0"}
            return cmd.make_response(19, remark="OFFSET_OVERFLOW_ONE", ext_fields=ext)
        if cmd.code == 14:
            return cmd.make_response(22, remark="not found")
        if cmd.code == 15:
            return cmd.make_response(0)
        return cmd.make_response(0)

    b = await peers(broker)
    ns = await name_server(peers, {"T": route_body([("a", b.addr)], queues=2),
                                   "Denied": route_body([("a", b.addr)])})
    async with PullConsumer("cg", ns.addr) as consumer:
        [q0, q1] = await consumer.fetch_message_queues("T")
        r = await consumer.pull(q1, "TagA || TagB", offset=5, max_nums=16)
        assert r.status is PullStatus.NO_NEW_MSG and r.next_offset == 5 and r.max_offset == 5 and r.messages == []
        await consumer.pull(q1, "*", offset=5, block=True, suspend_timeout=2.0)
        assert await consumer.fetch_consume_offset(q0) == -1
        await consumer.update_offset(q0, 3)
        [dq] = await consumer.fetch_message_queues("Denied")
        with pytest.raises(MQBrokerError) as info:
            await consumer.pull(dq, "*", 0)
        assert info.value.code == 24
    pulls = [c for c in b.received if c.code == 11]
    first, blocking = pulls[0].ext_fields, pulls[1].ext_fields
    assert (first["consumerGroup"], first["topic"], first["queueId"], first["queueOffset"]) == ("cg", "T", "1", "5")
    assert first["maxMsgNums"] == "16" and first["subscription"] == "TagA || TagB" and first["expressionType"] == "TAG"
    assert int(first["sysFlag"]) == 4  # subscription flag only
    assert int(blocking["sysFlag"]) == 6 and blocking["suspendTimeoutMillis"] == "2000"  # + suspend
    [upd] = [c for c in b.received if c.code == 15]
    assert upd.ext_fields["commitOffset"] == "3" and upd.flag == 0


async def test_selector_send_is_a_single_attempt_on_the_chosen_queue(peers):
    from client import MessageQueue

    def handler(cmd):
        return 2 if SendMessageRequestHeader.decode_v2(cmd.ext_fields).queue_id == 1 else 0

    b = await peers(broker_handler(handler))
    ns = await name_server(peers, {"T": route_body([("a", b.addr)], queues=4)})
    seen = []

    def by_order_id(queues, msg, order_id):
        seen.append((len(queues), msg.tags, order_id))
        return queues[order_id % len(queues)]

    async with Producer("pg", ns.addr) as producer:
        r = await producer.send(Message("T", b"x", tags="o"), selector=by_order_id, arg=6)
        assert r.queue_id == 0 and seen == [(4, "o", 6)]  # the fake answers queueId 0 whatever was asked
        with pytest.raises(MQBrokerError) as info:
            await producer.send(Message("T", b"y"), selector=by_order_id, arg=5)
        assert info.value.code == 2
        with pytest.raises(MQBrokerError):
            await producer.send(Message("T", b"z"), queue=MessageQueue("T", "a", 1))
    asked = [SendMessageRequestHeader.decode_v2(c.ext_fields).queue_id for c in b.received if c.code == 310]
    assert asked == [2, 1, 1]  # no retry on another queue for ordered sends


async def test_notify_consumer_ids_changed_triggers_rebalance(peers):
    from client import ConsumeResult, PushConsumer

    def broker(peer, writer, cmd):
        if cmd.code == 38:
            return cmd.make_response(1, remark="no consumer for this group")
        if cmd.code == 34:
            # tell the client its group changed (one-way, like the broker does on registration)
            writer.write(encode_command(RemotingCommand(code=40, opaque=7000, flag=2,
                                                        ext_fields={"consumerGroup": "cg"})))
        return cmd.make_response(0)

    b = await peers(broker)
    ns = await name_server(peers, {"T": route_body([("a", b.addr)])})
    consumer = PushConsumer("cg", ns.addr, rebalance_interval=60)
    consumer.subscribe("T", "*")
    consumer.register_listener(lambda msgs: ConsumeResult.SUCCESS)
    await consumer.start()
    try:
        before = len([c for c in b.received if c.code == 38])
        for _ in range(100):
            if len([c for c in b.received if c.code == 38]) > before:
                break
            await asyncio.sleep(0.02)
        assert len([c for c in b.received if c.code == 38]) > before  # rebalanced again long before 60 s
        assert consumer.assigned_queues() == []  # the broker lists no consumers: take nothing
    finally:
        await consumer.shutdown()
    assert [c for c in b.received if c.code == 35][0].ext_fields["consumerGroup"] == "cg"


async def test_send_async_retries_on_the_same_broker_and_calls_back(peers):
    """Broker a refuses the first attempt of each message (busy, code 2); without fault isolation (the 4.x
    behaviour) send_async retries another queue of a."""
    attempts = {}

    def first_refused(cmd):
        uniq = decode_properties(SendMessageRequestHeader.decode_v2(cmd.ext_fields).properties)["UNIQ_KEY"]
        attempts[uniq] = attempts.get(uniq, 0) + 1
        return 2 if attempts[uniq] == 1 else 0

    a = await peers(broker_handler(first_refused))
    b = await peers(broker_handler(0))
    ns = await name_server(peers, {"T": route_body([("a", a.addr), ("b", b.addr)], queues=2)})
    called = []
    async with Producer("pg", ns.addr, send_timeout=3.0, send_latency_fault_enable=False) as producer:
        results = []
        for _ in range(6):
            task = producer.send_async(Message("T", b"hi"), callback=lambda r, e: called.append((r, e)))
            results.append(await task)
        with pytest.raises(Exception, match="topic is empty"):
            producer.send_async(Message("", b"x"))  # validation errors raise at once
    sent_to_a = [c for c in a.received if c.code == 310]
    sent_to_b = [c for c in b.received if c.code == 310]
    # every message that first went to a was retried on a (never moved to b)
    assert all(n == 2 for n in attempts.values()) and len(sent_to_a) == 2 * len(attempts)
    assert len(attempts) + len(sent_to_b) == 6
    assert [r.status.name for r in results] == ["SEND_OK"] * 6
    assert len(called) == 6 and all(e is None for _, e in called)
    retried_queues = {}
    for c in sent_to_a:
        h = SendMessageRequestHeader.decode_v2(c.ext_fields)
        retried_queues.setdefault(decode_properties(h.properties)["UNIQ_KEY"], []).append(h.queue_id)
    assert all(len(set(qs)) == 2 for qs in retried_queues.values())  # the retry used the other queue of a
