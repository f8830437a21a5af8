"""mqadmin run as a subprocess against the real broker: output, JSON and exit codes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time

import pytest

from protocol.codes import RequestCode as RC
from protocol.ids import decode_offset_msg_id

from tests.support.admin import mqadmin, ok_json
from tests.support.broker_process import free_port
from tests.support.wire import WireClient, props, send_v2_fields

async def _send(broker, topic: str, count: int, *, queue_id: int = 0, key_prefix: str = "k") -> list[dict]:
    acks = []
    async with await WireClient.connect(broker.addr) as client:
        for i in range(count):
            uniq = f"{topic[:8]:0>8}{i:024d}".upper()
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(
                topic, queue_id, props(KEYS=f"{key_prefix}{i}", TAGS="tagA", UNIQ_KEY=uniq)), f"body-{i}".encode())
            assert resp.code == 0, resp.remark
            acks.append(dict(resp.ext_fields, uniq=uniq))
    return acks


def test_help_usage_and_unreachable():
    assert mqadmin(None, "--help").returncode == 0
    topic_help = mqadmin(None, "topicStatus", "--help")
    assert topic_help.returncode == 0 and "-t TOPIC" in topic_help.stdout
    missing = mqadmin(None, "topicStatus")
    assert missing.returncode == 2 and "required" in missing.stderr
    unreachable = mqadmin(f"127.0.0.1:{free_port()}", "topicList", "--timeout", "2")
    assert unreachable.returncode == 3
    assert "cannot connect to name server" in unreachable.stderr


async def test_topic_commands(shared_broker):
    ns = shared_broker.namesrv_addr
    created = mqadmin(ns, "updateTopic", "-t", "AdminTopic", "-r", "2", "-w", "2")
    assert created.returncode == 0, created.stderr
    assert f"create topic to {shared_broker.addr} success." in created.stdout
    assert "AdminTopic" in mqadmin(ns, "topicList").stdout.split()
    route = ok_json(ns, "topicRoute", "-t", "AdminTopic")
    assert route["queueDatas"][0]["readQueueNums"] == 2
    assert route["brokerDatas"][0]["brokerAddrs"]["0"] == shared_broker.addr

    await _send(shared_broker, "AdminTopic", 3, queue_id=1)
    status = ok_json(ns, "topicStatus", "-t", "AdminTopic")
    assert [(q["queueId"], q["maxOffset"]) for q in status["queues"]] == [(0, 0), (1, 3)]
    assert status["queues"][1]["lastUpdateTimestamp"] > 0
    table = mqadmin(ns, "topicStatus", "-t", "AdminTopic").stdout
    assert "#Max Offset" in table and "broker-shared" in table

    deleted = mqadmin(ns, "deleteTopic", "-t", "AdminTopic")
    assert deleted.returncode == 0, deleted.stderr
    gone = mqadmin(ns, "topicRoute", "-t", "AdminTopic")
    assert gone.returncode == 4 and "does not exist" in gone.stderr
    assert mqadmin(ns, "topicStatus", "-t", "NoSuchTopic").returncode == 4
    bad = mqadmin(ns, "updateTopic", "-t", "bad topic!")
    assert bad.returncode == 1 and "illegal characters" in bad.stderr


async def test_topic_message_types(shared_broker):
    """updateTopic -a +message.type=X sets a topic's 5.x type (persisted in topics.json's attributes map, as the
    reference keeps it); topicRoute and topicStatus show it; a bad change gets the reference's text."""
    ns = shared_broker.namesrv_addr
    created = mqadmin(ns, "updateTopic", "-t", "AdminFifo", "-r", "1", "-w", "1", "-a", "+message.type=FIFO")
    assert created.returncode == 0, created.stderr
    route = ok_json(ns, "topicRoute", "-t", "AdminFifo")
    assert route["queueDatas"][0]["messageType"] == "FIFO"
    assert "#Message Type" in mqadmin(ns, "topicRoute", "-t", "AdminFifo").stdout
    assert ok_json(ns, "topicStatus", "-t", "AdminFifo")["messageType"] == "FIFO"
    assert "Message type: FIFO" in mqadmin(ns, "topicStatus", "-t", "AdminFifo").stdout
    path = shared_broker.store_dir / "config" / "topics.json"  # rewritten coalesced (a few seconds later)
    deadline = time.monotonic() + 15
    stored = {}
    while time.monotonic() < deadline:
        stored = json.loads(path.read_text())["topicConfigTable"].get("AdminFifo", {}) if path.exists() else {}
        if stored:
            break
        await asyncio.sleep(0.5)
    assert stored.get("attributes") == {"message.type": "FIFO"}, stored
    # updating the queues without -a keeps the type; -a changes it; an untyped topic reads as NORMAL
    assert mqadmin(ns, "updateTopic", "-t", "AdminFifo", "-r", "2", "-w", "2").returncode == 0
    assert ok_json(ns, "topicStatus", "-t", "AdminFifo")["messageType"] == "FIFO"
    assert mqadmin(ns, "updateTopic", "-t", "AdminFifo", "-a", "+message.type=DELAY").returncode == 0
    assert ok_json(ns, "topicStatus", "-t", "AdminFifo")["messageType"] == "DELAY"
    assert mqadmin(ns, "updateTopic", "-t", "AdminPlain").returncode == 0
    assert ok_json(ns, "topicStatus", "-t", "AdminPlain")["messageType"] == "NORMAL"
    bad = mqadmin(ns, "updateTopic", "-t", "AdminFifo", "-a", "+message.type=SOMETIMES")
    assert bad.returncode == 1 and "value is not in set" in bad.stderr
    mixed = mqadmin(ns, "updateTopic", "-t", "AdminMixed", "-a", "+message.type=MIXED")
    assert mixed.returncode == 1 and "MIXED message type is not supported." in mixed.stderr


