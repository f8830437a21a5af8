"""A full disk, with the real Broker and MessageStore in-process (fault injected into file creation
and into the disk-usage probe), driven over TCP: sends are refused with a clear error and nothing
already stored is damaged."""

from __future__ import annotations

import errno
import os

import pytest

import broker.store.message_store as message_store_module
from broker.broker import Broker
from broker.config import BrokerConfig
from protocol.codes import RequestCode as RC, ResponseCode as R

from tests.support.broker_process import free_port
from tests.support.wire import WireClient, pull_fields, records, send_v2_fields

COMMIT_LOG_FILE = 64 * 1024


@pytest.fixture
async def running_broker(tmp_path):
    config = BrokerConfig(
        broker_name="broker-disk", broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=free_port(),
        namesrv_addr=None, enable_embedded_namesrv=False, enable_vip_channel=False,
        store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=COMMIT_LOG_FILE,
        mapped_file_size_consume_queue=20 * 1000)
    instance = Broker(config)
    await instance.start()
    yield instance
    await instance.shutdown()


def _no_space(fd, offset, length):
    raise OSError(errno.ENOSPC, "No space left on device")


async def _send(client: WireClient, topic: str, i: int, size: int = 1000):
    return await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0), f"d{i}.".encode() + b"x" * size)


async def test_send_is_refused_when_no_store_file_can_be_created(running_broker, monkeypatch):
    topic = "DiskFull"
    async with await WireClient.connect(f"127.0.0.1:{running_broker.port}") as client:
        acked = []
        i = 0
        while running_broker.store.commit_log_max_offset < COMMIT_LOG_FILE - 3000:
            resp = await _send(client, topic, i)
            assert resp.code == R.SUCCESS
            acked.append(i)
            i += 1
        monkeypatch.setattr(os, "posix_fallocate", _no_space)
        refused = 0
        for _ in range(5):  # the next file cannot be created: refused, every time, cleanly
            resp = await _send(client, topic, i)
            if resp.code == R.SUCCESS:
                acked.append(i)
            else:
                assert resp.code == R.SERVICE_NOT_AVAILABLE
                assert "disk is full" in resp.remark
                refused += 1
            i += 1
        assert refused >= 3
        # a new topic needs a consume-queue file: refused as well
        other = await _send(client, "DiskFullOther", 0)
        assert other.code == R.SERVICE_NOT_AVAILABLE and "disk is full" in other.remark
        # reads keep working while the disk is full
        assert (await client.request(RC.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})).code == R.SUCCESS
        monkeypatch.undo()
        resp = await _send(client, topic, i)
        assert resp.code == R.SUCCESS and int(resp.ext_fields["queueOffset"]) == len(acked)
        acked.append(i)

        bodies = []
        offset = 0
        for _ in range(len(acked)):
            pulled = await client.request(RC.PULL_MESSAGE, pull_fields(topic, "dg", 0, offset, max_nums=32))
            if pulled.code != R.SUCCESS:
                break
            msgs = records(pulled.body)
            assert [m.queue_offset for m in msgs] == list(range(offset, offset + len(msgs)))
            bodies.extend(int(m.body.split(b".")[0][1:]) for m in msgs)
            offset = int(pulled.ext_fields["nextBeginOffset"])
        assert bodies == acked  # every acknowledged message once, in order; nothing refused got in


async def test_send_is_refused_above_the_disk_usage_warning_level(running_broker, monkeypatch):
    async with await WireClient.connect(f"127.0.0.1:{running_broker.port}") as client:
        assert (await _send(client, "DiskRatio", 0)).code == R.SUCCESS
        monkeypatch.setattr(message_store_module, "disk_used_ratio", lambda path: 97.5)
        running_broker.store._disk_check_at = 0  # re-measure now instead of within a second
        resp = await _send(client, "DiskRatio", 1)
        assert resp.code == R.SERVICE_NOT_AVAILABLE
        assert "disk is full" in resp.remark and "97.5%" in resp.remark
        monkeypatch.setattr(message_store_module, "disk_used_ratio", lambda path: 10.0)
        running_broker.store._disk_check_at = 0
        resp = await _send(client, "DiskRatio", 2)
        assert resp.code == R.SUCCESS and resp.ext_fields["queueOffset"] == "1"
