"""Filtered consumption end to end with the client library against the real broker process: push consumers with
TAG and SQL92 subscriptions receive exactly the matching messages, first time and as retries through
%RETRY%<group> (a retried message is filtered again with the group's current filter for its original topic);
pull consumers with SQL92 and tag selectors; CHECK_CLIENT_CONFIG refusals fail PushConsumer.start().

The tag hash collision ("Aa" / "BB") on the push path is covered by
test_client_push.py::test_tag_subscription_refilters_hash_collisions; here only the pull consumer's re-filter."""

from __future__ import annotations

import asyncio
import collections

import pytest

from client import (
    ConsumeResult,
    Message,
    MessageSelector,
    Producer,
    PullConsumer,
    PullStatus,
    SendStatus,
    SubscriptionCheckError,
)
from tests.support.broker_process import BrokerProcess
from protocol.codes import RequestCode, ResponseCode

from tests.support.client_helpers import Recorder, push_consumer, wait_for
from tests.support.wire import WireClient

DELAY_LEVELS = " ".join(f"{100 * (i + 1)}ms" for i in range(18))
ISSUE_SELECTOR = "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)"
STRING_SELECTOR = "color IN ('red', 'blue') AND weight > 2.5 AND name NOT STARTSWITH 'x'"

# name -> (tag, properties); numbers arrive as strings, so the int bounds of BETWEEN parse them as Java ints.
CATALOGUE: dict[str, tuple[str | None, dict[str, str]]] = {
    "m00": ("TagA", {"a": "1", "color": "red", "weight": "3", "name": "apple"}),
    "m01": ("TagB", {"a": "5", "color": "blue", "weight": "2.5", "name": "berry"}),   # a > 3; weight not > 2.5
    "m02": ("TagC", {"a": "2", "color": "green", "weight": "9"}),                    # tag; colour
    "m03": (None, {"a": "2", "color": "red", "weight": "1e1", "name": "plum"}),      # no tag
    "m04": ("TagB", {"a": "3", "color": "red", "weight": " 4 ", "name": "xigua"}),   # name starts with x
    "m05": ("TagA", {"a": "abc", "color": "blue", "weight": "2.75", "name": "fig"}),  # 'abc' is no int
    "m06": ("TagA", {"color": "Red", "weight": "5"}),                                 # a missing; 'Red' != 'red'
    "m07": ("TagA", {"a": "0", "weight": "7"}),                                      # colour missing
    "m08": ("TagB", {"a": "3.0", "color": "blue", "weight": "NaN", "name": "kiwi"}),  # '3.0' is no int; NaN > 2.5
    "m09": ("TagB", {"a": "-1", "color": "red", "weight": "abc"}),                   # a < 0; weight no number
    "m10": ("TagB", {"a": "03", "color": "blue", "weight": "100", "name": "date"}),    # leading zero is fine
    "m11": ("TagD", {"a": "1", "color": "red"}),                                     # weight missing
    "m12": ("TagA", {"a": " 2", "color": "red", "weight": "2.5000001", "name": "lime"}),  # ' 2' is no int
    "m13": ("TagB", {"a": "+2", "color": "blue", "weight": "-3"}),                   # '+2' is an int
    "m14": ("TagA", {"a": "3000000000", "color": "red", "weight": "3", "name": "x"}),  # beyond int range
}
ISSUE_MATCHES = {"m00", "m04", "m07", "m10", "m13"}
TAG_MATCHES = {"m00", "m01", "m04", "m05", "m06", "m07", "m08", "m09", "m10", "m12", "m13", "m14"}  # TagA || TagB
STRING_MATCHES = {"m00", "m03", "m05", "m08", "m10", "m12"}  # NOT STARTSWITH on a missing name is FALSE


@pytest.fixture(scope="module")
def filter_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("filter-consumers"), "broker-fc",
                           extra={"enablePropertyFilter": "true", "messageDelayLevel": DELAY_LEVELS}).start()
    yield broker
    broker.stop()


async def produce(ns: str, topic: str, catalogue=CATALOGUE, queue_nums: int = 2) -> None:
    async with Producer("fc-pg", ns, default_topic_queue_nums=queue_nums) as producer:
        for name, (tag, properties) in catalogue.items():
            result = await producer.send(Message(topic, name.encode(), tags=tag, properties=properties))
            assert result.status is SendStatus.SEND_OK


