"""The typed consumption core (broker/core/consume.py, broker/core/pop.py) on a real broker in a tmp dir (no
network): pulls, holds woken by the one notification (a held pull and a POP receive by the same send), batched
acks persisted across a restart, invisibility changes, refusals with their fields, and ACL needs."""

from __future__ import annotations

import asyncio

from broker.acl.accounts import SUB
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.core.arrivals import WAKE_ARRIVAL
from broker.core.consume import PullRequest
from broker.core.pop import AckRequest, ChangeInvisibilityRequest, PopReceiveRequest
from protocol.codes import ResponseCode
from tests.support.broker_process import free_port
from tests.support.store import make_msg


def _config(root) -> BrokerConfig:
    return BrokerConfig(
        broker_name="core", broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=free_port(),
        namesrv_addr=None, enable_embedded_namesrv=False, enable_vip_channel=False, store_path_root_dir=str(root),
        mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20_000, dashboard_port=0,
        metrics_port=0, min_invisible_time_mills_for_recv=100,
        grpc_client_consumer_min_long_polling_timeout_millis=50)


async def _started(root) -> Broker:
    broker = Broker(_config(root))
    await broker.start()
    broker.topic_config_manager.create_topic_if_absent("Core", 2)
    return broker


async def _put(broker: Broker, count: int, queue_id: int = 0) -> None:
    result = await broker.store.put_messages([make_msg(i, topic="Core", queue_id=queue_id) for i in range(count)])
    assert result.ok


def test_typed_requests_state_the_same_needs() -> None:
    expected = [("Core", SUB), ("%RETRY%g", SUB)]
    assert PullRequest("g", "Core", 0, 0).needs() == expected
    assert PopReceiveRequest("g", "Core", 32).needs() == expected
    assert AckRequest("g", "Core", ["h"]).needs() == expected
    assert ChangeInvisibilityRequest("g", "Core", "h", 1000).needs() == expected
    assert PullRequest("g", "%RETRY%g", 0, 0).needs() == [("%RETRY%g", SUB)]


async def test_pull_refusals_found_and_not_found(tmp_path) -> None:
    broker = await _started(tmp_path)
    try:
        puller = broker.puller
        missing = puller.pull(PullRequest("g", "NoSuchTopic", 0, 0, subscription=("TAG", "*")))
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST and missing.reason == "topic" and missing.value is None
        bad_queue = puller.pull(PullRequest("g", "Core", 7, 0, subscription=("TAG", "*")))
        assert bad_queue.code == ResponseCode.INVALID_PARAMETER and bad_queue.reason == "queue"
        no_sub = puller.pull(PullRequest("g", "Core", 0, 0))  # no heartbeat registered the subscription
        assert no_sub.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
        await _put(broker, 3)
        found = puller.pull(PullRequest("g", "Core", 0, 0, max_nums=2, subscription=("TAG", "*"), commit_offset=0))
        assert found.ok and found.value.message_count == 2 and found.value.next_begin_offset == 2
        assert found.value.max_offset == 3 and found.value.body
        empty = puller.pull(PullRequest("g", "Core", 0, 3, subscription=("TAG", "*")))
        assert empty.code == ResponseCode.PULL_NOT_FOUND and empty.value.body == b""
        tagged = puller.pull(PullRequest("g", "Core", 0, 0, subscription=("TAG", "TagB")))
        assert tagged.value.message_count == 0
    finally:
        await broker.shutdown()


async def test_one_send_wakes_a_held_pull_and_a_pop_receive(tmp_path) -> None:
    broker = await _started(tmp_path)
    try:
        request = PullRequest("g", "Core", 1, 0, subscription=("TAG", "*"), suspend_ms=5000)
        assert broker.puller.pull(request).code == ResponseCode.PULL_NOT_FOUND
        woken: list[str] = []
        held = broker.puller.hold(request, woken.append)
        assert held is not None and broker.arrivals.held_count == 1
        receiving = asyncio.ensure_future(broker.pop_core.receive(PopReceiveRequest(
            "pg", "Core", 32, invisible_ms=10_000, poll_ms=5000)))
        for _ in range(50):
            await asyncio.sleep(0.01)
            if broker.arrivals.watch_count:
                break
        assert broker.arrivals.watch_count == 1
        loop = asyncio.get_running_loop()
        started = loop.time()
        await _put(broker, 1, queue_id=1)
        outcome = await asyncio.wait_for(receiving, 2.0)
        assert loop.time() - started < 1.0
        assert outcome.ok and len(outcome.value) == 1 and outcome.value[0].queue_id == 1
        assert woken == [WAKE_ARRIVAL] and broker.arrivals.held_count == 0
        assert broker.puller.pull(request, first=False).value.message_count == 1
    finally:
        await broker.shutdown()


