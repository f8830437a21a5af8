"""Consumption semantics of the reference client, against the real broker: a listener returning None, orderly
retries without limit, the consume context (ack_index, delay_level_when_next_consume, suspend time, auto_commit),
consume_timeout, the send-back fallback and PullConsumer.send_message_back."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from client import ConsumeOrderlyResult, ConsumeResult, Message, Producer, PullConsumer, PullStatus, SendStatus

from tests.support.client_helpers import DELAY_LEVELS, push_consumer, read_queue, wait_for


async def send_all(ns: str, topic: str, bodies: list[bytes], queues: int = 1) -> list:
    """Send bodies in order; a new topic gets `queues` queues (1: everything in one queue, in order)."""
    async with Producer("c13-pg", ns, default_topic_queue_nums=queues) as producer:
        results = [await producer.send(Message(topic, body)) for body in bodies]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    return results


async def committed_offset(ns: str, group: str, topic: str) -> int:
    async with PullConsumer(group, ns) as pull:
        [mq] = await pull.fetch_message_queues(topic)
        return await pull.fetch_consume_offset(mq)


def none_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "returned None" in r.getMessage()]


# --------------------------------------------------------------------------------------------- None
async def test_listener_returning_none_is_retried_and_warned_about_once(retry_broker, caplog):
    ns, topic, group = retry_broker.namesrv_addr, "C13None", "cg-c13-none"
    seen: list[tuple[bytes, int]] = []

    async def forgetful_listener(msgs):
        for m in msgs:
            seen.append((m.body, m.reconsume_times))
            if m.reconsume_times:
                return ConsumeResult.SUCCESS
        # no return on the first delivery: the reference treats that as RECONSUME_LATER

    consumer = push_consumer(group, ns, topic, forgetful_listener)
    with caplog.at_level(logging.WARNING):
        await send_all(ns, topic, [b"n1", b"n2"])
        await consumer.start()
        try:
            await wait_for(lambda: {(b"n1", 1), (b"n2", 1)} <= set(seen), "both messages redelivered", 20)
        finally:
            await consumer.shutdown()
    warnings = none_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "forgetful_listener" in warnings[0] and "RECONSUME_LATER" in warnings[0]


async def test_orderly_listener_returning_none_suspends_and_keeps_order(retry_broker, caplog):
    ns, topic, group = retry_broker.namesrv_addr, "C13OrderNone", "cg-c13-order-none"
    seen: list[bytes] = []

    def forgetful_orderly(msgs):
        seen.extend(m.body for m in msgs)
        if len(seen) == 1:
            return None
        return ConsumeOrderlyResult.SUCCESS

    consumer = push_consumer(group, ns, topic, forgetful_orderly, suspend_current_queue_time_millis=50)
    consumer.register_listener(forgetful_orderly, orderly=True)
    with caplog.at_level(logging.WARNING):
        await send_all(ns, topic, [b"o1", b"o2", b"o3"])
        await consumer.start()
        try:
            await wait_for(lambda: len(seen) >= 4, "the three messages, the first one twice", 20)
        finally:
            await consumer.shutdown()
    assert seen[:4] == [b"o1", b"o1", b"o2", b"o3"]
    warnings = none_warnings(caplog)
    assert len(warnings) == 1 and "forgetful_orderly" in warnings[0] and "SUSPEND" in warnings[0]


# --------------------------------------------------------------------------------------------- orderly retries
async def test_orderly_retries_past_sixteen_failures_by_default(retry_broker):
    ns, topic, group = retry_broker.namesrv_addr, "C13OrderForever", "cg-c13-forever"
    seen: list[tuple[bytes, int]] = []

    async def listener(msgs):
        seen.extend((m.body, m.reconsume_times) for m in msgs)
        if msgs[0].body == b"f1" and sum(1 for b, _ in seen if b == b"f1") <= 20:
            return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyResult.SUCCESS

    consumer = push_consumer(group, ns, topic, listener, suspend_current_queue_time_millis=10)
    consumer.register_listener(listener, orderly=True)
    await send_all(ns, topic, [b"f1", b"f2"])
    await consumer.start()
    try:
        await wait_for(lambda: (b"f2", 0) in seen, "the second message after 20 failures of the first", 30)
    finally:
        await consumer.shutdown()
    bodies = [b for b, _ in seen]
    assert bodies == [b"f1"] * 21 + [b"f2"]  # never skipped, order kept
    assert seen[20] == (b"f1", 20)
    assert await read_queue(ns, group, "%DLQ%" + group) == []


async def test_orderly_explicit_max_reconsume_times_still_dead_letters(retry_broker):
    ns, topic, group = retry_broker.namesrv_addr, "C13OrderMax", "cg-c13-order-max"
    seen: list[bytes] = []

    async def listener(msgs):
        seen.extend(m.body for m in msgs)
        return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT if msgs[0].body == b"d1" else \
            ConsumeOrderlyResult.SUCCESS

    consumer = push_consumer(group, ns, topic, listener, suspend_current_queue_time_millis=10, max_reconsume_times=2)
    consumer.register_listener(listener, orderly=True)
    await send_all(ns, topic, [b"d1", b"d2"])
    await consumer.start()
    try:
        await wait_for(lambda: b"d2" in seen, "the second message once the first is dead-lettered", 20)
    finally:
        await consumer.shutdown()
    assert seen == [b"d1", b"d1", b"d1", b"d2"]
    dead = await read_queue(ns, group, "%DLQ%" + group)
    assert [m.body for m in dead] == [b"d1"]


# --------------------------------------------------------------------------------------------- context
async def test_ack_index_acknowledges_part_of_a_batch(retry_broker):
    ns, topic, group = retry_broker.namesrv_addr, "C13Ack", "cg-c13-ack"
    calls: list[list[tuple[bytes, int]]] = []

    def listener(msgs, context):
        calls.append([(m.body, m.reconsume_times) for m in msgs])
        if len(calls) == 1:
            context.ack_index = 1  # the first two succeeded; the rest go back to the broker
        return ConsumeResult.SUCCESS

    await send_all(ns, topic, [b"a0", b"a1", b"a2", b"a3"])
    consumer = push_consumer(group, ns, topic, listener, consume_message_batch_max_size=4)
    await consumer.start()
    try:
        await wait_for(lambda: sum(len(c) for c in calls) >= 6, "the unacknowledged two redelivered", 20)
        await asyncio.sleep(0.5)
    finally:
        await consumer.shutdown()
    assert calls[0] == [(b"a0", 0), (b"a1", 0), (b"a2", 0), (b"a3", 0)]
    again = sorted(d for c in calls[1:] for d in c)
    assert again == [(b"a2", 1), (b"a3", 1)]
    assert await committed_offset(ns, group, topic) == 4


async def test_delay_level_minus_one_sends_straight_to_the_dlq(retry_broker):
    ns, topic, group = retry_broker.namesrv_addr, "C13Dlq", "cg-c13-dlq"
    seen: list[bytes] = []

    async def listener(msgs, context):
        seen.extend(m.body for m in msgs)
        context.delay_level_when_next_consume = -1
        return ConsumeResult.RECONSUME_LATER

    await send_all(ns, topic, [b"x1"])
    consumer = push_consumer(group, ns, topic, listener)
    await consumer.start()
    try:
        async def dead():
            return [m.body for m in await read_queue(ns, group, "%DLQ%" + group)]
        assert await wait_for(dead, "the message in the DLQ", 20) == [b"x1"]
        await asyncio.sleep(1.0)  # a retry would come back within ~0.3 s with these delay levels
    finally:
        await consumer.shutdown()
    assert seen == [b"x1"]


async def test_orderly_context_suspend_time_is_honoured(retry_broker):
    ns, topic, group = retry_broker.namesrv_addr, "C13Suspend", "cg-c13-suspend"
    times: list[float] = []

    async def listener(msgs, context):
        times.append(time.monotonic())
        if len(times) == 1:
            context.suspend_current_queue_time_millis = 1500
            return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyResult.SUCCESS

    consumer = push_consumer(group, ns, topic, listener, suspend_current_queue_time_millis=10)
    consumer.register_listener(listener, orderly=True)
    await send_all(ns, topic, [b"s1"])
    await consumer.start()
    try:
        await wait_for(lambda: len(times) >= 2, "the suspended message again", 20)
    finally:
        await consumer.shutdown()
    assert times[1] - times[0] >= 1.4  # the consumer's own suspend time is 10 ms


async def test_orderly_auto_commit_off_commits_only_on_commit(retry_broker):
    ns, topic, group = retry_broker.namesrv_addr, "C13Commit", "cg-c13-commit"
    await send_all(ns, topic, [b"c0", b"c1", b"c2", b"c3"])
    seen: list[bytes] = []

    def listener(msgs, context):
        context.auto_commit = False
        seen.extend(m.body for m in msgs)
        return ConsumeOrderlyResult.COMMIT if msgs[-1].body == b"c1" else ConsumeOrderlyResult.SUCCESS

    consumer = push_consumer(group, ns, topic, listener)
    consumer.register_listener(listener, orderly=True)
    await consumer.start()
    try:
        await wait_for(lambda: len(seen) >= 4, "all four consumed", 20)
        await asyncio.sleep(0.8)  # several offset persist intervals
    finally:
        await consumer.shutdown()
    assert seen == [b"c0", b"c1", b"c2", b"c3"]
    assert await committed_offset(ns, group, topic) == 2  # c2 and c3 were consumed but never committed


async def test_orderly_rollback_consumes_everything_since_the_last_commit_again(retry_broker):
    ns, topic, group = retry_broker.namesrv_addr, "C13Rollback", "cg-c13-rollback"
    await send_all(ns, topic, [b"r0", b"r1", b"r2"])
    seen: list[bytes] = []

    def listener(msgs, context):
        context.auto_commit = False
        context.suspend_current_queue_time_millis = 10
        seen.extend(m.body for m in msgs)
        if seen == [b"r0", b"r1"]:
            return ConsumeOrderlyResult.ROLLBACK
        return ConsumeOrderlyResult.COMMIT if msgs[-1].body == b"r2" else ConsumeOrderlyResult.SUCCESS

    consumer = push_consumer(group, ns, topic, listener)
    consumer.register_listener(listener, orderly=True)
    await consumer.start()
    try:
        await wait_for(lambda: b"r2" in seen, "the last message", 20)
        await asyncio.sleep(0.8)
    finally:
        await consumer.shutdown()
    assert seen == [b"r0", b"r1", b"r0", b"r1", b"r2"]
    assert await committed_offset(ns, group, topic) == 3


# --------------------------------------------------------------------------------------------- consume timeout
async def test_consume_timeout_cancels_an_async_listener_and_sends_the_message_back(retry_broker):
    ns, topic, group = retry_broker.namesrv_addr, "C13Timeout", "cg-c13-timeout"
    seen: list[tuple[bytes, int]] = []
    cancelled: list[bytes] = []

    async def stuck_once(msgs):
        m = msgs[0]
        seen.append((m.body, m.reconsume_times))
        if m.body == b"t1" and m.reconsume_times == 0:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(m.body)
                raise
        return ConsumeResult.SUCCESS

    await send_all(ns, topic, [b"t1", b"t2"])
    consumer = push_consumer(group, ns, topic, stuck_once, consume_timeout=0.02)  # 1.2 s
    await consumer.start()
    try:
        await wait_for(lambda: (b"t1", 1) in seen, "the timed-out message redelivered", 20)
        def topic_offset():
            return [o for mq, o in consumer.current_offsets().items() if mq.topic == topic] == [2]
        await wait_for(topic_offset, "the queue's offset past both", 10)
    finally:
        await consumer.shutdown()
    assert cancelled == [b"t1"]
    assert (b"t2", 0) in seen


# --------------------------------------------------------------------------------------------- send-back fallback
@pytest.fixture
def two_brokers(broker_factory):
    from tests.support.broker_process import NamesrvProcess

    namesrv = NamesrvProcess()
    extra = {"messageDelayLevel": DELAY_LEVELS}
    a = broker_factory("broker-a", embedded_namesrv=False, namesrv_addr=namesrv.addr, extra=extra)
    b = broker_factory("broker-b", embedded_namesrv=False, namesrv_addr=namesrv.addr, extra=extra)
    yield namesrv, a, b
    namesrv.stop()


async def test_failed_send_back_becomes_a_new_message_on_the_retry_topic(two_brokers):
    from client.instance import NameServerClient

    namesrv, a, b = two_brokers
    ns, topic, group = namesrv.addr, "C13Fallback", "cg-c13-fallback"
    lookup = NameServerClient(ns)
    seen: list[tuple[bytes, str, int, str | None, str]] = []

    async def listener(msgs):
        m = msgs[0]
        seen.append((m.body, m.topic, m.reconsume_times, m.get_property("RETRY_TOPIC"), m.broker_name))
        if m.reconsume_times == 0 and m.broker_name == "broker-a" and a.proc.poll() is None:
            async def retry_routed_on_b():  # broker-b created %RETRY%<group> on the heartbeat and registered it
                try:
                    route = await lookup.get_route("%RETRY%" + group)
                except Exception:
                    return False
                return "broker-b" in {q.broker_name for q in route.queues}
            await wait_for(retry_routed_on_b, "the retry topic routed on broker-b", 10)
            a.kill()  # the message's broker is gone: CONSUMER_SEND_MSG_BACK cannot reach it
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    async with Producer("c13-fallback-pg", ns, default_topic_queue_nums=1) as producer:
        async def on_both():
            try:
                route = await producer._instance.update_route("TBW102")
            except Exception:
                return False
            return {q.broker_name for q in route.queues} == {"broker-a", "broker-b"}
        await wait_for(on_both, "both brokers registered", 20)
        on_a: list[bytes] = []
        brokers: set[str] = set()
        for i in range(40):  # round robin: the topic ends up on both brokers, one message of it on broker-a
            result = await producer.send(Message(topic, b"fb-%d" % i))
            brokers.add(result.message_queue.broker_name)
            if result.message_queue.broker_name == "broker-a":
                on_a.append(b"fb-%d" % i)
            if on_a and len(brokers) == 2:
                break
        assert on_a and len(brokers) == 2
    body = on_a[0]

    async def topic_on_both():
        try:
            route = await lookup.get_route(topic)
        except Exception:
            return False
        return {q.broker_name for q in route.queues} == {"broker-a", "broker-b"}
    await wait_for(topic_on_both, "the topic registered by both brokers", 10)
    consumer = push_consumer(group, ns, topic, listener)
    await consumer.start()
    try:
        await wait_for(lambda: any(s[0] == body and s[2] == 1 for s in seen), "the message again, via broker-b", 30)
    finally:
        await consumer.shutdown()
        await lookup.close()
    again = [s for s in seen if s[0] == body and s[2] == 1][0]
    assert again[1] == topic and again[3] == topic and again[4] == "broker-b"


# --------------------------------------------------------------------------------------------- pull consumer
async def test_pull_consumer_send_message_back_redelivers_through_the_retry_topic(retry_broker):
    ns, topic, group = retry_broker.namesrv_addr, "C13PullBack", "cg-c13-pullback"
    [sent] = await send_all(ns, topic, [b"p1"])
    async with PullConsumer(group, ns) as pull:
        [mq] = await pull.fetch_message_queues(topic)
        result = await pull.pull(mq, "*", 0, 8)
        assert result.status is PullStatus.FOUND
        [msg] = result.messages
        await pull.send_message_back(msg, 1)  # delay level 1: 100 ms here

        async def retried():
            return await read_queue(ns, group, "%RETRY%" + group)
        [again] = await wait_for(retried, "the message on %RETRY%<group>", 20)
    assert again.body == b"p1" and again.reconsume_times == 1
    assert again.get_property("RETRY_TOPIC") == topic and again.msg_id == sent.msg_id


# --------------------------------------------------------------------------------------------- missing group
async def test_push_consumer_of_a_group_the_broker_does_not_know_fails_to_start(broker_factory, caplog):
    from client import MQClientError
    from client.admin import AdminClient
    from protocol.config_bodies import SubscriptionGroupConfig

    broker = broker_factory("broker-nogroup", extra={"autoCreateSubscriptionGroup": "false"})
    ns, topic, group = broker.namesrv_addr, "C13NoGroup", "cg-c13-missing"
    await send_all(ns, topic, [b"g1"])
    received: list[bytes] = []

    async def listener(msgs):
        received.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    consumer = push_consumer(group, ns, topic, listener)
    with pytest.raises(MQClientError, match="does not exist") as caught:
        await consumer.start()
    assert group in str(caught.value) and "updateSubGroup" in str(caught.value)

    async with AdminClient(ns) as admin:
        await admin.update_subscription_group(broker.addr, SubscriptionGroupConfig(group))
    consumer = push_consumer(group, ns, topic, listener)
    await consumer.start()
    try:
        await wait_for(lambda: received == [b"g1"], "the message once the group exists", 20)
    finally:
        await consumer.shutdown()


# --------------------------------------------------------------------------------------------- resendDlq
async def test_resend_dlq_reaches_only_the_dead_letter_group(retry_broker):
    from tests.support.admin import mqadmin

    ns, topic = retry_broker.namesrv_addr, "C13Resend"
    failing, other = "cg-c13-resend-a", "cg-c13-resend-b"
    seen: dict[str, list[tuple[bytes, str, int]]] = {failing: [], other: []}

    def listener_for(group):
        async def listener(msgs, context):
            seen[group].extend((m.body, m.topic, m.reconsume_times) for m in msgs)
            if group == failing and len(seen[group]) == 1:
                context.delay_level_when_next_consume = -1  # dead-lettered at once
                return ConsumeResult.RECONSUME_LATER
            return ConsumeResult.SUCCESS
        return listener

    consumers = [push_consumer(g, ns, topic, listener_for(g)) for g in (failing, other)]
    await send_all(ns, topic, [b"dlq-1"])
    for consumer in consumers:
        await consumer.start()
    try:
        await wait_for(lambda: len(seen[other]) == 1 and len(seen[failing]) == 1, "one delivery to each group", 20)

        async def dead():
            return await read_queue(ns, failing, "%DLQ%" + failing)
        await wait_for(dead, "the dead letter", 20)
        result = await asyncio.to_thread(mqadmin, ns, "resendDlq", "-g", failing, "--all")
        assert result.returncode == 0, result.stderr
        assert f"to %RETRY%{failing}" in result.stdout
        await wait_for(lambda: len(seen[failing]) == 2, "the dead letter back in its group", 20)
        await asyncio.sleep(1.0)
    finally:
        for consumer in consumers:
            await consumer.shutdown()
    assert seen[failing][1] == (b"dlq-1", topic, 0)  # seen on its original topic, with a full retry budget
    assert seen[other] == [(b"dlq-1", topic, 0)]  # the other group got no duplicate