async def test_message_queries(shared_broker):
    ns = shared_broker.namesrv_addr
    acks = await _send(shared_broker, "AdminMsgs", 4)
    by_key = ok_json(ns, "queryMsgByKey", "-t", "AdminMsgs", "-k", "k2")
    assert [m["body"] for m in by_key] == ["body-2"]
    by_uniq = ok_json(ns, "queryMsgById", "-i", acks[1]["uniq"], "-t", "AdminMsgs")
    assert by_uniq["body"] == "body-1" and by_uniq["msgId"] == acks[1]["uniq"]
    by_offset_id = mqadmin(ns, "queryMsgById", "-i", acks[3]["msgId"])
    assert by_offset_id.returncode == 0 and "body-3" in by_offset_id.stdout and "Store Timestamp" in by_offset_id.stdout
    at_offset = ok_json(ns, "queryMsgByOffset", "-t", "AdminMsgs", "-b", "broker-shared", "-i", "0", "-o", "2")
    assert at_offset["body"] == "body-2" and at_offset["queueOffset"] == 2
    printed = ok_json(ns, "printMsg", "-t", "AdminMsgs")
    assert [m["body"] for m in printed] == [f"body-{i}" for i in range(4)]
    limited = mqadmin(ns, "printMsg", "-t", "AdminMsgs", "-m", "2")
    assert limited.returncode == 0 and "limit reached" in limited.stdout
    assert mqadmin(ns, "queryMsgByKey", "-t", "AdminMsgs", "-k", "nope").returncode == 4
    assert mqadmin(ns, "queryMsgById", "-i", "F" * 32, "-t", "AdminMsgs").returncode == 4
    assert mqadmin(ns, "queryMsgByOffset", "-t", "AdminMsgs", "-b", "broker-shared", "-i", "0", "-o", "99"
                   ).returncode == 4


async def test_consumer_group_commands(shared_broker):
    ns = shared_broker.namesrv_addr
    await _send(shared_broker, "AdminProgress", 5)
    async with await WireClient.connect(shared_broker.addr) as consumer:
        assert (await consumer.heartbeat("127.0.0.1@admin-test", consumer_group="AdminGroup",
                                         topic="AdminProgress")).code == 0
        await consumer.request(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "AdminGroup", "topic": "AdminProgress",
                                                           "queueId": "0", "commitOffset": "2"})
        progress = ok_json(ns, "consumerProgress", "-g", "AdminGroup", "-t", "AdminProgress")
        queue0 = [q for q in progress["queues"] if q["queueId"] == 0][0]
        assert (queue0["brokerOffset"], queue0["consumerOffset"], queue0["diff"]) == (5, 2, 3)
        assert progress["diffTotal"] == 3
        human = mqadmin(ns, "consumerProgress", "-g", "AdminGroup")
        assert human.returncode == 0 and "Consume Diff Total: 3" in human.stdout
        connection = mqadmin(ns, "consumerConnection", "-g", "AdminGroup")
        assert connection.returncode == 0, connection.stderr
        assert "127.0.0.1@admin-test" in connection.stdout and "AdminProgress" in connection.stdout
        assert "CLUSTERING" in connection.stdout
    async with await WireClient.connect(shared_broker.addr) as producer:
        assert (await producer.heartbeat("127.0.0.1@admin-producer", producer_group="AdminProducers")).code == 0
        producers = mqadmin(ns, "producerConnection", "-g", "AdminProducers", "-t", "AdminProgress")
        assert producers.returncode == 0, producers.stderr
        assert "127.0.0.1@admin-producer" in producers.stdout and "#ClientAddr" in producers.stdout
        listed = ok_json(ns, "producerConnection", "-g", "AdminProducers")
        assert [c["clientId"] for c in listed["connectionSet"]] == ["127.0.0.1@admin-producer"]
        assert listed["connectionSet"][0]["clientAddr"].startswith("127.0.0.1:")
    nobody = mqadmin(ns, "producerConnection", "-g", "NoProducersHere", "-t", "AdminProgress")
    assert nobody.returncode == 4 and "not connected" in nobody.stderr
    offline = mqadmin(ns, "consumerConnection", "-g", "NobodyHere")
    assert offline.returncode == 4 and "not online" in offline.stderr
    assert mqadmin(ns, "consumerProgress", "-g", "NobodyHere").returncode == 4

    updated = ok_json(ns, "updateSubGroup", "-g", "AdminGroup", "--retry-max", "2")
    assert updated["subscriptionGroupConfig"]["retryMaxTimes"] == 2
    again = ok_json(ns, "updateSubGroup", "-g", "AdminGroup", "-q", "3")  # keeps the earlier change
    assert (again["subscriptionGroupConfig"]["retryMaxTimes"], again["subscriptionGroupConfig"]["retryQueueNums"]) \
        == (2, 3)


