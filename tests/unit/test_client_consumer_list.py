"""ConsumerOps.consumer_ids (issue 28): the group as the union of what every broker of the topic knows, so a master
that has just restarted and knows one client does not shrink the group; failures skipped, all failing raises."""

import json

import pytest
from tests.support.client_fakes import FakeInstance

from client.consumer_ops import ConsumerOps
from client.errors import MQBrokerError, RemotingTimeoutError
from protocol.codes import RequestCode, ResponseCode


def listing(*ids: str) -> tuple[int, None, bytes]:
    return ResponseCode.SUCCESS, None, json.dumps({"consumerIdList": list(ids)}).encode()


class ListingInstance(FakeInstance):
    async def invoke_broker(self, addr, cmd, timeout=None):
        self.calls.append((addr, cmd))
        answer = self.answers[addr]
        if isinstance(answer, Exception):
            raise answer
        code, remark, body = answer
        response = cmd.make_response(code, remark)
        response.body = body
        return response


async def test_a_fresh_master_knowing_one_client_does_not_shrink_the_group():
    instance = ListingInstance({"10.0.0.1:10911": listing("c1"),  # b1's master, just restarted
                                "10.0.0.9:1": listing("c1", "c2", "c3"),  # its slave
                                "10.0.0.2:10911": listing("c2", "c3", "c1")})
    ids = await ConsumerOps(instance, "g1").consumer_ids("T")
    assert ids == ["c1", "c2", "c3"]
    assert sorted(addr for addr, _ in instance.calls) == ["10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.9:1"]
    assert all(cmd.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP for _, cmd in instance.calls)


async def test_unreachable_brokers_are_skipped_and_answers_are_shared_across_topics():
    instance = ListingInstance({"10.0.0.1:10911": RemotingTimeoutError("down"),
                                "10.0.0.9:1": listing("c1", "c2"),
                                "10.0.0.2:10911": (ResponseCode.SYSTEM_ERROR, "no group", None)})
    ops = ConsumerOps(instance, "g1")
    answers: dict = {}
    assert await ops.consumer_ids("T", answers=answers) == ["c1", "c2"]
    assert await ops.consumer_ids("T", answers=answers) == ["c1", "c2"]
    assert len(instance.calls) == 3  # the second topic of the same rebalance asks nobody again


async def test_no_broker_answering_raises_so_the_caller_keeps_its_queues():
    instance = ListingInstance({"10.0.0.1:10911": RemotingTimeoutError("down"),
                                "10.0.0.9:1": RemotingTimeoutError("down"),
                                "10.0.0.2:10911": (ResponseCode.SYSTEM_ERROR, "no group", None)})
    with pytest.raises((RemotingTimeoutError, MQBrokerError)):
        await ConsumerOps(instance, "g1").consumer_ids("T")