async def test_held_pull_times_out_and_a_filtered_arrival_does_not_wake_it(tmp_path) -> None:
    broker = await _started(tmp_path)
    try:
        request = PullRequest("g", "Core", 0, 0, subscription=("TAG", "TagB"), suspend_ms=300)
        woken: list[str] = []
        broker.puller.hold(request, woken.append)
        await _put(broker, 2)  # TagA: not what the pull waits for
        assert woken == []
        await asyncio.sleep(0.5)
        assert woken == ["timeout"]
    finally:
        await broker.shutdown()


async def test_pop_batched_ack_survives_a_restart_and_invisibility_changes(tmp_path) -> None:
    broker = await _started(tmp_path)
    try:
        await _put(broker, 4)
        core = broker.pop_core
        got = await core.receive(PopReceiveRequest("pg", "Core", 32, invisible_ms=60_000, poll_ms=100))
        assert got.ok and len(got.value) == 4
        handles = [d.handle.encode() for d in got.value]
        changed = core.change_invisibility(ChangeInvisibilityRequest("pg", "Core", handles[3], 200))
        assert changed.ok and changed.value.invisible_ms == 200
        acked = core.ack(AckRequest("pg", "Core", handles[:3] + ["not a handle"]))
        assert acked.ok and [a.ok for a in acked.value] == [True, True, True, False]
        assert acked.value[3].code == ResponseCode.INVALID_PARAMETER and acked.value[3].reason == "receipt_handle"
        again = core.ack(AckRequest("pg", "Core", handles[:1]))  # acking again is harmless
        assert again.ok and again.value[0].ok
        refused = core.ack(AckRequest("pg", "Core", []))
        assert refused.code == ResponseCode.INVALID_PARAMETER and refused.reason == "entries"
        short = await core.receive(PopReceiveRequest("pg", "Core", 32, invisible_ms=10, poll_ms=100))
        assert short.code == ResponseCode.INVALID_PARAMETER and short.reason == "invisible_time"
        bad_name = await core.receive(PopReceiveRequest("bad group!", "Core", 32, invisible_ms=1000))
        assert bad_name.code == ResponseCode.INVALID_PARAMETER and bad_name.reason == "group"
    finally:
        await broker.shutdown()
    broker = Broker(_config(tmp_path))
    await broker.start()
    try:  # the three acked stay acked; the fourth comes back after its (changed) invisible time
        again = await broker.pop_core.receive(PopReceiveRequest("pg", "Core", 32, invisible_ms=60_000, poll_ms=3000))
        assert again.ok and [d.queue_offset for d in again.value] == [3]
        assert again.value[0].attempt == 2
    finally:
        await broker.shutdown()


async def test_acks_by_issued_handle_text_and_the_handles_that_need_checking(tmp_path) -> None:
    """An ack naming the handle as handed out is recognised by its text; a handle the delivery no longer has (its
    invisibility changed since), a forged one (another commit-log offset, a non-numeric field) or a lapsed one is
    checked field by field and refused as before."""
    broker = await _started(tmp_path)
    try:
        await _put(broker, 4)
        core = broker.pop_core
        got = await core.receive(PopReceiveRequest("pg", "Core", 32, invisible_ms=400, poll_ms=100))
        assert got.ok and len(got.value) == 4
        texts = [d.handle_text for d in got.value]
        changed = core.change_invisibility(ChangeInvisibilityRequest("pg", "Core", texts[1], 60_000))
        assert changed.ok
        fields = texts[2].split(" ")
        forged_phys = " ".join(fields[:8] + [str(int(fields[8]) + 1)])
        forged_start = " ".join(["x"] + fields[1:])
        acked = core.ack(AckRequest("pg", "Core", [texts[0], forged_phys, forged_start, texts[0]]))
        assert acked.ok and [(a.ok, a.reason) for a in acked.value] == [
            (True, ""), (False, "receipt_handle"), (False, "receipt_handle"), (True, "")]
        assert "does not name" in acked.value[1].remark and "not one this broker" in acked.value[2].remark
        await asyncio.sleep(0.5)  # the first handles lapse; the changed delivery is invisible for a minute
        late = core.ack(AckRequest("pg", "Core", [texts[1], texts[2], changed.value.encode()]))
        assert [(a.ok, a.reason) for a in late.value] == [(False, "receipt_handle"), (False, "receipt_handle"),
                                                          (True, "")]
        assert "expired" in late.value[0].remark and "expired" in late.value[1].remark
        progress = broker.pop_service.state.get(("pg", "Core", 0))
        assert sorted(progress.inflight) == [2, 3]  # the lapsed ones, to come back
    finally:
        await broker.shutdown()
