"""Hostile SQL92 selectors never stall the broker (issue 11).

Before the fix, a pull whose selector was 40 KB of '-' held the event loop for ~31 s (the lexer retried the
`--` comment regex to the end of the text at every dash). Now every trap is answered with
SUBSCRIPTION_PARSE_FAILED (23) in milliseconds on the pull, heartbeat + pull and CHECK_CLIENT_CONFIG paths,
while a side client keeps getting answers, and a selector at the size limits is compiled and evaluated
without holding the loop."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from broker.filter.sql92 import MAX_IN_ITEMS, MAX_SELECTOR_LENGTH, MAX_TERMS
from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.message import BatchEntry, encode_batch_body

from tests.support.wire import WireClient, props, pull_fields, records, send_v2_fields

from tests.support.probes import LatencyProbe

SUB_FLAG = 0x4
#: A side request answered later than this means the loop was held; the bug held it for 30 s and more.
PROBE_BOUND_S = 2.0
#: Each hostile request is answered well within this (milliseconds when healthy).
ANSWER_BOUND_S = 5.0

_IN_ITEMS = ", ".join(f"'v{i}'" for i in range(MAX_IN_ITEMS + 1))
HOSTILE = {
    "dashes": ("-" * 40_000, "repeated more than"),
    "dashes to the length limit": ("a = 1 " + "-" * (MAX_SELECTOR_LENGTH - 6), "after a complete expression"),
    "dash-dash-letter": ("a = 1 " + "--a" * 20_000, "after a complete expression"),
    "zeros": ("a = " + "0" * 60_000, "after a complete expression"),
    "unterminated string": ("a = '" + "x" * 60_000, "unexpected character"),
    "unterminated comment": ("a = 1 /*" + "-" * 60_000, "unterminated /* comment"),
    "conditions": ("a = 'x' AND " * 5_000, f"the maximum is {MAX_TERMS:,}"),
    "IN list": (f"a IN ({_IN_ITEMS})", f"the maximum is {MAX_IN_ITEMS:,}"),
    "parentheses": ("(" * 30_000 + "a = 'x'" + ")" * 30_000, "nested"),
    "over the length limit": ("a" * (MAX_SELECTOR_LENGTH + 1), f"the maximum is {MAX_SELECTOR_LENGTH:,}"),
}


@pytest.fixture
def sql_broker(broker_factory):
    return broker_factory(extra={"enablePropertyFilter": "true"})


async def _pull(client: WireClient, topic: str, group: str, selector: str | None, offset: int = 0):
    """A pull carrying ``selector`` on the subscription flag, or (None) using the heartbeat's subscription."""
    fields = pull_fields(topic, group, 0, offset, sys_flag=SUB_FLAG if selector is not None else 0,
                         subscription=selector or "", suspend_ms=0)
    fields["expressionType"] = "SQL92"
    return await client.request(RC.PULL_MESSAGE, fields, timeout=15)


async def _heartbeat(client: WireClient, group: str, topic: str, selector: str):
    sub = {"topic": topic, "subString": selector, "tagsSet": [], "codeSet": [],
           "subVersion": int(time.time() * 1000), "expressionType": "SQL92"}
    body = {"clientID": f"127.0.0.1@{group}", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_ACTIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": [sub], "unitMode": False}]}
    return await client.request(RC.HEART_BEAT, {}, json.dumps(body).encode(), timeout=15)


async def _check_client(client: WireClient, group: str, selector: str):
    body = {"clientId": f"127.0.0.1@{group}", "group": group, "subscriptionData": {
        "topic": "Any", "subString": selector, "tagsSet": [], "codeSet": [], "subVersion": 1,
        "expressionType": "SQL92"}}
    return await client.request(RC.CHECK_CLIENT_CONFIG, {}, json.dumps(body).encode(), timeout=15)


async def _send(client: WireClient, topic: str, body: bytes, **properties: str) -> None:
    resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0, props(**properties)), body)
    assert resp.code == R.SUCCESS, resp.remark


async def _timed(request):
    started = time.monotonic()
    resp = await request
    return resp, time.monotonic() - started


async def test_hostile_selectors_on_every_path_are_refused_quickly(sql_broker):
    topic = "SqlStall"
    async with await WireClient.connect(sql_broker.addr) as client:
        await _send(client, topic, b"x", a="1")
        async with LatencyProbe(sql_broker.addr) as probe:
            for i, (name, (selector, remark)) in enumerate(HOSTILE.items()):
                pulled, seconds = await _timed(_pull(client, topic, "stall", selector))
                assert pulled.code == R.SUBSCRIPTION_PARSE_FAILED, (name, pulled.code, pulled.remark)
                assert remark in pulled.remark, (name, pulled.remark)
                assert seconds < ANSWER_BOUND_S, (name, seconds)

                group = f"stall-hb-{i}"
                beat, seconds = await _timed(_heartbeat(client, group, topic, selector))
                assert beat.code == R.SUCCESS and seconds < ANSWER_BOUND_S, (name, beat.remark, seconds)
                registered, seconds = await _timed(_pull(client, topic, group, None))
                assert registered.code == R.SUBSCRIPTION_PARSE_FAILED, (name, registered.remark)
                assert registered.remark == pulled.remark and seconds < ANSWER_BOUND_S, name

                checked, seconds = await _timed(_check_client(client, group, selector))
                assert checked.code == R.SUBSCRIPTION_PARSE_FAILED and checked.remark == pulled.remark, name
                assert seconds < ANSWER_BOUND_S, (name, seconds)
        assert probe.failures == 0
        assert probe.max_latency < PROBE_BOUND_S, f"side client waited {probe.max_latency:.1f} s"


