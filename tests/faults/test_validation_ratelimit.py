"""A thousand bad requests of one kind leave a handful of log lines, not a thousand (and no traceback)."""

from __future__ import annotations

import asyncio

from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R

from tests.support.wire import WireClient, pull_fields, send_v2_fields

from tests.support.validation_cases import wait_for_log

N = 1000
MAX_LINES = 3  # first occurrence, plus at most a summary or two if the run crosses a 10 s interval


async def _fire(client: WireClient, commands, expect_code: int | None) -> None:
    futures = [client.send_nowait(cmd) for cmd in commands]
    await client.writer.drain()
    answered = [f for f in futures if f is not None]
    if answered:
        responses = await asyncio.wait_for(asyncio.gather(*answered), 60)
        assert {r.code for r in responses} == {expect_code}, {r.code for r in responses}


def _lines(broker, fragment: str) -> list[str]:
    return [line for line in broker.log_text().splitlines() if fragment in line]


async def test_a_thousand_bad_requests_of_each_kind_log_a_handful_of_lines(broker_factory):
    broker = broker_factory(extra={"maxMessageSize": 1024})
    topic, group = "RateLimitTopic", "rateLimitGroup"
    async with await WireClient.connect(broker.addr) as client:
        created = await client.request(RC.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": "1",
                                                                   "writeQueueNums": "1", "perm": "6"})
        assert created.code == 0
        seeded = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0), b"seed")
        assert seeded.code == 0

        # header values a Java int cannot hold (before the fix: struct.error, SYSTEM_ERROR and a traceback each)
        await _fire(client, [client.make(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0, flag=2**40), b"x")
                             for _ in range(N)], R.INVALID_PARAMETER)
        # sends refused by a limit
        await _fire(client, [client.make(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0), b"x" * 2048)
                             for _ in range(N)], R.MESSAGE_ILLEGAL)
        # one-way offset updates beyond the queue (nobody sees the refusal but the log)
        await _fire(client, [client.make(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                                     "queueId": "0", "commitOffset": "999"},
                                         oneway=True) for _ in range(N)], None)
        # pulls whose commitOffset is beyond the queue: answered, not stored
        await _fire(client, [client.make(RC.PULL_MESSAGE, pull_fields(topic, group, 0, 0, sys_flag=0x5,
                                                                      commit_offset=999)) for _ in range(N)], R.SUCCESS)
        alive = await client.request(RC.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})
        assert alive.code == 0 and alive.ext_fields["offset"] == "1"  # nothing of the refused sends was stored

    fragments = {
        "header error": "refused: header field 'h (flag)'",
        "refused send": "rejected SEND_MESSAGE_V2 from",
        "offset update": "consumer offset update from",
        "pull commitOffset": "is outside 0..maxOffset",
    }
    for fragment in fragments.values():
        assert await wait_for_log(broker, fragment), fragment
    await asyncio.sleep(0.3)  # let the output reader catch up with anything still in the pipe
    counts = {what: len(_lines(broker, fragment)) for what, fragment in fragments.items()}
    assert all(1 <= count <= MAX_LINES for count in counts.values()), counts
    assert "Traceback" not in broker.log_text()
    assert len(broker.log_text().splitlines()) < 60, broker.log_text()[-3000:]
