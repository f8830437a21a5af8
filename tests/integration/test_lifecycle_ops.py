"""Operational lifecycle: SIGTERM under load loses nothing acknowledged, restart is clean and fast, a
second broker on the same store is refused, start-up names its directories, INFO logs name clients."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

from tests.support.broker_process import PROJECT_ROOT, BrokerProcess
from protocol.codes import RequestCode as RC, ResponseCode as R

from tests.support.wire import WireClient, pull_fields, records, send_v2_fields

QUEUES = 4
RESTART_BUDGET_S = 10.0


async def _drain_topic(client: WireClient, topic: str) -> list[bytes]:
    bodies = []
    for queue_id in range(QUEUES):
        offset = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            resp = await client.request(RC.PULL_MESSAGE, pull_fields(topic, "verify", queue_id, offset, max_nums=32))
            if resp.code == R.PULL_NOT_FOUND:
                break
            assert resp.code == 0, (resp.code, resp.remark)
            bodies.extend(m.body for m in records(resp.body))
            offset = int(resp.ext_fields["nextBeginOffset"])
    return bodies


async def test_sigterm_under_load_loses_nothing_acknowledged(broker):
    acked: list[bytes] = []
    stop = asyncio.Event()

    async def produce(worker: int) -> None:
        try:
            async with await WireClient.connect(broker.addr) as client:
                i = 0
                while not stop.is_set():
                    body = f"w{worker}-{i}".encode()
                    futures = []
                    for j in range(8):  # pipelined, like a busy producer
                        cmd = client.make(RC.SEND_MESSAGE_V2, send_v2_fields("Load", (i + j) % QUEUES),
                                          body + f"-{j}".encode())
                        futures.append((body + f"-{j}".encode(), client.send_nowait(cmd)))
                    await client.writer.drain()
                    for sent, fut in futures:
                        resp = await asyncio.wait_for(fut, 5)
                        if resp.code == 0:
                            acked.append(sent)
                    i += 1
        except (ConnectionError, OSError, asyncio.TimeoutError):
            pass  # the broker went away mid-flight: unacknowledged sends may be lost

    producers = [asyncio.ensure_future(produce(w)) for w in range(3)]
    await asyncio.sleep(0.8)
    assert len(acked) > 50, "the load never got going"
    exit_code = await asyncio.get_running_loop().run_in_executor(None, broker.stop)
    stop.set()
    await asyncio.wait_for(asyncio.gather(*producers), 15)
    assert exit_code == 0, broker.log_text()[-2000:]
    assert not (broker.store_dir / "abort").exists()
    assert "shutdown." in broker.log_text()

    started = time.monotonic()
    broker.start()
    assert time.monotonic() - started < RESTART_BUDGET_S
    assert "abnormal" not in broker.log_text().split("boot success.")[-2]  # normal recovery on restart
    async with await WireClient.connect(broker.addr) as client:
        stored = await _drain_topic(client, "Load")
    missing = set(acked) - set(stored)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"


def _run_broker_cli(conf_path, timeout: float = 20.0) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "broker", "-c", str(conf_path), "-l", "WARNING"],
                          cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout)


async def test_second_broker_on_the_same_store_is_refused(broker, tmp_path):
    assert "store root: " + str(broker.store_dir) in broker.log_text()
    assert "config: " + str(broker.store_dir / "config") in broker.log_text()
    (tmp_path / "other").mkdir()
    intruder = BrokerProcess(tmp_path / "other", "intruder", extra={"storePathRootDir": broker.store_dir})
    async with await WireClient.connect(broker.addr) as client:
        assert (await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("Before"), b"ok")).code == 0
    topics_json = broker.store_dir / "config" / "topics.json"
    deadline = time.monotonic() + 5
    while not topics_json.exists() or b"Before" not in topics_json.read_bytes():
        assert time.monotonic() < deadline, "topics.json was never written"
        await asyncio.sleep(0.05)
    topics_before = topics_json.read_bytes()
    started = time.monotonic()
    result = _run_broker_cli(intruder.conf_path)
    assert result.returncode == 3, result.stdout + result.stderr
    assert time.monotonic() - started < 15
    assert f"store directory {broker.store_dir} is locked by another running broker" in result.stderr
    assert f"pid {broker.proc.pid}" in result.stderr
    assert "boot success" not in result.stdout
    # the running broker is untouched and still serving
    assert topics_json.read_bytes() == topics_before
    name_json = json.loads((broker.store_dir / "config" / "brokerName.json").read_text())
    assert name_json["brokerName"] == broker.name  # not the intruder's: it never passed its start-up checks
    assert (broker.store_dir / "abort").exists()
    async with await WireClient.connect(broker.addr) as client:
        assert (await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("StillHere"), b"ok")).code == 0


async def _wait_for_log(process: BrokerProcess, text: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in process.log_text():
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{process.log_text()[-2000:]}"
        await asyncio.sleep(0.05)


async def test_info_log_names_clients_and_group_changes(tmp_path):
    process = BrokerProcess(tmp_path, "broker-log")
    try:
        process.start(log_level="INFO")
        async with await WireClient.connect(process.addr) as first:
            await first.heartbeat("127.0.0.1@one", consumer_group="LogGroup", topic="LogTopic")
            await _wait_for_log(process, "client connected: 127.0.0.1@one")
            async with await WireClient.connect(process.addr) as second:
                await second.heartbeat("127.0.0.1@two", consumer_group="LogGroup", topic="LogTopic")
                await _wait_for_log(process, "consumer group LogGroup changed")
                await first.heartbeat("127.0.0.1@one", consumer_group="LogGroup", topic="LogTopic")  # no change
            await _wait_for_log(process, "client disconnected: 127.0.0.1@two")
        log_text = process.log_text()
        assert log_text.count("client connected: 127.0.0.1@one") == 1  # not once per heartbeat
        assert "The broker[broker-log" in log_text
    finally:
        assert process.stop() == 0
