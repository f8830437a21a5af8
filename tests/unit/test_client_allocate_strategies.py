"""The allocation strategies added for parity with the reference client: CONFIG, MACHINE_ROOM, MACHINE_ROOM_NEARBY."""

from __future__ import annotations

import pytest

from client import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    MachineRoomResolver,
    MessageQueue,
)
from client.allocate import AllocateMessageQueueAveragelyByCircle, resolve_strategy, sort_queues


def queues(*brokers: str, per: int = 2, topic: str = "T") -> list[MessageQueue]:
    return sort_queues(MessageQueue(topic, b, i) for b in brokers for i in range(per))


def test_config_gives_exactly_its_list_whatever_the_group():
    mine = [MessageQueue("T", "b", 3), MessageQueue("T", "b", 0)]
    strategy = resolve_strategy(AllocateMessageQueueByConfig(mine))
    assert strategy("g", "c1", queues("b", per=4), ["c1", "c2"]) == mine
    assert strategy("g", "c9", [], []) == mine


@pytest.mark.parametrize("name", ["CONFIG", "MACHINE_ROOM", "AllocateMessageQueueByConfig"])
def test_strategies_that_need_arguments_say_so_by_name(name):
    with pytest.raises(ValueError, match="needs arguments"):
        resolve_strategy(name)


def test_machine_room_spreads_only_the_rooms_queues_like_the_reference():
    mq_all = queues("hz@broker-a", "sh@broker-b", "hz@broker-c", "plain", per=2)
    strategy = AllocateMessageQueueByMachineRoom({"hz"})
    cids = ["c1", "c2", "c3"]
    got = {cid: strategy("g", cid, mq_all, cids) for cid in cids}
    hz = [mq for mq in mq_all if mq.broker_name.startswith("hz@")]  # 4 queues over 3 consumers: 1 each + 1
    assert got["c1"] == [hz[0], hz[3]] and got["c2"] == [hz[1]] and got["c3"] == [hz[2]]
    assert strategy("g", "stranger", mq_all, cids) == []


def test_machine_room_nearby_keeps_rooms_local_and_shares_rooms_without_consumers():
    mq_all = queues("hz@broker-a", "sh@broker-b", "bj@broker-c", per=2)
    cids = sorted(["10.0.0.1@hz@c1", "10.0.0.2@hz@c2", "10.0.0.3@sh@c3"])
    strategy = resolve_strategy("MACHINE_ROOM_NEARBY")
    got = {cid: strategy("g", cid, mq_all, cids) for cid in cids}
    assert sort_queues(q for qs in got.values() for q in qs) == mq_all  # every queue exactly once
    hz_consumers = [c for c in cids if "@hz@" in c]
    for cid in hz_consumers:
        assert {q.broker_name for q in got[cid]} <= {"hz@broker-a", "bj@broker-c"}
    assert {q.broker_name for q in got["10.0.0.3@sh@c3"]} <= {"sh@broker-b", "bj@broker-c"}
    assert [q for q in got["10.0.0.3@sh@c3"] if q.broker_name == "sh@broker-b"] == queues("sh@broker-b")


def test_machine_room_nearby_with_an_inner_strategy_and_resolver():
    rooms = {"broker-a": "x", "broker-b": "y"}
    resolver = MachineRoomResolver(lambda mq: rooms[mq.broker_name], lambda cid: cid[0])
    strategy = AllocateMachineRoomNearby(AllocateMessageQueueAveragelyByCircle(), resolver)
    mq_all = queues("broker-a", "broker-b", per=4)
    assert strategy("g", "x1", mq_all, ["x1", "x2", "y1"]) == queues("broker-a", per=4)[0::2]
    assert strategy("g", "y1", mq_all, ["x1", "x2", "y1"]) == queues("broker-b", per=4)


def test_machine_room_nearby_refuses_what_it_cannot_place():
    with pytest.raises(ValueError, match="machine room unknown"):
        resolve_strategy("MACHINE_ROOM_NEARBY")("g", "1.2.3.4@hz@c", queues("no-room"), ["1.2.3.4@hz@c"])
