"""The offsets core (broker/core/offsets.py) over a real store, topic and group registries and offset table in a tmp
dir: committed offsets queried (young-queue rule), updated (each refusal with its code and field), reset by time
(forced or only backwards, persisted, refused when it cannot be written); a queue's min / max / by-time / earliest
store time; and the typed requests' needs equal the remoting table's for the same codes."""

from __future__ import annotations

from broker.acl.resources import needed_resources
from broker.config import BrokerConfig
from broker.core.offsets import (QUEUE_EARLIEST_STORE_TIME, QUEUE_MAX, QUEUE_MIN, QUEUE_OFFSET_BY_TIME,
                                 REASON_NOT_PERSISTED, OffsetService, QueryConsumerOffset, QueueOffsetQuery,
                                 ResetOffset, UpdateConsumerOffset)
from broker.managers.consumer_offset import ConsumerOffsetManager
from broker.managers.subscription_group import SubscriptionGroupManager
from broker.managers.topic_config import TopicConfigManager
from protocol.codes import RequestCode, ResponseCode
from protocol.headers import (GetEarliestMsgStoretimeRequestHeader, GetMaxOffsetRequestHeader,
                              GetMinOffsetRequestHeader, QueryConsumerOffsetRequestHeader, ResetOffsetRequestHeader,
                              SearchOffsetRequestHeader, UpdateConsumerOffsetRequestHeader)
from tests.support.store import FakeClock, make_msg, open_store

T0 = 1_700_000_000_000
TOPIC = "Offsets"


class _Parts:
    """A store (its clock moved by hand), the three registries, and the service over them."""

    def __init__(self, root, auto_create_groups: bool = True, offsets_dir: str | None = None) -> None:
        self.clock = FakeClock(T0)
        self.store = open_store(root / "store", clock=self.clock)
        config = BrokerConfig(store_path_root_dir=str(root), broker_name="b", broker_ip1="127.0.0.1",
                              listen_port=10911, namesrv_addr=None)
        config_dir = str(root / "config")
        self.topics = TopicConfigManager(config, config_dir)
        self.topics.create_topic_if_absent(TOPIC, 2)
        self.groups = SubscriptionGroupManager(config_dir, auto_create=auto_create_groups)
        self.offsets = ConsumerOffsetManager(offsets_dir or config_dir)
        self.service = OffsetService(self.store, self.topics, self.groups, self.offsets)

    async def put(self, count: int, queue_id: int = 0, step_ms: int = 1000) -> None:
        """``count`` messages on the queue, stored ``step_ms`` apart."""
        for i in range(count):
            result = await self.store.put_message(make_msg(i, topic=TOPIC, queue_id=queue_id))
            assert result.ok
            self.clock.now += step_ms


async def test_query_committed_young_queue_and_not_found(tmp_path) -> None:
    parts = _Parts(tmp_path)
    try:
        service = parts.service
        bad = service.query(QueryConsumerOffset("bad group!", TOPIC, 0))
        assert bad.code == ResponseCode.INVALID_PARAMETER and bad.reason == "group"
        assert bad.remark.startswith("consumerGroup: ")
        empty = service.query(QueryConsumerOffset("g", TOPIC, 0))  # nothing stored, queue empty
        assert empty.code == ResponseCode.QUERY_NOT_FOUND and "maybe this group consumer boot first" in empty.remark
        await parts.put(3)
        young = service.query(QueryConsumerOffset("g", TOPIC, 0))  # message 0 still stored: start at 0
        assert young.ok and young.value == 0
        strict = service.query(QueryConsumerOffset("g", TOPIC, 0, zero_if_not_found=False))
        assert strict.code == ResponseCode.QUERY_NOT_FOUND and strict.value is None
        unknown = service.query(QueryConsumerOffset("g", "NoSuchTopic", 0))
        assert unknown.code == ResponseCode.QUERY_NOT_FOUND
        parts.offsets.commit_offset("g", TOPIC, 0, 2)
        committed = service.query(QueryConsumerOffset("g", TOPIC, 0, zero_if_not_found=False))
        assert committed.ok and committed.value == 2
    finally:
        parts.store.close()


