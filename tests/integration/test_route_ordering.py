"""Issue 27: routes never lose an acknowledged topic.

With ``namesrvAddr`` pointing at the broker's own embedded name server, every topic change reaches the embedded
routes at once as a one-topic delta, while the registrar also sends full REGISTER_BROKER snapshots over TCP. A
snapshot taken just before a topic was auto-created used to arrive after that topic's delta and replace the
routes with the older table; the next delta then carried the newest data version, so the name server believed
it was current and the topic stayed missing for good (stored messages no consumer could find). The name server
now orders registrations by the broker's DataVersion: an older snapshot only refreshes the broker's timer.
"""

from __future__ import annotations

import asyncio
import json
import random
import time

from tests.support.broker_process import free_port
from tests.support.wire import WireClient, send_v2_fields
from protocol.codes import RequestCode, ResponseCode

from tests.support.broker_process import NamesrvProcess

CLIENTS = 40  # producers auto-creating topics at once
TOPICS_PER_CLIENT = 8
ROUNDS = 3  # each round spans several registrations (one per 0.3 s debounce), each a chance to lose a topic
SEND_SPREAD_S = 0.2  # random pause before each send, so creations straddle the registrations
ROUTABLE_WITHIN_S = 1.0


def embedded_namesrv_as_namesrv_addr() -> dict[str, object]:
    port = free_port()
    # the per-client auto-creation limit off: hundreds of topics from one address is the point here
    return {"namesrvListenPort": port, "namesrvAddr": f"127.0.0.1:{port}", "autoCreateTopicEnable": "true",
            "autoCreateTopicRatePerClient": 0}


async def route_has_broker(namesrv: WireClient, topic: str, broker_addr: str) -> bool:
    response = await namesrv.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if response.code != ResponseCode.SUCCESS:
        return False
    route = json.loads(response.body)
    return any(broker_addr in data["brokerAddrs"].values() for data in route["brokerDatas"])


async def unroutable(namesrvs: list[WireClient], topics: list[str], broker_addr: str) -> list[str]:
    found = await asyncio.gather(*(route_has_broker(namesrvs[i % len(namesrvs)], t, broker_addr)
                                   for i, t in enumerate(topics)))
    return [t for t, ok in zip(topics, found) if not ok]


async def auto_create_round(producers: list[WireClient], tag: str, rng: random.Random) -> tuple[list[str], float]:
    """Every producer sends to TOPICS_PER_CLIENT new topics; returns the acknowledged ones and the last ack time."""
    acked: list[str] = []
    last_ack = 0.0

    async def produce(index: int, producer: WireClient) -> None:
        nonlocal last_ack
        pauses = [rng.random() * SEND_SPREAD_S for _ in range(TOPICS_PER_CLIENT)]
        for n, pause in enumerate(pauses):
            await asyncio.sleep(pause)
            topic = f"route-{tag}-{index}-{n}"
            response = await producer.request(RequestCode.SEND_MESSAGE_V2, send_v2_fields(topic), b"body")
            assert response.code == ResponseCode.SUCCESS, response.remark
            acked.append(topic)
            last_ack = time.monotonic()

    await asyncio.gather(*(produce(i, p) for i, p in enumerate(producers)))
    return acked, last_ack


async def test_every_acknowledged_auto_created_topic_is_routable_within_a_second(broker_factory):
    conf = embedded_namesrv_as_namesrv_addr()
    broker = broker_factory(extra=conf)
    rng = random.Random(27)
    producers = [await WireClient.connect(broker.addr) for _ in range(CLIENTS)]
    namesrvs = [await WireClient.connect(str(conf["namesrvAddr"])) for _ in range(4)]
    try:
        all_acked: list[str] = []
        for round_no in range(ROUNDS):
            acked, last_ack = await auto_create_round(producers, str(round_no), rng)
            assert len(acked) == CLIENTS * TOPICS_PER_CLIENT
            all_acked += acked
            missing = await unroutable(namesrvs, acked, broker.addr)
            while missing and time.monotonic() < last_ack + ROUTABLE_WITHIN_S:
                await asyncio.sleep(0.05)
                missing = await unroutable(namesrvs, missing, broker.addr)
            assert not missing, (f"round {round_no}: {len(missing)} of {len(acked)} acknowledged topics have no "
                                 f"route {ROUTABLE_WITHIN_S} s after the last acknowledgement, e.g. {missing[:5]}")

        # No later registration dropped a topic of an earlier round.
        listed = await namesrvs[0].request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
        assert listed.code == ResponseCode.SUCCESS
        assert set(all_acked) <= set(json.loads(listed.body)["topicList"])

        # Control: newer changes still reach the routes - a deleted topic leaves them, the others stay.
        doomed, kept = all_acked[0], all_acked[1]
        deleted = await producers[0].request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": doomed})
        assert deleted.code == ResponseCode.SUCCESS, deleted.remark
        deadline = time.monotonic() + ROUTABLE_WITHIN_S
        while await route_has_broker(namesrvs[0], doomed, broker.addr):
            assert time.monotonic() < deadline, "a deleted topic is still routed"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # a full registration of the newer table follows the deletion (debounced)
        assert not await route_has_broker(namesrvs[0], doomed, broker.addr)
        assert await route_has_broker(namesrvs[0], kept, broker.addr)
    finally:
        for client in producers + namesrvs:
            client.writer.close()


# -- the standalone name server (mqnamesrv), registered with as a Java broker does ----------------------------
def register_body(topics: list[str], counter: int, timestamp: int) -> tuple[dict[str, str], bytes]:
    table = {t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicFilterType": "SINGLE_TAG",
                 "topicSysFlag": 0, "order": False} for t in topics}
    body = json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table, "dataVersion": {
        "counter": counter, "stateVersion": 0, "timestamp": timestamp}}, "filterServerList": []}).encode()
    ext = {"brokerName": "java-a", "brokerAddr": "127.0.0.1:30911", "clusterName": "DefaultCluster",
           "haServerAddr": "127.0.0.1:30912", "brokerId": "0", "heartbeatTimeoutMillis": "120000",
           "enableActingMaster": "false", "compressed": "false", "bodyCrc32": "0"}
    return ext, body


async def test_standalone_namesrv_keeps_newer_topics_from_a_late_registration():
    namesrv = NamesrvProcess()
    try:
        async with await WireClient.connect(namesrv.addr) as broker_link, \
                await WireClient.connect(namesrv.addr) as client:
            async def register(topics: list[str], counter: int, timestamp: int) -> None:
                response = await broker_link.request(RequestCode.REGISTER_BROKER, *register_body(topics, counter, timestamp))
                assert response.code == ResponseCode.SUCCESS, response.remark

            async def routed(topic: str) -> bool:
                return await route_has_broker(client, topic, "127.0.0.1:30911")

            now = int(time.time() * 1000)
            await register(["Base", "Fresh"], 7, now)
            await register(["Base"], 6, now - 5)  # a snapshot from before Fresh, arriving late
            assert await routed("Fresh") and await routed("Base")
            # Controls: a newer table still replaces the routes, and so does a restarted broker whose counter
            # started over (its clock is later).
            await register(["Base"], 8, now + 5)
            assert not await routed("Fresh") and await routed("Base")
            await register(["Base", "Reborn"], 1, now + 60_000)
            assert await routed("Reborn")
    finally:
        namesrv.stop()
