"""Issue 2 requirements proven through the real broker process: broker.conf start-up checks,
retention, idle-connection and heartbeat expiry with NOTIFY_CONSUMER_IDS_CHANGED, the VIP port,
frame limits."""

from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import sys
import time

import pytest

from protocol.codes import RequestCode as RC, ResponseCode as R

from tests.support.broker_process import PROJECT_ROOT
from tests.support.wire import WireClient, props, pull_fields, records, send_v2_fields, wait_until

ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))


def _drain(client: WireClient) -> None:
    """Forget broker->client requests received so far (a joining consumer is notified itself)."""
    while not client.server_requests.empty():
        client.server_requests.get_nowait()


async def _join(client: WireClient, client_id: str, group: str, topic: str) -> None:
    assert (await client.heartbeat(client_id, consumer_group=group, topic=topic)).code == R.SUCCESS


def _group_ids(resp) -> list[str]:
    return sorted(json.loads(resp.body)["consumerIdList"]) if resp.code == R.SUCCESS else []


# ---- broker.conf through the real entry point -------------------------------------------------------
def test_a_reference_key_this_broker_lacks_is_a_warning_and_the_broker_starts(broker_factory):
    broker = broker_factory("broker-unknown", extra={"sendMessageThreadPoolNums": "4", "listenHost": "127.0.0.1"})
    assert broker.proc.poll() is None
    text = broker.log_text()
    assert text.count("sendMessageThreadPoolNums") == 1 and "does not support" in text