async def test_update_stores_checked_commits_and_refuses_the_rest(tmp_path) -> None:
    parts = _Parts(tmp_path)
    try:
        service = parts.service
        await parts.put(3)  # queue 0: maxOffset 3; queue 1: empty
        for offset in (0, 3):  # 3 == maxOffset: everything consumed
            done = service.update(UpdateConsumerOffset("g", TOPIC, 0, offset, "10.0.0.1:5"))
            assert done.ok and done.value is None
            assert parts.offsets.query_offset("g", TOPIC, 0) == offset
        assert parts.groups.find("g") is not None  # created by the first commit (auto-create on)
        refusals = [
            (UpdateConsumerOffset("bad group!", TOPIC, 0, 1), ResponseCode.INVALID_PARAMETER, "group",
             "consumerGroup: "),
            (UpdateConsumerOffset("g", "NoSuchTopic", 0, 1), ResponseCode.TOPIC_NOT_EXIST, "topic",
             "topic[NoSuchTopic] not exist"),
            (UpdateConsumerOffset("g", TOPIC, 2, 0), ResponseCode.INVALID_PARAMETER, "queue",
             "queueId[2] is illegal, topic[Offsets] has 2 read queues"),
            (UpdateConsumerOffset("g", TOPIC, -1, 0), ResponseCode.INVALID_PARAMETER, "queue", "queueId[-1]"),
            (UpdateConsumerOffset("g", TOPIC, 0, -1), ResponseCode.INVALID_PARAMETER, "offset",
             "commitOffset[-1] is illegal: an offset is never negative"),
            (UpdateConsumerOffset("g", TOPIC, 0, 4), ResponseCode.INVALID_PARAMETER, "offset",
             "beyond the queue's maxOffset 3"),
            (UpdateConsumerOffset("g", TOPIC, 1, 1), ResponseCode.INVALID_PARAMETER, "offset", "maxOffset 0"),
        ]
        for request, code, reason, remark in refusals:
            refused = service.update(request)
            assert (refused.code, refused.reason) == (code, reason), (request, refused)
            assert remark in refused.remark, (request, refused.remark)
        assert parts.offsets.query_offset("g", TOPIC, 0) == 3  # nothing refused was stored
        assert parts.offsets.query_offset("g", TOPIC, 1) == -1
    finally:
        parts.store.close()


async def test_update_refuses_an_unknown_group_without_auto_create(tmp_path) -> None:
    parts = _Parts(tmp_path, auto_create_groups=False)
    try:
        await parts.put(1)
        refused = parts.service.update(UpdateConsumerOffset("newGroup", TOPIC, 0, 1))
        assert refused.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and refused.reason == "group"
        assert refused.remark == "subscription group not exist, newGroup"
        assert parts.offsets.query_offset("newGroup", TOPIC, 0) == -1
    finally:
        parts.store.close()


async def test_reset_by_time_forced_or_backwards_only_and_persisted(tmp_path) -> None:
    parts = _Parts(tmp_path)
    try:
        service = parts.service
        await parts.put(5, queue_id=0)  # stored at T0, T0+1s, ... T0+4s
        await parts.put(2, queue_id=1)  # stored at T0+5s, T0+6s
        parts.offsets.commit_offset("g", TOPIC, 0, 1)
        parts.offsets.commit_offset("g", TOPIC, 1, 2)
        # not forced: queue 0 would move forward (1 -> 3) so keeps 1; queue 1 moves back (2 -> 0)
        kept = await service.reset(ResetOffset("g", TOPIC, T0 + 2500, force=False))
        assert kept.ok and kept.value.offsets == {0: 1, 1: 0}
        assert (kept.value.group, kept.value.topic, kept.value.timestamp, kept.value.force) == \
            ("g", TOPIC, T0 + 2500, False)
        forced = await service.reset(ResetOffset("g", TOPIC, T0 + 2500))
        assert forced.ok and forced.value.offsets == {0: 3, 1: 0}
        to_end = await service.reset(ResetOffset("g", TOPIC, -1))
        assert to_end.value.offsets == {0: 5, 1: 2}
        reread = ConsumerOffsetManager(str(tmp_path / "config"))  # persisted before the answer
        reread.load()
        assert reread.query_offsets("g", TOPIC) == {0: 5, 1: 2}
        nothing_committed = await service.reset(ResetOffset("fresh", TOPIC, T0, force=False))
        assert nothing_committed.value.offsets == {0: 0, 1: 0}
        bad = await service.reset(ResetOffset("bad group!", TOPIC, -1))
        assert bad.code == ResponseCode.INVALID_PARAMETER and bad.reason == "group" and bad.remark.startswith("group: ")
        missing = await service.reset(ResetOffset("g", "NoSuchTopic", -1))
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST and missing.remark == "topic[NoSuchTopic] not exist"
    finally:
        parts.store.close()


