"""Issue 11: creating thousands of topics or consumer groups must not stall the broker.

Every new topic used to re-register a copy of the whole topic table with the embedded name server on the
event loop (quadratic: one heartbeat naming 3,000 new groups froze the broker for over a minute), and the
topic table is rewritten coalesced but must still not lose a topic created just before a kill -9.
"""

from __future__ import annotations

import asyncio
import json

from tests.support.wire import WireClient, send_v2_fields
from protocol.codes import RequestCode, ResponseCode

from tests.support.probes import LatencyProbe

STALL_BOUND_S = 2.0  # a side client's slowest round trip; the unfixed broker froze for tens of seconds


def heartbeat_body(client_id: str, groups: list[str], topic: str) -> bytes:
    consumers = [{"groupName": g, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                  "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
                  "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [],
                                           "subVersion": 1, "expressionType": "TAG"}]} for g in groups]
    return json.dumps({"clientID": client_id, "consumerDataSet": consumers, "producerDataSet": []}).encode()


def create_topic_fields(topic: str, queues: int = 2) -> dict[str, str]:
    return {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
            "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}


async def in_windows(make_request, count: int, window: int) -> list:
    """``make_request(i)`` for i in 0..count-1 with at most ``window`` requests in flight."""
    responses = []
    for start in range(0, count, window):
        responses += await asyncio.gather(*(make_request(i) for i in range(start, min(count, start + window))))
    return responses


async def routed_topics(namesrv: WireClient) -> set[str]:
    response = await namesrv.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}, timeout=30)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return set(json.loads(response.body)["topicList"])


async def route_of(namesrv: WireClient, topic: str):
    return await namesrv.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, timeout=30)


async def test_heartbeat_naming_3000_new_groups_does_not_freeze_the_broker(broker):
    groups = [f"stall-group-{i}" for i in range(3000)]
    async with await WireClient.connect(broker.addr) as client, \
            await WireClient.connect(broker.namesrv_addr) as namesrv:
        async with LatencyProbe(broker.addr) as probe:
            response = await client.request(RequestCode.HEART_BEAT, {},
                                            heartbeat_body("stall-client", groups, "stall-topic"), timeout=60)
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert probe.failures == 0
        assert probe.max_latency < STALL_BOUND_S, f"side client waited {probe.max_latency:.1f}s"

        # Every group got its retry topic, served by the embedded name server right after the heartbeat.
        for group in (groups[0], groups[1234], groups[-1]):
            route = await route_of(namesrv, "%RETRY%" + group)
            assert route.code == ResponseCode.SUCCESS, route.remark
            assert json.loads(route.body)["queueDatas"][0]["brokerName"] == broker.name
        assert {"%RETRY%" + g for g in groups} <= await routed_topics(namesrv)
        # ... and is a registered consumer group of the broker.
        listed = await client.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": groups[-1]})
        assert listed.code == ResponseCode.SUCCESS and b"stall-client" in listed.body


async def test_creating_thousands_of_topics_keeps_the_broker_responsive(broker_factory):
    broker = broker_factory(extra={"autoCreateTopicRatePerClient": 0})  # one client creating hundreds on purpose
    admin_created = [f"stall-admin-{i}" for i in range(4000)]
    auto_created = [f"stall-auto-{i}" for i in range(600)]
    async with await WireClient.connect(broker.addr) as client, \
            await WireClient.connect(broker.namesrv_addr) as namesrv:
        async with LatencyProbe(broker.addr) as probe:
            # Many creations per loop turn (one TCP read holds hundreds of requests).
            created = await in_windows(lambda i: client.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic_fields(admin_created[i]), timeout=120),
                len(admin_created), 256)
            # Auto-creation by a first send, on top of 4,000 topics.
            sent = await in_windows(lambda i: client.request(
                RequestCode.SEND_MESSAGE_V2, send_v2_fields(auto_created[i]), b"first", timeout=120),
                len(auto_created), 16)
        assert all(r.code == ResponseCode.SUCCESS for r in created)
        assert all(r.code == ResponseCode.SUCCESS for r in sent), [r.remark for r in sent if r.code][:3]
        assert probe.failures == 0
        assert probe.max_latency < STALL_BOUND_S, f"side client waited {probe.max_latency:.1f}s"

        assert set(admin_created + auto_created) <= await routed_topics(namesrv)
        route = await route_of(namesrv, auto_created[-1])
        assert route.code == ResponseCode.SUCCESS
        assert json.loads(route.body)["queueDatas"][0]["writeQueueNums"] == 4  # min(TBW102's 8, client's 4)


async def test_topic_changes_just_before_kill_9_survive_the_restart(broker):
    async with await WireClient.connect(broker.addr) as client:
        doomed = await client.request(RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic_fields("kill-doomed"))
        assert doomed.code == ResponseCode.SUCCESS
        deleted = await client.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "kill-doomed"})
        assert deleted.code == ResponseCode.SUCCESS
        created = await client.request(RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic_fields("kill-fresh", 3))
        assert created.code == ResponseCode.SUCCESS
    broker.kill()  # within milliseconds of the acknowledgements: before the coalesced write of topics.json
    broker.start()

    async with await WireClient.connect(broker.addr) as client, \
            await WireClient.connect(broker.namesrv_addr) as namesrv:
        response = await client.request(RequestCode.GET_ALL_TOPIC_CONFIG, {})
        table = json.loads(response.body)["topicConfigTable"]
        assert table["kill-fresh"]["readQueueNums"] == 3 and table["kill-fresh"]["writeQueueNums"] == 3
        assert "kill-doomed" not in table
        assert (await route_of(namesrv, "kill-fresh")).code == ResponseCode.SUCCESS
        assert (await route_of(namesrv, "kill-doomed")).code == ResponseCode.TOPIC_NOT_EXIST


async def test_group_changes_just_before_kill_9_survive_the_restart(broker):
    """An acknowledged UPDATE_AND_CREATE_SUBSCRIPTIONGROUP / DELETE_SUBSCRIPTIONGROUP is on disk at once."""
    async with await WireClient.connect(broker.addr) as client:
        for group in ("kill-doomed-group", "kill-fresh-group"):
            body = json.dumps({"groupName": group, "retryQueueNums": 1, "retryMaxTimes": 7}).encode()
            assert (await client.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)).code == 0
        deleted = await client.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "kill-doomed-group"})
        assert deleted.code == ResponseCode.SUCCESS
    broker.kill()  # right after the acknowledgements: before any coalesced write would have happened
    broker.start()

    async with await WireClient.connect(broker.addr) as client:
        response = await client.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
        table = json.loads(response.body)["subscriptionGroupTable"]
        assert table["kill-fresh-group"]["retryMaxTimes"] == 7
        assert "kill-doomed-group" not in table
