"""Metrics are fed by observers their owners call (issue 30): the remoting server tells one observer call per
request of an observed code, when its answer is known (also a pending or a run's answer); BrokerMetrics counts."""

from __future__ import annotations

import asyncio

from broker.metrics import BrokerMetrics
from broker.remoting_server import RemotingServer
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand

SEND = int(RequestCode.SEND_MESSAGE_V2)
PULL = int(RequestCode.PULL_MESSAGE)


class _Channel:
    closed = False
    remote_addr = "127.0.0.1:1"

    def __init__(self) -> None:
        self.sent: list = []
        self._tasks: set = set()

    def write_frame(self, frame: bytes) -> None:
        self.sent.append(frame)

    def send_response(self, response) -> None:
        self.sent.append(response)


def _send(topic: str = "T", body: bytes = b"x" * 10) -> RemotingCommand:
    return RemotingCommand.request(SEND, {"b": topic}, body, opaque=1)


def test_server_tells_the_observer_once_per_request_sync_pending_and_runs():
    seen: list = []

    def observer(channel, cmd, result, elapsed):
        seen.append((cmd.code, result, elapsed >= 0))

    async def later(channel, cmd):
        await asyncio.sleep(0)
        return cmd.make_response(ResponseCode.SUCCESS)

    async def scenario():
        handlers = {SEND: lambda ch, cmd: b"frame", PULL: lambda ch, cmd: b"other", 999: later}
        server = RemotingServer(handlers, "127.0.0.1", 0, observers={SEND: observer, 999: observer},
                                run_handlers={SEND: lambda ch, cmds: [b"r"] * len(cmds)})
        server.loop = asyncio.get_running_loop()
        channel = _Channel()
        server.dispatch(channel, _send())
        server.dispatch(channel, RemotingCommand.request(PULL, {}, b"", opaque=2))  # not observed
        server.dispatch(channel, RemotingCommand.request(999, {}, b"", opaque=3))
        server.dispatch_run(channel, [_send(), _send()], server.run_handlers[SEND])
        await asyncio.sleep(0.01)
        return channel

    channel = asyncio.run(scenario())
    assert [(code, ok) for code, _, ok in seen] == [(SEND, True), (SEND, True), (SEND, True), (999, True)]
    assert seen[0][1] == b"frame" and seen[3][1].code == ResponseCode.SUCCESS
    assert len(channel.sent) == 5  # observing never swallows an answer


def test_broker_metrics_count_sends_refusals_and_pulls():
    metrics = BrokerMetrics(enabled=True)
    channel = _Channel()
    metrics.observe_send(channel, _send("A", b"y" * 7), b"ok-frame", 0.001)
    refused = _send("A").make_response(ResponseCode.NO_PERMISSION, "no")
    metrics.observe_send(channel, _send("A"), refused, 0.001)
    assert metrics.bytes_in == {"A": 7}
    assert metrics.rejected == {("send", "NO_PERMISSION"): 1}
    assert sum(metrics.send_latency.counts) == 2

    class Header:
        topic, queue_offset = "A", 3

    pull = RemotingCommand.request(PULL, {}, b"", opaque=4)
    found = pull.make_response(ResponseCode.SUCCESS, None, {"nextBeginOffset": "7"}, b"z" * 50)
    metrics.observe_pull(channel, pull, Header, found, 0.002)
    assert metrics.messages_out == {"A": 4} and metrics.bytes_out == {"A": 50}
    metrics.observe_flush(0.01)
    assert sum(metrics.flush_latency.counts) == 1


def test_metrics_off_still_reports_refusals_but_counts_nothing():
    metrics = BrokerMetrics(enabled=False)
    refused = _send("B").make_response(ResponseCode.NO_PERMISSION, "no")
    metrics.observe_send(_Channel(), _send("B"), refused, 0.001)
    metrics.observe_send(_Channel(), _send("B"), b"ok", 0.001)
    assert not metrics.rejected and not metrics.bytes_in and sum(metrics.send_latency.counts) == 0
