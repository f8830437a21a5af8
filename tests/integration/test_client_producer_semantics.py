"""Producer semantics of the reference client against real brokers: retry_another_broker_when_not_store_ok and
the refusal of user properties with a reserved name."""

from __future__ import annotations

import pytest

from client import Message, MessageValidationError, Producer, SendStatus
from client.instance import NameServerClient

from tests.support.client_helpers import wait_for
from tests.support.broker_process import NamesrvProcess


@pytest.fixture
def slow_and_fast_broker(broker_factory):
    """broker-a flushes synchronously with a 1 ms flush timeout, so its sends answer FLUSH_DISK_TIMEOUT (stored,
    not yet safe); broker-b is an ordinary ASYNC_FLUSH broker."""
    namesrv = NamesrvProcess()
    broker_factory("broker-a", embedded_namesrv=False, namesrv_addr=namesrv.addr,
                   extra={"flushDiskType": "SYNC_FLUSH", "syncFlushTimeout": 1})
    broker_factory("broker-b", embedded_namesrv=False, namesrv_addr=namesrv.addr)
    yield namesrv
    namesrv.stop()


async def routed_on_both(ns: str, topic: str) -> None:
    lookup = NameServerClient(ns)

    async def both():
        try:
            route = await lookup.get_route(topic)
        except Exception:
            return False
        return {q.broker_name for q in route.queues} == {"broker-a", "broker-b"}
    try:
        await wait_for(both, f"{topic} routed on both brokers", 20)
    finally:
        await lookup.close()


@pytest.mark.parametrize("retry", [False, True])
async def test_not_store_ok_answers_are_retried_on_another_broker_only_when_asked(slow_and_fast_broker, retry):
    ns = slow_and_fast_broker.addr
    topic = "C13NotStoreOk"
    await routed_on_both(ns, "TBW102")
    async with Producer("c13-notok-pg", ns, retry_another_broker_when_not_store_ok=retry) as producer:
        results = [await producer.send(Message(topic, b"m%d" % i)) for i in range(20)]
    by_status = {}
    for r in results:
        by_status.setdefault((r.status, r.message_queue.broker_name), 0)
        by_status[(r.status, r.message_queue.broker_name)] += 1
    if retry:
        # broker-a answers FLUSH_DISK_TIMEOUT nearly always (its flush rarely finishes within 1 ms): each such
        # answer was re-sent to broker-b, so every result is SEND_OK
        assert all(r.status is SendStatus.SEND_OK for r in results), by_status
        assert by_status.get((SendStatus.SEND_OK, "broker-b"), 0) > 10, by_status
    else:
        assert (SendStatus.FLUSH_DISK_TIMEOUT, "broker-a") in by_status, by_status


@pytest.mark.parametrize("name", ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "TRAN_MSG", "RETRY_TOPIC", "WAIT", "PGROUP"])
async def test_user_property_with_a_reserved_name_is_refused(broker, name):
    async with Producer("c13-reserved-pg", broker.namesrv_addr) as producer:
        with pytest.raises(MessageValidationError, match=f"'{name}' is reserved"):
            await producer.send(Message("C13Reserved", b"x", properties={name: "1", "fine": "ok"}))
        ok = await producer.send(Message("C13Reserved", b"x", tags="T", keys=["k"], properties={"fine": "ok"},
                                         delay_level=1))
    assert ok.status is SendStatus.SEND_OK
