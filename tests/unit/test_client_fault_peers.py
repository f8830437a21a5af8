"""Producer fault isolation against tiny fake peers on 127.0.0.1 (silent or busy brokers on demand): what reaches
which broker. The real SIGSTOP / kill -9 runs are in tests/integration/test_client_fault_isolation.py."""

import asyncio

import pytest
from tests.support.client_fakes import FakePeer, broker_handler, name_server, route_body

from client import LocalTransactionState, Message, Producer, TransactionProducer
from client.errors import MQBrokerError, RemotingTimeoutError

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


def sends(peer):
    return [c for c in peer.received if c.code in (310, 320)]


class Switch:
    """A broker handler that stays silent (hung) until `answer` is set, then answers SUCCESS."""

    def __init__(self):
        self.answer = False

    def __call__(self, peer, writer, cmd):
        if self.answer:
            return broker_handler(0)(peer, writer, cmd)
        return cmd.make_response(0) if cmd.code == 34 else None  # connection handshakes (HEART_BEAT) still work


async def test_a_silent_broker_costs_the_sends_in_flight_only_and_a_probe_brings_it_back(peers):
    switch = Switch()
    hung = await peers(switch)
    ok = await peers(broker_handler(0))
    ns = await name_server(peers, {"T": route_body([("a", hung.addr), ("b", ok.addr)], queues=2)})
    async with Producer("pg", ns.addr, send_timeout=0.5, detect_interval=0.2, detect_timeout=0.2) as producer:
        await producer.fetch_publish_message_queues("T")
        first = await asyncio.gather(*(producer.send(Message("T", b"x")) for _ in range(40)),
                                     return_exceptions=True)
        timed_out = [r for r in first if isinstance(r, RemotingTimeoutError)]
        assert timed_out and len(timed_out) == len(sends(hung))  # the ones in flight on a when it hung
        assert all(r.message_queue.broker_name == "b" for r in first if not isinstance(r, BaseException))
        isolated = producer.isolated_brokers()
        assert set(isolated) == {"a"} and not isolated["a"].reachable
        before = len(sends(hung))
        second = await asyncio.gather(*(producer.send(Message("T", b"y")) for _ in range(40)))
        assert {r.message_queue.broker_name for r in second} == {"b"} and len(sends(hung)) == before
        await asyncio.sleep(0.6)
        assert any(c.code == 30 for c in hung.received)  # GET_MAX_OFFSET probes, unanswered so far
        assert "a" in producer.isolated_brokers()
        switch.answer = True
        # isolation lasts 10 s from the failure (ISOLATION_LATENCY), then the next answered probe ends it
        producer._faults.clock = lambda: asyncio.get_running_loop().time() + 10.0
        for _ in range(50):
            if not producer.isolated_brokers():
                break
            await asyncio.sleep(0.05)
        assert producer.isolated_brokers() == {}
        third = await asyncio.gather(*(producer.send(Message("T", b"z")) for _ in range(20)))
        assert {r.message_queue.broker_name for r in third} == {"a", "b"}


async def test_a_timed_out_attempt_is_retried_on_another_broker_within_the_send_timeout(peers):
    hung = await peers(Switch())
    ok = await peers(broker_handler(0))
    ns = await name_server(peers, {"T": route_body([("a", hung.addr), ("b", ok.addr)])})
    async with Producer("pg", ns.addr, send_timeout=3.0, send_msg_max_timeout_per_request=0.3) as producer:
        loop = asyncio.get_running_loop()
        start = loop.time()
        results = [await producer.send(Message("T", b"x")) for _ in range(6)]
        assert loop.time() - start < 1.5
    assert {r.message_queue.broker_name for r in results} == {"b"}
    assert len(sends(hung)) <= 1  # at most the first attempt; isolated from then on


async def test_ordered_sends_are_not_rerouted(peers):
    busy = await peers(broker_handler(2))
    ok = await peers(broker_handler(0))
    ns = await name_server(peers, {"T": route_body([("a", busy.addr), ("b", ok.addr)])})
    async with Producer("pg", ns.addr) as producer:
        for _ in range(4):  # round-robin over a0, b0: a refuses one of the first two, which isolates it
            assert (await producer.send(Message("T", b"x"))).message_queue.broker_name == "b"
        assert set(producer.isolated_brokers()) == {"a"} and len(sends(busy)) == 1
        queues = await producer.fetch_publish_message_queues("T")
        on_a = next(q for q in queues if q.broker_name == "a")
        before = len(sends(busy))
        with pytest.raises(MQBrokerError) as info:
            await producer.send(Message("T", b"ordered"), selector=lambda qs, msg, arg: on_a)
        assert info.value.code == 2 and len(sends(busy)) == before + 1
        with pytest.raises(MQBrokerError):
            await producer.send(Message("T", b"ordered"), queue=on_a)
        assert len(sends(busy)) == before + 2


async def test_async_and_batch_sends_move_to_another_broker(peers):
    busy = await peers(broker_handler(2))
    ok = await peers(broker_handler(0))
    ns = await name_server(peers, {"T": route_body([("a", busy.addr), ("b", ok.addr)], queues=2)})
    async with Producer("pg", ns.addr) as producer:
        results = [await producer.send_async(Message("T", b"x")) for _ in range(6)]
        results.append(await producer.send_batch([Message("T", b"1"), Message("T", b"2")]))
    assert {r.message_queue.broker_name for r in results} == {"b"}
    assert len(sends(busy)) <= 1  # one refusal isolates a for every later send


async def test_transactional_half_sends_move_to_another_broker(peers):
    busy = await peers(broker_handler(2))
    ok = await peers(broker_handler(0))
    ns = await name_server(peers, {"T": route_body([("a", busy.addr), ("b", ok.addr)])})
    async with TransactionProducer("pg", ns.addr, local_transaction=lambda m, a: LocalTransactionState.COMMIT) as tp:
        results = [await tp.send_in_transaction(Message("T", b"x")) for _ in range(4)]
    assert {r.message_queue.broker_name for r in results} == {"b"}
    assert all(r.local_transaction_state is LocalTransactionState.COMMIT for r in results)
    assert len(sends(busy)) == 1  # the one refusal that isolated a
    assert len([c for c in ok.received if c.code == 37]) == 4  # END_TRANSACTION to the broker that took each

