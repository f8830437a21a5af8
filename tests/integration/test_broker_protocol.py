"""The real broker subprocess, driven with raw protocol frames (one broker for the module)."""

from __future__ import annotations

import asyncio
import json
import struct
import time

import pytest

from protocol.bodies import TopicRouteData
from protocol.codes import RequestCode as RC, ResponseCode as R, SerializeType
from protocol.ids import decode_offset_msg_id
from protocol.message import BatchEntry, encode_batch_body

from tests.support.wire import WireClient, props, pull_fields, records, send_v1_fields, send_v2_fields

SUSPEND, SUB, COMMIT = 0x2, 0x4, 0x1


@pytest.fixture
async def client(shared_broker):
    c = await WireClient.connect(shared_broker.addr)
    yield c
    await c.close()


async def _send(client, topic, queue_id=0, tags=None, keys=None, body=b"hello", stype=SerializeType.JSON):
    p = {}
    if tags:
        p["TAGS"] = tags
    if keys:
        p["KEYS"] = keys
    resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, queue_id, props(**p)), body,
                                serialize_type=stype)
    assert resp.code == 0, resp.remark
    return resp


async def _pull(client, topic, group, offset=0, queue_id=0, sub="*", sys_flag=SUB, suspend_ms=500, timeout=5.0,
                max_nums=32):
    return await client.request(RC.PULL_MESSAGE, pull_fields(topic, group, queue_id, offset, sys_flag=sys_flag,
                                                             subscription=sub, suspend_ms=suspend_ms,
                                                             max_nums=max_nums), timeout=timeout)


async def test_routes_for_auto_created_and_retry_topics(shared_broker, client):
    async with await WireClient.connect(shared_broker.namesrv_addr) as ns:
        missing = await ns.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "RouteAuto"})
        assert missing.code == R.TOPIC_NOT_EXIST
        tbw = await ns.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        assert tbw.code == 0
        await _send(client, "RouteAuto")
        route = await ns.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "RouteAuto"})
        assert route.code == 0, route.remark
        data = TopicRouteData.decode(route.body)
        assert data.broker_datas[0].broker_addrs[0] == shared_broker.addr
        assert data.queue_datas[0].write_queue_nums == 4
        hb = await client.heartbeat("127.0.0.1@route", consumer_group="RouteGroup", topic="RouteAuto")
        assert hb.code == 0
        retry = await ns.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%RouteGroup"})
        assert retry.code == 0, retry.remark


async def test_heartbeat_response_announces_msgpack(client):
    resp = await client.heartbeat("127.0.0.1@hb", producer_group="hbProducer")
    assert resp.code == 0 and resp.version >= 401
    assert resp.ext_fields["IS_SUPPORT_HEART_BEAT_V2"] == "false"
    assert resp.ext_fields["serializeTypes"] == "JSON,ROCKETMQ,MSGPACK"
    assert "IS_SUB_CHANGE" in resp.ext_fields