async def test_repeated_hostile_pulls_stay_cheap(sql_broker):
    topic = "SqlStallRepeat"
    selector = "-" * 40_000
    async with await WireClient.connect(sql_broker.addr) as client:
        await _send(client, topic, b"x", a="1")
        async with LatencyProbe(sql_broker.addr) as probe:
            started = time.monotonic()
            for _ in range(40):
                resp = await _pull(client, topic, "stall-repeat", selector)
                assert resp.code == R.SUBSCRIPTION_PARSE_FAILED
            elapsed = time.monotonic() - started
        assert elapsed < 40 * 0.25, f"40 refused pulls took {elapsed:.1f} s"  # a few ms each when healthy
        assert probe.max_latency < PROBE_BOUND_S, f"side client waited {probe.max_latency:.1f} s"


async def test_largest_accepted_selectors_are_served_without_stalling(sql_broker):
    topic = "SqlStallLargest"
    async with await WireClient.connect(sql_broker.addr) as client:
        for i in range(64):
            await _send(client, topic, f"m{i}".encode(), a=f"v{i}", b=str(i))
        wanted = f"v{MAX_IN_ITEMS - 1}"
        await _send(client, topic, b"wanted", a=wanted, b="-1")
        selectors = [
            "a IN (" + ", ".join(f"'v{i + 1000}'" for i in range(MAX_IN_ITEMS - 1)) + f", '{wanted}')",
            " OR ".join(f"a = 'v{i + 1000}'" for i in range(MAX_TERMS // 2 - 1)) + f" OR a = '{wanted}'",
            " AND ".join(f"(b < {i + 100} OR a = 'zz')" for i in range(MAX_TERMS // 4 - 1)) + f" AND a = '{wanted}'",
        ]
        async with LatencyProbe(sql_broker.addr) as probe:
            for selector in selectors:
                offset, found = 0, []
                for _ in range(100):  # follow nextBeginOffset to the end of the queue
                    resp, seconds = await _timed(_pull(client, topic, "stall-largest", selector, offset))
                    assert seconds < ANSWER_BOUND_S
                    if resp.code == R.SUCCESS:
                        found += [m.body for m in records(resp.body)]
                    elif resp.code not in (R.PULL_RETRY_IMMEDIATELY, R.PULL_NOT_FOUND, R.PULL_OFFSET_MOVED):
                        raise AssertionError((resp.code, resp.remark))
                    offset = int(resp.ext_fields["nextBeginOffset"])
                    if offset >= 65:
                        break
                assert found == [b"wanted"], selector[:60]
        assert probe.max_latency < PROBE_BOUND_S, f"side client waited {probe.max_latency:.1f} s"


async def test_a_held_pull_with_a_costly_selector_wakes_after_a_bounded_check_of_a_burst(sql_broker):
    """A held SQL pull evaluates at most one pull's scan budget of newly arrived messages: with more arrivals
    than that and no match among them it is answered (retry at once, from where the check stopped) instead of
    evaluating the whole burst on the loop or waiting for its timeout."""
    selector = " OR ".join(f"a = 'v{i}'" for i in range(MAX_TERMS // 2))
    topic, group = "CostlyHeld", "cg-costly-held"
    async with await WireClient.connect(sql_broker.addr) as client:
        await _send(client, topic, b"first", a="none")  # creates the topic; offset 0 does not match
        fields = pull_fields(topic, group, 0, 1, sys_flag=SUB_FLAG | 0x2, subscription=selector, suspend_ms=20_000)
        fields["expressionType"] = "SQL92"
        held = client.send_nowait(client.make(RC.PULL_MESSAGE, fields))
        await client.writer.drain()
        await asyncio.sleep(0.3)
        assert not held.done()
        started = time.monotonic()
        batch = send_v2_fields(topic, 0, "")
        batch["m"] = "true"
        body = encode_batch_body([BatchEntry(0, b"x", props(a="none")) for _ in range(400)])  # over the budget
        assert (await client.request(RC.SEND_BATCH_MESSAGE, batch, body)).code == R.SUCCESS
        resp = await asyncio.wait_for(held, 10)
    assert time.monotonic() - started < 10
    assert resp.code == R.PULL_RETRY_IMMEDIATELY, (resp.code, resp.remark)
    assert 1 < int(resp.ext_fields["nextBeginOffset"]) <= 401