class FailOnce:
    """Listener that answers RECONSUME_LATER to the first delivery of every message (fail_all: to every one)."""

    def __init__(self, fail_all: bool = False) -> None:
        self.fail_all = fail_all
        self.deliveries: list[tuple[str, str, int]] = []  # (body, topic, reconsume_times)
        self.counts: collections.Counter = collections.Counter()

    async def __call__(self, msgs):
        verdict = ConsumeResult.SUCCESS
        for m in msgs:
            name = m.body.decode()
            self.deliveries.append((name, m.topic, m.reconsume_times))
            self.counts[name] += 1
            if self.fail_all or self.counts[name] == 1:
                verdict = ConsumeResult.RECONSUME_LATER
        return verdict

    def first_and_retried(self) -> tuple[set[str], set[str]]:
        return ({b for b, _, n in self.deliveries if n == 0}, {b for b, _, n in self.deliveries if n >= 1})


async def test_push_consumers_get_exactly_the_matching_messages_including_retries(filter_broker):
    ns, topic = filter_broker.namesrv_addr, "FcPush"
    await produce(ns, topic)
    listeners = {"sql": FailOnce(), "tag": FailOnce(), "str": FailOnce()}
    consumers = [
        push_consumer("fc-push-sql", ns, topic, listeners["sql"], MessageSelector.sql(ISSUE_SELECTOR)),
        push_consumer("fc-push-tag", ns, topic, listeners["tag"], "TagA || TagB"),
        push_consumer("fc-push-str", ns, topic, listeners["str"], MessageSelector.sql(STRING_SELECTOR)),
    ]
    expected = {"sql": ISSUE_MATCHES, "tag": TAG_MATCHES, "str": STRING_MATCHES}
    await asyncio.gather(*(c.start() for c in consumers))
    try:
        await wait_for(lambda: all(len(listeners[k].deliveries) >= 2 * len(expected[k]) for k in listeners),
                       "every matching message delivered and redelivered once", timeout=15)
        await asyncio.sleep(0.8)  # anything unexpected (a non-matching message, a third delivery) shows up now
    finally:
        await asyncio.gather(*(c.shutdown() for c in consumers))
    for key, listener in listeners.items():
        first, retried = listener.first_and_retried()
        assert first == expected[key], key
        assert retried == expected[key], key
        assert all(n == 2 for n in listener.counts.values()), (key, listener.counts)
        assert {t for _, t, _ in listener.deliveries} == {topic}, key  # retries carry the original topic


async def test_retries_are_filtered_with_the_groups_current_subscription(filter_broker):
    """Messages that went to %RETRY%<group> under a broad selector come back only if they match the selector the
    group uses when they are redelivered: the broker filters the retry queue for the original topic too."""
    ns, topic, group = filter_broker.namesrv_addr, "FcRetrySwitch", "fc-retry-switch"
    await produce(ns, topic)
    broad = FailOnce(fail_all=True)
    with_a = {name for name, (_, p) in CATALOGUE.items() if "a" in p}
    first = push_consumer(group, ns, topic, broad, MessageSelector.sql("a IS NOT NULL"))
    await first.start()
    try:
        await wait_for(lambda: {b for b, _, _ in broad.deliveries} >= with_a, "every message with a", timeout=10)
    finally:
        await first.shutdown()
    assert {b for b, _, _ in broad.deliveries} == with_a

    narrow = FailOnce()
    narrow.counts.update(with_a)  # do not fail again
    second = push_consumer(group, ns, topic, narrow, MessageSelector.sql(ISSUE_SELECTOR))
    await second.start()
    try:
        await wait_for(lambda: {b for b, _, _ in narrow.deliveries} >= ISSUE_MATCHES, "the retried matches",
                       timeout=10)
        await asyncio.sleep(1.0)  # every retry copy is due by now (delay level 3 + n = 300 ms + n x 100 ms)
    finally:
        await second.shutdown()
    assert {b for b, _, _ in narrow.deliveries} == ISSUE_MATCHES
    assert all(n >= 1 for _, _, n in narrow.deliveries)  # only retries: the original queue's offsets were committed


async def _pull_all(consumer: PullConsumer, topic: str, selector) -> tuple[list[str], int]:
    """Every message selector delivers from all queues of topic, and how many pulls that took."""
    names, pulls = [], 0
    for mq in await consumer.fetch_message_queues(topic):
        offset = 0
        for _ in range(100):
            result = await consumer.pull(mq, selector, offset, 4)
            pulls += 1
            names.extend(m.body.decode() for m in result.messages)
            if result.status is PullStatus.NO_NEW_MSG:
                break
            assert result.status in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG), result.status
            assert result.next_begin_offset > offset
            offset = result.next_begin_offset
    return names, pulls