@pytest.mark.parametrize("stype", [SerializeType.JSON, SerializeType.ROCKETMQ, SerializeType.MSGPACK])
async def test_send_v1_v2_batch_and_pull_back(shared_broker, client, stype):
    topic = f"SendAll{int(stype)}"
    p = props(TAGS="TagA", KEYS="k1 k2", UNIQ_KEY="C0A8000A303918B4AAC20BEBC2000000")
    r1 = await client.request(RC.SEND_MESSAGE, send_v1_fields(topic, 1, p), b"v1-body", serialize_type=stype)
    assert r1.code == 0, r1.remark
    assert r1.serialize_type == stype
    assert r1.ext_fields["MSG_REGION"] == "DefaultRegion" and r1.ext_fields["TRACE_ON"] == "true"
    assert r1.ext_fields["transactionId"] == "C0A8000A303918B4AAC20BEBC2000000"
    assert str(r1.ext_fields["queueOffset"]) == "0" and str(r1.ext_fields["queueId"]) == "1"
    r2 = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 1, props(TAGS="TagB")), b"v2-body",
                              serialize_type=stype)
    assert r2.code == 0 and str(r2.ext_fields["queueOffset"]) == "1"
    entries = [BatchEntry(0, f"b{i}".encode(), props(TAGS="TagC", UNIQ_KEY=f"U{i:031d}")) for i in range(5)]
    fields = send_v2_fields(topic, 1, props(UNIQ_KEY="BATCHKEY"))
    fields["m"] = "true"
    r3 = await client.request(RC.SEND_BATCH_MESSAGE, fields, encode_batch_body(entries), serialize_type=stype)
    assert r3.code == 0, r3.remark
    assert str(r3.ext_fields["queueOffset"]) == "2"
    batch_ids = r3.ext_fields["msgId"].split(",")
    assert len(batch_ids) == 5

    pull = await _pull(client, topic, "SendAllGroup", queue_id=1)
    assert pull.code == 0 and pull.remark == "FOUND"
    assert pull.serialize_type == SerializeType.JSON
    assert str(pull.ext_fields["nextBeginOffset"]) == "7" and str(pull.ext_fields["maxOffset"]) == "7"
    msgs = records(pull.body)
    assert [m.body for m in msgs] == [b"v1-body", b"v2-body"] + [f"b{i}".encode() for i in range(5)]
    assert [m.queue_offset for m in msgs] == list(range(7))
    first = msgs[0]
    assert first.topic == topic and first.queue_id == 1
    assert first.properties["TAGS"] == "TagA" and first.properties["KEYS"] == "k1 k2"
    assert first.properties["UNIQ_KEY"] == "C0A8000A303918B4AAC20BEBC2000000"
    assert first.properties["CLUSTER"] == "DefaultCluster"
    assert first.store_host == ("127.0.0.1", shared_broker.port) and first.born_host[0] == "127.0.0.1"
    assert msgs[1].properties.get("UNIQ_KEY")  # added by the broker
    for i, m in enumerate(msgs[2:]):  # batch: own properties only, no batch-level UNIQ_KEY
        assert m.properties["UNIQ_KEY"] == f"U{i:031d}" and m.properties["TAGS"] == "TagC"
        assert m.offset_msg_id == batch_ids[i]
    assert first.offset_msg_id == r1.ext_fields["msgId"]
    # VIEW_MESSAGE_BY_ID returns the very same bytes as the pull body
    pos = 0
    for m in msgs:
        view = await client.request(RC.VIEW_MESSAGE_BY_ID, {"offset": str(m.physical_offset)})
        assert view.code == 0
        assert view.body == pull.body[pos:pos + m.total_size]
        pos += m.total_size


async def test_tag_filtering(client):
    topic = "TagFilter"
    for tag in ("A", "B", None, "A", "C"):
        await _send(client, topic, tags=tag, body=(tag or "none").encode())
    bodies = lambda resp: [m.body for m in records(resp.body)]
    assert bodies(await _pull(client, topic, "tf", sub="A")) == [b"A", b"A"]
    assert bodies(await _pull(client, topic, "tf", sub=" A || B ")) == [b"A", b"B", b"A"]
    assert bodies(await _pull(client, topic, "tf", sub="*")) == [b"A", b"B", b"none", b"A", b"C"]
    assert bodies(await _pull(client, topic, "tf", sub="")) == [b"A", b"B", b"none", b"A", b"C"]
    nothing = await _pull(client, topic, "tf", sub="Z")
    assert nothing.code == R.PULL_RETRY_IMMEDIATELY and str(nothing.ext_fields["nextBeginOffset"]) == "5"
    # the registered subscription (no FLAG_SUBSCRIPTION) is used when the request carries none
    hb = await client.heartbeat("127.0.0.1@tf", consumer_group="tfReg", topic=topic, sub_string="C")
    assert hb.code == 0
    assert bodies(await _pull(client, topic, "tfReg", sub="*", sys_flag=0)) == [b"C"]
    no_sub = await _pull(client, topic, "tfUnknown", sys_flag=0)
    assert no_sub.code == R.SUBSCRIPTION_NOT_EXIST
    sql = await client.request(RC.PULL_MESSAGE, {**pull_fields(topic, "tf"), "expressionType": "SQL92",
                                                 "subscription": "a > 1"})
    assert sql.code == R.SYSTEM_ERROR and "SQL92" in sql.remark


