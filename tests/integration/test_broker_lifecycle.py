"""Broker process lifecycle: restart, graceful shutdown, crash recovery, multi-broker routing."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from protocol.bodies import TopicRouteData
from protocol.codes import RequestCode as RC, ResponseCode as R

from tests.support.wire import WireClient, pull_fields, send_v2_fields, pull_records

SUSPEND, SUB = 0x2, 0x4


async def test_restart_keeps_messages_and_offsets(broker):
    async with await WireClient.connect(broker.addr) as client:
        for i in range(10):
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("Durable", i % 2), f"m{i}".encode())
            assert resp.code == 0
        q = {"consumerGroup": "dg", "topic": "Durable", "queueId": "1", "commitOffset": "3"}
        assert (await client.request(RC.UPDATE_CONSUMER_OFFSET, q)).code == 0
        await client.heartbeat("127.0.0.1@d", consumer_group="dg", topic="Durable")
    assert broker.stop() == 0
    assert not os.path.exists(broker.store_dir / "abort")
    broker.start()
    async with await WireClient.connect(broker.addr) as client:
        got = [m.body for m in await pull_records(client, "Durable", 0)]
        assert got == [f"m{i}".encode() for i in range(0, 10, 2)]
        off = await client.request(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "dg", "topic": "Durable",
                                                              "queueId": "1"})
        assert off.code == 0 and str(off.ext_fields["offset"]) == "3"
        async with await WireClient.connect(broker.namesrv_addr) as ns:
            for topic in ("Durable", "%RETRY%dg"):
                assert (await ns.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})).code == 0


async def test_shutdown_answers_held_pulls(broker):
    async with await WireClient.connect(broker.addr) as client:
        await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("Held"), b"x")
        held = asyncio.ensure_future(client.request(
            RC.PULL_MESSAGE, pull_fields("Held", "hg", 0, 1, sys_flag=SUB | SUSPEND, suspend_ms=20_000), timeout=15))
        await asyncio.sleep(0.3)
        assert not held.done()
        start = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(None, broker.stop)
        resp = await asyncio.wait_for(held, 10)
        assert resp.code == R.PULL_NOT_FOUND
        assert time.monotonic() - start < 10
    assert broker.proc.returncode == 0


async def test_second_broker_registers_with_first_brokers_namesrv(broker_factory):
    first = broker_factory("broker-a")
    second = broker_factory("broker-b", embedded_namesrv=False, namesrv_addr=first.namesrv_addr)
    for b in (first, second):
        async with await WireClient.connect(b.addr) as client:
            assert (await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("Everywhere"), b"x")).code == 0
    async with await WireClient.connect(first.namesrv_addr) as ns:
        deadline = time.monotonic() + 10
        while True:
            resp = await ns.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Everywhere"})
            names = []
            if resp.code == 0:
                route = TopicRouteData.decode(resp.body)
                names = sorted(q.broker_name for q in route.queue_datas)
            if names == ["broker-a", "broker-b"]:
                addrs = {bd.broker_name: bd.broker_addrs[0] for bd in route.broker_datas}
                assert addrs == {"broker-a": first.addr, "broker-b": second.addr}
                break
            assert time.monotonic() < deadline, (resp.code, names)
            await asyncio.sleep(0.1)


@pytest.mark.slow
async def test_kill_9_under_load_keeps_every_acknowledged_message(broker):
    total, queues, window = 20_000, 4, 400
    acked: dict[int, tuple[int, int]] = {}  # message index -> (queue id, queue offset)
    client = await WireClient.connect(broker.addr)
    killed = False
    in_flight: dict[asyncio.Future, int] = {}
    try:
        for i in range(total):
            cmd = client.make(RC.SEND_MESSAGE_V2, send_v2_fields("CrashTopic", i % queues), f"crash-{i}".encode())
            try:
                in_flight[client.send_nowait(cmd)] = i
            except (ConnectionError, RuntimeError):
                break
            if len(in_flight) >= window:
                done, _ = await asyncio.wait(list(in_flight), timeout=10, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    index = in_flight.pop(fut)
                    if not fut.cancelled() and fut.exception() is None and fut.result().code == 0:
                        resp = fut.result()
                        acked[index] = (int(resp.ext_fields["queueId"]), int(resp.ext_fields["queueOffset"]))
            if not killed and len(acked) >= total // 2:
                broker.kill()  # SIGKILL mid-stream, requests still in flight
                killed = True
            if client.closed.is_set():
                break
        if in_flight:
            await asyncio.wait(list(in_flight), timeout=5)
            for fut, index in in_flight.items():
                if fut.done() and not fut.cancelled() and fut.exception() is None and fut.result().code == 0:
                    acked[index] = (int(fut.result().ext_fields["queueId"]), int(fut.result().ext_fields["queueOffset"]))
    finally:
        await client.close()
    assert killed and len(acked) >= total // 2
    assert os.path.exists(broker.store_dir / "abort")  # no clean shutdown happened

    broker.start()
    async with await WireClient.connect(broker.addr) as client:
        stored: dict[int, tuple[int, int]] = {}
        for queue_id in range(queues):
            msgs = await pull_records(client, "CrashTopic", queue_id)
            assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
            indexes = [int(m.body.split(b"-")[1]) for m in msgs]
            assert indexes == sorted(indexes), "per-queue order must be the send order"
            for m, index in zip(msgs, indexes):
                assert index not in stored, f"message {index} stored twice"
                stored[index] = (queue_id, m.queue_offset)
        missing = [i for i in acked if i not in stored]
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
        assert all(stored[i] == acked[i] for i in acked)



def test_bad_config_exits_with_code_2(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=x\nlistenPort=abc\n")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "broker", "-c", str(conf)], cwd=root, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2
    assert "listenPort" in proc.stderr and "abc" in proc.stderr


def test_sigint_is_a_graceful_shutdown(broker):
    import signal

    broker.proc.send_signal(signal.SIGINT)
    assert broker.proc.wait(15) == 0
    assert not (broker.store_dir / "abort").exists()
    assert "shutdown" in broker.log_text()