async def test_pull_consumer_with_sql_and_tag_selectors(filter_broker):
    ns, topic = filter_broker.namesrv_addr, "FcPull"
    catalogue = dict(CATALOGUE)
    catalogue.update({"c0": ("Aa", {"a": "1"}), "c1": ("BB", {"a": "1"}), "c2": ("Aa", {"a": "9"})})
    await produce(ns, topic, catalogue)
    async with PullConsumer("fc-pull", ns) as consumer:
        sql, _ = await _pull_all(consumer, topic, MessageSelector.sql(ISSUE_SELECTOR))
        assert sorted(sql) == sorted(ISSUE_MATCHES)
        strings, _ = await _pull_all(consumer, topic, MessageSelector.sql(STRING_SELECTOR))
        assert sorted(strings) == sorted(STRING_MATCHES)
        tags, _ = await _pull_all(consumer, topic, "TagA || TagB")
        assert sorted(tags) == sorted(TAG_MATCHES)
        # "Aa" and "BB" share a hash code: the broker cannot tell them apart, the client re-filters exactly
        assert sorted((await _pull_all(consumer, topic, "Aa"))[0]) == ["c0", "c2"]
        assert sorted((await _pull_all(consumer, topic, "BB"))[0]) == ["c1"]
        assert sorted((await _pull_all(consumer, topic, MessageSelector.sql("TAGS = 'Aa' AND a = 1")))[0]) == ["c0"]
        everything, _ = await _pull_all(consumer, topic, "*")
        assert sorted(everything) == sorted(catalogue)
        queues = await consumer.fetch_message_queues(topic)
        with pytest.raises(Exception) as refused:
            await consumer.pull(queues[0], MessageSelector.sql("a LIKE 'x%'"), 0, 4)
        assert getattr(refused.value, "code", None) == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "column 3" in str(refused.value)


async def _group_has_consumers(addr: str, group: str) -> bool:
    async with await WireClient.connect(addr) as wire:
        reply = await wire.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    return reply.code == ResponseCode.SUCCESS


async def test_unparsable_selector_fails_start_with_the_brokers_remark(filter_broker):
    ns, topic, group = filter_broker.namesrv_addr, "FcBadSelector", "fc-bad-selector"
    await produce(ns, topic, {"x": ("TagA", {"a": "1"})})
    consumer = push_consumer(group, ns, topic, FailOnce(), MessageSelector.sql("a = 1 AND b LIKE 'x%'"))
    with pytest.raises(SubscriptionCheckError) as failed:
        await consumer.start()
    err = failed.value
    assert err.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and err.addr == filter_broker.addr
    assert "unexpected 'LIKE'" in err.remark and "column 13" in err.remark
    assert err.remark in str(err) and group in str(err) and topic in str(err)
    await consumer.shutdown()  # harmless after a failed start
    assert not await _group_has_consumers(filter_broker.addr, group)  # the failed start unregistered the client
    # a selector that compiles is accepted by the same check
    ok = push_consumer(group, ns, topic, FailOnce(), MessageSelector.sql("a = 1 AND b IS NULL"))
    await ok.start()
    await ok.shutdown()


async def test_property_filter_disabled_fails_an_sql_push_consumer(shared_broker):
    ns, topic = shared_broker.namesrv_addr, "FcNoPropertyFilter"
    await produce(ns, topic, {"x": ("TagA", {"a": "1"})})
    consumer = push_consumer("fc-disabled", ns, topic, FailOnce(), MessageSelector.sql("a = 1"))
    with pytest.raises(SubscriptionCheckError) as failed:
        await consumer.start()
    assert failed.value.code == ResponseCode.SYSTEM_ERROR
    assert "enablePropertyFilter" in str(failed.value) and "SQL92" in str(failed.value)
    await consumer.shutdown()
    # tag subscriptions need no check and work on the same broker
    listener = Recorder()
    tagged = push_consumer("fc-disabled-tag", ns, topic, listener, "TagA")
    await tagged.start()
    try:
        await wait_for(lambda: listener.deliveries, "the tagged message")
    finally:
        await tagged.shutdown()
    assert listener.bodies == {b"x"}