async def test_pull_status_codes(client):
    topic = "PullCodes"
    await _send(client, topic)
    assert (await _pull(client, topic, "pc", offset=5)).code == R.PULL_OFFSET_MOVED
    overflow_one = await _pull(client, topic, "pc", offset=1)
    assert overflow_one.code == R.PULL_NOT_FOUND and overflow_one.remark == "OFFSET_OVERFLOW_ONE"
    assert (await _pull(client, topic, "pc", queue_id=3)).code == R.PULL_NOT_FOUND  # empty queue, offset 0
    assert (await _pull(client, topic, "pc", queue_id=99)).code == R.INVALID_PARAMETER
    assert (await _pull(client, "NoSuchTopicX", "pc")).code == R.TOPIC_NOT_EXIST


async def test_long_poll_wakes_on_arrival_and_times_out(shared_broker, client):
    topic = "LongPoll"
    await _send(client, topic, tags="A")
    start = time.monotonic()
    timed_out = await _pull(client, topic, "lp", offset=1, sys_flag=SUB | SUSPEND, suspend_ms=500)
    elapsed = time.monotonic() - start
    assert timed_out.code == R.PULL_NOT_FOUND and 0.4 <= elapsed < 3.0
    async with await WireClient.connect(shared_broker.addr) as producer:
        held = asyncio.ensure_future(_pull(client, topic, "lp", offset=1, sys_flag=SUB | SUSPEND,
                                           suspend_ms=10_000, sub="A", timeout=15))
        await asyncio.sleep(0.2)
        await _send(producer, topic, tags="B")  # does not match: stays held
        await asyncio.sleep(0.2)
        assert not held.done()
        start = time.monotonic()
        await _send(producer, topic, tags="A", body=b"wake")
        woke = await asyncio.wait_for(held, 5)
        assert time.monotonic() - start < 1.5
        assert woke.code == 0 and [m.body for m in records(woke.body)] == [b"wake"]