def test_a_misspelt_key_refuses_the_start_naming_the_nearest_key(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=x\nstorePathRootDir={tmp_path / 'store'}\nlistenPrt=50921\n")
    proc = subprocess.run([sys.executable, "-m", "broker", "-c", str(conf)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "mqbroker: unknown key 'listenPrt' in broker.conf line 3: did you mean listenPort?"]
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("line, key", [
    ("flushDiskType=MAYBE_FLUSH", "flushDiskType"),
    ("autoCreateTopicEnable=yes", "autoCreateTopicEnable"),
    ("deleteWhen=25", "deleteWhen"),
    ("messageDelayLevel=1s 5x", "messageDelayLevel"),
])
def test_malformed_value_exits_non_zero_naming_the_key(tmp_path, line, key):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=x\nstorePathRootDir={tmp_path / 'store'}\n{line}\n")
    proc = subprocess.run([sys.executable, "-m", "broker", "-c", str(conf)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert key in proc.stderr and "line 3" in proc.stderr
    assert "boot success" not in proc.stdout
    assert not (tmp_path / "store").exists()  # nothing was created


# ---- retention ------------------------------------------------------------------------------------
async def test_retention_deletes_old_commit_log_and_consume_queue_files(broker_factory):
    broker = broker_factory("broker-retention", extra={
        "mappedFileSizeCommitLog": 64 * 1024, "mappedFileSizeConsumeQueue": 20 * 40,
        "fileReservedTime": 0, "deleteWhen": ALL_HOURS, "cleanResourceInterval": 100,
        "messageIndexEnable": "false"})
    topic = "Retained"
    commit_dir = broker.store_dir / "commitlog"
    cq_dir = broker.store_dir / "consumequeue" / topic / "0"
    async with await WireClient.connect(broker.addr) as client:
        sent = 0
        for _ in range(6):  # ~6 commit-log files and 6+ consume-queue files
            futures = [client.send_nowait(client.make(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0),
                                                      f"r{sent + i}".encode() + b"." * 1000)) for i in range(50)]
            await client.writer.drain()
            assert all(r.code == R.SUCCESS for r in await asyncio.wait_for(asyncio.gather(*futures), 10))
            sent += 50
        q = {"topic": topic, "queueId": "0"}

        async def trimmed():
            resp = await client.request(RC.GET_MIN_OFFSET, q)
            files = sorted(os.listdir(commit_dir))
            return (int(resp.ext_fields["offset"]), files) if len(files) == 1 else None

        min_offset, files = await wait_until(trimmed, "retention to delete old files")
        assert files[0] != "0" * 20  # the first file went, the file being written stayed
        assert 0 < min_offset < sent
        assert str((await client.request(RC.GET_MAX_OFFSET, q)).ext_fields["offset"]) == str(sent)
        cq_files = sorted(os.listdir(cq_dir))
        assert cq_files and cq_files[0] != "0" * 20 and len(cq_files) < sent // 40

        moved = await client.request(RC.PULL_MESSAGE, pull_fields(topic, "rg", 0, 0))
        assert moved.code == R.PULL_OFFSET_MOVED
        assert int(moved.ext_fields["nextBeginOffset"]) == min_offset
        assert int(moved.ext_fields["minOffset"]) == min_offset
        found = await client.request(RC.PULL_MESSAGE, pull_fields(topic, "rg", 0, min_offset))
        assert found.code == R.SUCCESS
        first = records(found.body)[0]
        assert first.queue_offset == min_offset and first.body.startswith(f"r{min_offset}.".encode())
        # still writable after the deletions, offsets continue
        more = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0), b"after")
        assert more.code == R.SUCCESS and int(more.ext_fields["queueOffset"]) == sent


# ---- expiry and membership notifications -------------------------------------------------------------
async def test_idle_connection_is_closed_and_group_is_notified(broker_factory):
    broker = broker_factory("broker-idle", extra={"serverChannelMaxIdleTimeSeconds": 1})
    group = "IdleGroup"
    async with await WireClient.connect(broker.addr) as active, await WireClient.connect(broker.addr) as idle:
        await _join(active, "127.0.0.1@active", group, "IdleT")
        _drain(active)
        await _join(idle, "127.0.0.1@idle", group, "IdleT")
        joined = await asyncio.wait_for(active.server_requests.get(), 5)
        assert joined.code == RC.NOTIFY_CONSUMER_IDS_CHANGED
        start = time.monotonic()
        while not idle.closed.is_set():  # keep `active` busy; `idle` says nothing
            assert time.monotonic() - start < 6, "idle connection was not closed"
            await active.request(RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"})
            await asyncio.sleep(0.2)
        assert time.monotonic() - start >= 0.8
        notify = await asyncio.wait_for(active.server_requests.get(), 5)
        assert notify.code == RC.NOTIFY_CONSUMER_IDS_CHANGED and notify.ext_fields["consumerGroup"] == group
        listed = await active.request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        assert _group_ids(listed) == ["127.0.0.1@active"]
        assert not active.closed.is_set()


async def test_client_without_heartbeat_expires(broker_factory):
    broker = broker_factory("broker-hb", extra={"channelExpiredTimeout": 500})
    group = "HbGroup"
    async with await WireClient.connect(broker.addr) as steady, await WireClient.connect(broker.addr) as silent:
        await _join(steady, "127.0.0.1@steady", group, "HbT")
        _drain(steady)
        await _join(silent, "127.0.0.1@silent", group, "HbT")
        await asyncio.wait_for(steady.server_requests.get(), 5)  # joined notification

        async def silent_dropped():
            # `silent` keeps its connection busy but sends no heartbeat; `steady` heartbeats
            await steady.heartbeat("127.0.0.1@steady", consumer_group=group, topic="HbT")
            if not silent.closed.is_set():
                await silent.request(RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"})
            listed = await steady.request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
            return _group_ids(listed) == ["127.0.0.1@steady"]

        await wait_until(silent_dropped, "the silent client to expire", timeout=8)
        notify = await asyncio.wait_for(steady.server_requests.get(), 5)
        assert notify.code == RC.NOTIFY_CONSUMER_IDS_CHANGED


async def test_unregister_and_disconnect_notify_the_rest_of_the_group(shared_broker):
    group = "LeaveGroup"
    async with await WireClient.connect(shared_broker.addr) as stay:
        await _join(stay, "127.0.0.1@stay", group, "LeaveT")
        _drain(stay)
        leave = await WireClient.connect(shared_broker.addr)
        await _join(leave, "127.0.0.1@leave", group, "LeaveT")
        assert (await asyncio.wait_for(stay.server_requests.get(), 5)).code == RC.NOTIFY_CONSUMER_IDS_CHANGED
        unreg = await leave.request(RC.UNREGISTER_CLIENT, {"clientID": "127.0.0.1@leave", "consumerGroup": group})
        assert unreg.code == R.SUCCESS
        assert (await asyncio.wait_for(stay.server_requests.get(), 5)).code == RC.NOTIFY_CONSUMER_IDS_CHANGED
        # join again, then just drop the connection
        await _join(leave, "127.0.0.1@leave", group, "LeaveT")
        assert (await asyncio.wait_for(stay.server_requests.get(), 5)).code == RC.NOTIFY_CONSUMER_IDS_CHANGED
        await leave.close()
        notify = await asyncio.wait_for(stay.server_requests.get(), 5)
        assert notify.code == RC.NOTIFY_CONSUMER_IDS_CHANGED and notify.is_oneway
        listed = await stay.request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        assert _group_ids(listed) == ["127.0.0.1@stay"]


# ---- VIP port and frame limits ---------------------------------------------------------------------
async def test_vip_channel_on_listen_port_minus_two(shared_broker):
    # BrokerProcess picks listenPort so that listenPort - 2 was free too
    async with await WireClient.connect(f"127.0.0.1:{shared_broker.port - 2}") as vip:
        sent = await vip.request(RC.SEND_MESSAGE_V2, send_v2_fields("VipTopic", 0), b"via-vip")
        assert sent.code == R.SUCCESS
        off = {"consumerGroup": "vipg", "topic": "VipTopic", "queueId": "0", "commitOffset": "1"}
        assert (await vip.request(RC.UPDATE_CONSUMER_OFFSET, off)).code == R.SUCCESS
    async with await WireClient.connect(shared_broker.addr) as main:
        pulled = await main.request(RC.PULL_MESSAGE, pull_fields("VipTopic", "vipg", 0, 0))
        assert [m.body for m in records(pulled.body)] == [b"via-vip"]
        got = await main.request(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "vipg", "topic": "VipTopic",
                                                            "queueId": "0"})
        assert str(got.ext_fields["offset"]) == "1"


async def test_impossible_header_length_closes_only_that_connection(shared_broker):
    async with await WireClient.connect(shared_broker.addr) as good:
        bad = await WireClient.connect(shared_broker.addr)
        # frame of 8 bytes claiming a 1000-byte JSON header
        await bad.send_raw(struct.pack(">iI", 8, 1000) + b"{}\x00\x00")
        await asyncio.wait_for(bad.closed.wait(), 5)
        await bad.close()
        assert (await good.request(RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"})).code == R.SUCCESS


async def test_frame_max_length_is_configurable(broker_factory):
    broker = broker_factory("broker-frames", extra={"frameMaxLength": 4096})
    async with await WireClient.connect(broker.addr) as good:
        small = await good.request(RC.SEND_MESSAGE_V2, send_v2_fields("Frames"), b"s" * 1000)
        assert small.code == R.SUCCESS
        big = await WireClient.connect(broker.addr)
        await big.send_raw(struct.pack(">i", 8000) + b"\x00" * 64)  # announced length over the limit
        await asyncio.wait_for(big.closed.wait(), 5)
        await big.close()
        again = await good.request(RC.SEND_MESSAGE_V2, send_v2_fields("Frames"), b"s" * 1000)
        assert again.code == R.SUCCESS


# ---- tag filtering trusts tags, not the client's codeSet -------------------------------------------------
async def test_registered_subscription_codes_are_recomputed_from_tags(shared_broker):
    topic, group = "CodeSetTrust", "CodeSetGroup"
    async with await WireClient.connect(shared_broker.addr) as client:
        for tag in ("A", "B", "A"):
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0, props(TAGS=tag)), tag.encode())
            assert resp.code == R.SUCCESS
        sub = {"topic": topic, "subString": "A", "tagsSet": ["A"], "codeSet": [12345, 66],  # wrong codes
               "subVersion": int(time.time() * 1000), "expressionType": "TAG"}
        body = json.dumps({"clientID": "127.0.0.1@codes", "producerDataSet": [], "consumerDataSet": [
            {"groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
             "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": [sub], "unitMode": False}]})
        assert (await client.request(RC.HEART_BEAT, {}, body.encode())).code == R.SUCCESS
        pulled = await client.request(RC.PULL_MESSAGE, pull_fields(topic, group, 0, 0, sys_flag=0))  # registered sub
        assert pulled.code == R.SUCCESS
        assert [m.body for m in records(pulled.body)] == [b"A", b"A"]


# ---- configuration and offsets on disk ---------------------------------------------------------------
async def test_state_files_in_store_config(broker_factory):
    broker = broker_factory("broker-files")
    async with await WireClient.connect(broker.addr) as client:
        assert (await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("FileTopic", 1), b"x")).code == R.SUCCESS
        await _join(client, "127.0.0.1@files", "FileGroup", "FileTopic")
        offset = {"consumerGroup": "FileGroup", "topic": "FileTopic", "queueId": "1", "commitOffset": "1"}
        assert (await client.request(RC.UPDATE_CONSUMER_OFFSET, offset)).code == R.SUCCESS
    assert broker.stop() == 0
    config_dir = broker.store_dir / "config"
    offsets = json.loads((config_dir / "consumerOffset.json").read_text())["offsetTable"]
    assert offsets["FileTopic@FileGroup"] == {"1": 1}
    topics = json.loads((config_dir / "topics.json").read_text())["topicConfigTable"]
    assert topics["FileTopic"]["writeQueueNums"] == 4 and "%RETRY%FileGroup" in topics
    groups = json.loads((config_dir / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    assert groups["FileGroup"]["groupName"] == "FileGroup"