async def test_reset_that_cannot_be_written_is_a_system_error(tmp_path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the offsets' directory should be")
    parts = _Parts(tmp_path, offsets_dir=str(blocker / "config"))
    try:
        await parts.put(2)
        refused = await parts.service.reset(ResetOffset("g", TOPIC, -1))
        assert refused.code == ResponseCode.SYSTEM_ERROR and refused.reason == REASON_NOT_PERSISTED
        assert refused.remark.startswith("offsets reset, not persisted: ")
    finally:
        parts.store.close()


async def test_queue_offsets_min_max_by_time_and_earliest_store_time(tmp_path) -> None:
    parts = _Parts(tmp_path)
    try:
        ask = parts.service.queue_offset
        assert ask(QueueOffsetQuery(TOPIC, 0, QUEUE_MAX)).value == 0
        assert ask(QueueOffsetQuery(TOPIC, 0, QUEUE_EARLIEST_STORE_TIME)).value == -1  # empty queue
        await parts.put(4)  # stored at T0 .. T0+3s
        assert ask(QueueOffsetQuery(TOPIC, 0, QUEUE_MAX)).value == 4
        assert ask(QueueOffsetQuery(TOPIC, 0, QUEUE_MIN)).value == 0
        assert ask(QueueOffsetQuery(TOPIC, 0, QUEUE_EARLIEST_STORE_TIME)).value == T0
        assert ask(QueueOffsetQuery(TOPIC, 0, QUEUE_OFFSET_BY_TIME, T0 + 1500)).value == 2  # LOWER by default
        assert ask(QueueOffsetQuery(TOPIC, 0, QUEUE_OFFSET_BY_TIME, T0 + 1500, " upper ")).value == 1
        assert ask(QueueOffsetQuery(TOPIC, 0, QUEUE_OFFSET_BY_TIME, T0 + 99_000, "LOWER")).value == 4
        # an unknown topic or queue answers 0, as the reference's broker does
        assert ask(QueueOffsetQuery("NoSuchTopic", 0, QUEUE_MAX)).value == 0
        assert ask(QueueOffsetQuery(TOPIC, 9, QUEUE_MIN)).value == 0
        wrong = ask(QueueOffsetQuery(TOPIC, 0, QUEUE_OFFSET_BY_TIME, T0, "MIDDLE"))
        assert wrong.code == ResponseCode.INVALID_PARAMETER and wrong.reason == "boundary_type"
        assert wrong.remark == "header field 'boundaryType': expected LOWER or UPPER, got 'MIDDLE'"
        unknown = ask(QueueOffsetQuery(TOPIC, 0, "median"))
        assert unknown.code == ResponseCode.INVALID_PARAMETER and unknown.reason == "question"
    finally:
        parts.store.close()


def test_typed_requests_need_what_the_remoting_table_says() -> None:
    fields = {"consumerGroup": "g", "group": "g", "topic": "T", "queueId": "0", "commitOffset": "1",
              "timestamp": "-1"}
    pairs = [
        (RequestCode.QUERY_CONSUMER_OFFSET, QueryConsumerOffsetRequestHeader, QueryConsumerOffset("g", "T", 0)),
        (RequestCode.UPDATE_CONSUMER_OFFSET, UpdateConsumerOffsetRequestHeader, UpdateConsumerOffset("g", "T", 0, 1)),
        (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ResetOffsetRequestHeader, ResetOffset("g", "T", -1)),
        (RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader, QueueOffsetQuery("T", 0, QUEUE_MAX)),
        (RequestCode.GET_MIN_OFFSET, GetMinOffsetRequestHeader, QueueOffsetQuery("T", 0, QUEUE_MIN)),
        (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, SearchOffsetRequestHeader,
         QueueOffsetQuery("T", 0, QUEUE_OFFSET_BY_TIME, 5)),
        (RequestCode.GET_EARLIEST_MSG_STORETIME, GetEarliestMsgStoretimeRequestHeader,
         QueueOffsetQuery("T", 0, QUEUE_EARLIEST_STORE_TIME)),
    ]
    for code, header_type, typed in pairs:
        header = header_type.decode({**fields, "timestamp": "5"} if code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
                                    else fields)
        assert typed.needs() == needed_resources(code, header), code
        assert typed.needs()  # each names a resource