async def test_consumer_offsets(client):
    topic = "Offsets"
    await _send(client, topic)
    q = {"consumerGroup": "og", "topic": topic, "queueId": "0"}
    young = await client.request(RC.QUERY_CONSUMER_OFFSET, q)
    assert young.code == 0 and str(young.ext_fields["offset"]) == "0"
    strict = await client.request(RC.QUERY_CONSUMER_OFFSET, {**q, "setZeroIfNotFound": "false"})
    assert strict.code == R.QUERY_NOT_FOUND
    empty_queue = await client.request(RC.QUERY_CONSUMER_OFFSET, {**q, "queueId": "2"})
    assert empty_queue.code == R.QUERY_NOT_FOUND
    upd = await client.request(RC.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": "1"})
    assert upd.code == 0
    assert str((await client.request(RC.QUERY_CONSUMER_OFFSET, q)).ext_fields["offset"]) == "1"
    # queue 1 is empty: 0 is its only legal offset (anything beyond maxOffset is refused, see tests/faults)
    await client.oneway(RC.UPDATE_CONSUMER_OFFSET, {**q, "queueId": "1", "commitOffset": "0"})
    got = await client.request(RC.QUERY_CONSUMER_OFFSET, {**q, "queueId": "1"})
    assert got.code == 0 and str(got.ext_fields["offset"]) == "0"
    assert not client.pending  # the one-way update was not answered
    assert (await client.request(RC.UPDATE_CONSUMER_OFFSET, {**q, "topic": "NoSuchTopicY",
                                                             "commitOffset": "1"})).code == R.TOPIC_NOT_EXIST
    missing = await client.request(RC.UPDATE_CONSUMER_OFFSET, q)
    assert missing.code == R.INVALID_PARAMETER and "commitOffset" in missing.remark
    # pull with FLAG_COMMIT_OFFSET stores the commit offset
    await client.request(RC.PULL_MESSAGE, pull_fields(topic, "og", 0, 0, sys_flag=SUB | COMMIT, commit_offset=1))
    assert str((await client.request(RC.QUERY_CONSUMER_OFFSET, q)).ext_fields["offset"]) == "1"


async def test_consumer_list_and_notify(shared_broker):
    group = "NotifyGroup"
    async with await WireClient.connect(shared_broker.addr) as c1, \
            await WireClient.connect(shared_broker.addr) as c2:
        empty = await c1.request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        assert empty.code == R.SYSTEM_ERROR and empty.remark == f"no consumer for this group, {group}"
        assert (await c1.heartbeat("127.0.0.1@c1", consumer_group=group, topic="NotifyT")).code == 0
        while not c1.server_requests.empty():
            c1.server_requests.get_nowait()
        assert (await c2.heartbeat("127.0.0.1@c2", consumer_group=group, topic="NotifyT")).code == 0
        notify = await asyncio.wait_for(c1.server_requests.get(), 5)
        assert notify.code == RC.NOTIFY_CONSUMER_IDS_CHANGED and notify.is_oneway
        assert notify.ext_fields["consumerGroup"] == group
        listed = await c1.request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        assert sorted(json.loads(listed.body)["consumerIdList"]) == ["127.0.0.1@c1", "127.0.0.1@c2"]
        assert (await c2.request(RC.UNREGISTER_CLIENT, {"clientID": "127.0.0.1@c2",
                                                        "consumerGroup": group})).code == 0
        listed = await c1.request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        assert json.loads(listed.body)["consumerIdList"] == ["127.0.0.1@c1"]
        check = await c1.request(RC.CHECK_CLIENT_CONFIG, {}, json.dumps(
            {"clientId": "x", "group": group, "subscriptionData": {"topic": "t", "subString": "*"}}).encode())
        assert check.code == 0


async def test_offset_queries_view_and_query_by_key(client):
    topic = "Queries"
    before = int(time.time() * 1000) - 1000
    sends = [await _send(client, topic, keys=f"key{i}", body=f"m{i}".encode()) for i in range(3)]
    t = {"topic": topic, "queueId": "0"}
    assert str((await client.request(RC.GET_MAX_OFFSET, t)).ext_fields["offset"]) == "3"
    assert str((await client.request(RC.GET_MIN_OFFSET, t)).ext_fields["offset"]) == "0"
    low = await client.request(RC.SEARCH_OFFSET_BY_TIMESTAMP, {**t, "timestamp": str(before)})
    assert low.code == 0 and str(low.ext_fields["offset"]) == "0"
    future = int(time.time() * 1000) + 60_000
    high = await client.request(RC.SEARCH_OFFSET_BY_TIMESTAMP, {**t, "timestamp": str(future)})
    assert str(high.ext_fields["offset"]) == "3"
    upper = await client.request(RC.SEARCH_OFFSET_BY_TIMESTAMP, {**t, "timestamp": str(future),
                                                                 "boundaryType": "upper"})
    assert str(upper.ext_fields["offset"]) == "2"
    earliest = await client.request(RC.GET_EARLIEST_MSG_STORETIME, t)
    assert earliest.code == 0 and int(earliest.ext_fields["timestamp"]) >= before
    _, _, phys = decode_offset_msg_id(sends[1].ext_fields["msgId"])
    view = await client.request(RC.VIEW_MESSAGE_BY_ID, {"offset": str(phys)})
    assert view.code == 0 and records(view.body)[0].body == b"m1"
    assert (await client.request(RC.VIEW_MESSAGE_BY_ID, {"offset": str(1 << 40)})).code == R.SYSTEM_ERROR
    now = int(time.time() * 1000) + 1000
    qm = {"topic": topic, "key": "key2", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(now)}
    found = await client.request(RC.QUERY_MESSAGE, qm)
    assert found.code == 0 and [m.body for m in records(found.body)] == [b"m2"]
    assert "indexLastUpdateTimestamp" in found.ext_fields
    uniq = sends[0].ext_fields["transactionId"]
    by_uniq = await client.request(RC.QUERY_MESSAGE, {**qm, "key": uniq, "_UNIQUE_KEY_QUERY": "true"})
    assert by_uniq.code == 0 and [m.body for m in records(by_uniq.body)] == [b"m0"]
    none = await client.request(RC.QUERY_MESSAGE, {**qm, "key": "nokey"})
    assert none.code == R.QUERY_NOT_FOUND


async def test_errors_unknown_code_missing_field_and_bad_sends(client):
    unknown = await client.request(9999)
    assert unknown.code == R.REQUEST_CODE_NOT_SUPPORTED and unknown.remark == " request type 9999 not supported"
    missing = await client.request(RC.GET_MAX_OFFSET, {"queueId": "0"})
    assert missing.code == R.INVALID_PARAMETER and "'topic'" in missing.remark
    bad_topic = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("bad topic!"), b"x")
    assert bad_topic.code == R.INVALID_PARAMETER and bad_topic.ext_fields["MSG_REGION"]
    system = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("SCHEDULE_TOPIC_XXXX"), b"x")
    assert system.code == R.NO_PERMISSION
    no_default = {**send_v2_fields("NoAuto"), "c": "NotADefaultTopic"}
    assert (await client.request(RC.SEND_MESSAGE_V2, no_default, b"x")).code == R.TOPIC_NOT_EXIST
    big_queue = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("QueueRange", 50), b"x")
    assert big_queue.code == R.INVALID_PARAMETER
    huge_props = props(TAGS="x" * 40000)
    assert (await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("BigProps", 0, huge_props),
                                 b"x")).code == R.MESSAGE_ILLEGAL
    retry_batch = {**send_v2_fields("%RETRY%someGroup"), "m": "true"}
    assert (await client.request(RC.SEND_BATCH_MESSAGE, retry_batch, b"")).code == R.MESSAGE_ILLEGAL
    random_queue = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("RandomQ", -1), b"x")
    assert random_queue.code == 0 and 0 <= int(random_queue.ext_fields["queueId"]) < 4


async def test_malformed_frame_closes_only_that_connection(shared_broker, client):
    bad = await WireClient.connect(shared_broker.addr)
    await bad.send_raw(struct.pack(">ii", 64 * 1024 * 1024, 0) + b"x" * 16)
    await asyncio.wait_for(bad.closed.wait(), 5)
    await bad.close()
    assert (await client.request(RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"})).code == 0
    async with await WireClient.connect(shared_broker.addr) as fresh:
        assert (await fresh.request(RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"})).code == 0


async def test_an_oversized_header_closes_only_that_connection(shared_broker, client):
    """A 3 MiB JSON header (a legal frame size, far past any real request) is refused unparsed: that connection is
    closed, the broker and other clients go on."""
    from protocol.command import RemotingCommand, encode_command
    bad = await WireClient.connect(shared_broker.addr)
    huge = RemotingCommand.request(RC.SEND_MESSAGE_V2, {**send_v2_fields("Huge"), "x": "y" * (3 << 20)}, b"x",
                                   opaque=7)
    await bad.send_raw(encode_command(huge))
    await asyncio.wait_for(bad.closed.wait(), 5)
    await bad.close()
    assert (await client.request(RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"})).code == 0