async def test_cluster_and_broker_status(shared_broker):
    ns = shared_broker.namesrv_addr
    cluster = mqadmin(ns, "clusterList")
    assert cluster.returncode == 0 and "DefaultCluster" in cluster.stdout and shared_broker.addr in cluster.stdout
    status = ok_json(ns, "brokerStatus")
    info = status[shared_broker.addr]
    assert info["brokerName"] == "broker-shared" and info["commitLogMaxOffset"] >= 0
    # a fraction as in the reference broker, right from boot (the store's file system as statvfs sees it)
    st = os.statvfs(shared_broker.store_dir)
    used = (st.f_blocks - st.f_bfree) / st.f_blocks
    assert 0.0 < info["commitLogDiskRatio"] < 1.0 and abs(info["commitLogDiskRatio"] - used) < 0.05
    assert isinstance(info["commitLogMaxOffset"], int) and isinstance(info["brokerVersionDesc"], str)  # numbers
    one = mqadmin(ns, "brokerStatus", "-b", shared_broker.addr)
    assert one.returncode == 0 and "msgPutTotalTodayNow" in one.stdout
    assert mqadmin(ns, "brokerStatus", "-c", "NoSuchCluster").returncode == 4


_NUMBER_TEXT = re.compile(r"-?\d+(\.\d+)?")


def _numeric_strings(value, path: str = "") -> list[str]:
    """Paths of string values that are one number (message properties are strings by nature: skipped)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() if k != "properties" for p in _numeric_strings(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _numeric_strings(v, f"{path}[{i}]")]
    return [f"{path}={value!r}"] if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value) else []


async def test_json_prints_numbers_as_numbers_and_lag_only_where_a_slave_exists(shared_broker):
    ns = shared_broker.namesrv_addr
    await _send(shared_broker, "AdminJsonNums", 3)
    cluster = ok_json(ns, "clusterList")
    (row,) = [r for r in cluster["brokers"] if r["addr"] == shared_broker.addr]
    assert row["replicationLag"] is None  # a master with no slave: no lag to speak of
    assert isinstance(row["msgPutTotal"], int) and row["msgPutTotal"] >= 3 and isinstance(row["msgGetTotal"], int)
    assert not isinstance(row["putTps"], str) and not isinstance(row["getTps"], str)  # absent before the first sample
    (line,) = [x for x in mqadmin(ns, "clusterList").stdout.splitlines() if shared_broker.addr in x]
    lag_column = re.split(r"\s{2,}", line.strip())[10]  # #Repl Lag (B)
    assert lag_column == "-", line
    status = ok_json(ns, "brokerStatus")[shared_broker.addr]
    assert status["haReplicationLagBytes"] is None and isinstance(status["msgPutTotalTodayNow"], int)
    assert re.search(r"^haReplicationLagBytes\s+: -$", mqadmin(ns, "brokerStatus").stdout, re.M)
    outputs = {"clusterList": cluster, "brokerStatus": ok_json(ns, "brokerStatus"),
               "topicStatus": ok_json(ns, "topicStatus", "-t", "AdminJsonNums"),
               "topicRoute": ok_json(ns, "topicRoute", "-t", "AdminJsonNums"),
               "printMsg": ok_json(ns, "printMsg", "-t", "AdminJsonNums"),
               "transactionStatus": ok_json(ns, "transactionStatus")}
    for command, output in outputs.items():
        assert _numeric_strings(output) == [], command


async def test_dead_letter_list_and_resend(shared_broker):
    ns = shared_broker.namesrv_addr
    acks = await _send(shared_broker, "AdminDlqSrc", 2)
    async with await WireClient.connect(shared_broker.addr) as client:
        for ack in acks:
            phys = decode_offset_msg_id(ack["msgId"])[2]
            resp = await client.request(RC.CONSUMER_SEND_MSG_BACK, {
                "offset": str(phys), "group": "AdminDlqGroup", "delayLevel": "-1", "originMsgId": ack["msgId"],
                "originTopic": "AdminDlqSrc", "maxReconsumeTimes": "16"})
            assert resp.code == 0, resp.remark
    listed = ok_json(ns, "dlqList", "-g", "AdminDlqGroup")
    assert [(m["originalTopic"], m["body"]) for m in listed["messages"]] == [("AdminDlqSrc", "body-0"),
                                                                              ("AdminDlqSrc", "body-1")]
    human = mqadmin(ns, "dlqList", "-g", "AdminDlqGroup")
    assert "2 dead message(s)" in human.stdout

    one = ok_json(ns, "resendDlq", "-g", "AdminDlqGroup", "-i", acks[0]["uniq"], "--to-original-topic")
    assert [(r["deadMsgId"], r["topic"]) for r in one["resent"]] == [(acks[0]["uniq"], "AdminDlqSrc")]
    partly = mqadmin(ns, "resendDlq", "-g", "AdminDlqGroup", "--all", "--to-original-topic")
    assert partly.returncode == 1 and "re-sent 1 message(s)" in partly.stdout  # the other one was resent before
    assert "already resent" in partly.stderr and "add --force" in partly.stderr
    everything = mqadmin(ns, "resendDlq", "-g", "AdminDlqGroup", "--all", "--to-original-topic", "--force")
    assert everything.returncode == 0, everything.stderr
    assert "re-sent 2 message(s)" in everything.stdout and acks[1]["uniq"] in everything.stdout
    to_retry = mqadmin(ns, "resendDlq", "-g", "AdminDlqGroup", "-i", acks[1]["uniq"], "--force")
    assert to_retry.returncode == 0, to_retry.stderr
    assert "to %RETRY%AdminDlqGroup (only this group consumes them again)" in to_retry.stdout
    retried = [m["body"] for m in ok_json(ns, "printMsg", "-t", "%RETRY%AdminDlqGroup")]
    assert retried == ["body-1"]
    elsewhere = ok_json(ns, "resendDlq", "-g", "AdminDlqGroup", "-i", acks[1]["uniq"], "--to-topic", "AdminDlqSrc",
                        "--force")
    assert [r["topic"] for r in elsewhere["resent"]] == ["AdminDlqSrc"]
    bodies = [m["body"] for m in ok_json(ns, "printMsg", "-t", "AdminDlqSrc")]
    assert sorted(bodies) == ["body-0"] * 3 + ["body-1"] * 4  # body-1 also went out with the first --all
    again = mqadmin(ns, "resendDlq", "-g", "AdminDlqGroup", "-i", acks[1]["uniq"])
    assert again.returncode == 1 and "already resent" in again.stderr and "--force" in again.stderr

    assert mqadmin(ns, "dlqList", "-g", "NoDeadLetters").returncode == 4
    missing = mqadmin(ns, "resendDlq", "-g", "AdminDlqGroup", "-i", "NOSUCHID")
    assert missing.returncode == 4


@pytest.mark.parametrize("command", ["updateTopic", "deleteTopic", "consumerProgress", "queryMsgByOffset",
                                     "printMsg", "resendDlq", "queryMsgTraceById", "queryTraceByMsgId"])
def test_every_sub_command_has_help(command):
    result = mqadmin(None, command, "--help")
    assert result.returncode == 0 and "--json" in result.stdout


async def test_json_errors_are_json(shared_broker):
    """--json: a failure is a JSON object on stdout (error, code, remark, exitCode) besides the stderr line."""
    ns = shared_broker.namesrv_addr
    missing = mqadmin(ns, "topicRoute", "-t", "NoSuchTopicForJson", "--json")
    assert missing.returncode == 4
    error = json.loads(missing.stdout)
    assert error["exitCode"] == 4 and error["command"] == "topicRoute" and "NoSuchTopicForJson" in error["error"]
    assert missing.stderr.startswith("mqadmin topicRoute: error: ")
    refused = mqadmin(ns, "updateTopic", "-t", "%RETRY%bad json", "-b", shared_broker.addr, "--json")
    assert refused.returncode != 0
    error = json.loads(refused.stdout)
    assert error["exitCode"] == refused.returncode and error["error"]
    unreachable = mqadmin("127.0.0.1:1", "clusterList", "--json", "--timeout", "2")
    assert unreachable.returncode == 3 and json.loads(unreachable.stdout)["exitCode"] == 3
