"""Delay transformation (SCHEDULE_TOPIC_XXXX, level clamping) and the schedule service over a real store."""

from __future__ import annotations

import asyncio
import json

from protocol.message import decode_record, iter_records
from protocol.properties import decode_properties

from broker.schedule.delay import (
    SCHEDULE_TOPIC,
    clamp_level,
    delay_level_of,
    restore_from_schedule,
    to_schedule_topic,
)
from broker.schedule.service import ScheduleMessageService
from broker.store import GetStatus

from tests.support.store import BORN_HOST, FakeClock, make_msg, open_store

LEVELS_MS = [1000, 5000, 10_000]


def _props(msg) -> dict[str, str]:
    return decode_properties(msg.properties)


def test_delay_level_parsing():
    assert delay_level_of({}) == 0
    assert delay_level_of({"DELAY": "3"}) == 3
    assert delay_level_of({"DELAY": " 2 "}) == 2
    assert delay_level_of({"DELAY": "x"}) == 0
    assert delay_level_of({"DELAY": "-1"}) == -1
    assert clamp_level(5, 3) == 3 and clamp_level(2, 3) == 2


def test_delayed_message_goes_to_schedule_queue_with_real_destination():
    msg = make_msg(1, topic="Orders", queue_id=2, extra={"DELAY": "2"})
    props = _props(msg)
    assert to_schedule_topic(msg, props, max_level=18)
    assert (msg.topic, msg.queue_id) == (SCHEDULE_TOPIC, 1)
    stored = _props(msg)
    assert stored["REAL_TOPIC"] == "Orders" and stored["REAL_QID"] == "2" and stored["DELAY"] == "2"
    assert stored["TAGS"] == "TagA" and stored == props


def test_level_above_maximum_is_clamped():
    msg = make_msg(1, topic="Orders", extra={"DELAY": "99"})
    assert to_schedule_topic(msg, _props(msg), max_level=18)
    assert msg.queue_id == 17 and _props(msg)["DELAY"] == "18"


def test_no_delay_zero_negative_and_transaction_halves_stay_put():
    for extra, sys_flag in (({}, 0), ({"DELAY": "0"}, 0), ({"DELAY": "-1"}, 0), ({"DELAY": "3"}, 0x4),
                            ({"DELAY": "3"}, 0xC)):
        msg = make_msg(1, topic="Orders", extra=extra, sys_flag=sys_flag)
        before = msg.properties
        assert not to_schedule_topic(msg, _props(msg), max_level=18)
        assert msg.topic == "Orders" and msg.properties == before
    committed = make_msg(1, topic="Orders", extra={"DELAY": "1"}, sys_flag=0x8)
    assert to_schedule_topic(committed, _props(committed), max_level=18)


async def _put_delayed(store, i, level, topic="Orders", queue_id=1, reconsume=0):
    msg = make_msg(i, topic=topic, queue_id=queue_id, extra={"DELAY": str(level)})
    msg.reconsume_times = reconsume
    assert to_schedule_topic(msg, _props(msg), len(LEVELS_MS))
    result = await store.put_message(msg)
    assert result.ok
    return result


def _real(store, topic="Orders", queue_id=1):
    g = store.get_messages(topic, queue_id, 0, 100)
    return list(iter_records(g.body())) if g.status is GetStatus.FOUND else []


async def test_store_tags_code_is_deliver_time_and_restore_copies_fields(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock, message_delay_level="1s 5s 10s")
    put = await _put_delayed(store, 1, 2, reconsume=4)
    cq = store.get_consume_queue(SCHEDULE_TOPIC, 1)
    assert cq.get_unit(0)[2] == clock.now + 5000
    record = decode_record(store.look_message_by_offset(put.physical_offset))
    copy = restore_from_schedule(record)
    assert (copy.topic, copy.queue_id, copy.reconsume_times) == ("Orders", 1, 4)
    assert copy.born_host == BORN_HOST and copy.born_timestamp == record.born_timestamp
    props = decode_properties(copy.properties)
    assert "DELAY" not in props and props["REAL_TOPIC"] == "Orders" and props["TAGS"] == "TagA"
    assert copy.uniq_key == props["UNIQ_KEY"] and copy.body == b"body-1"
    store.close()


async def test_service_delivers_only_due_messages_in_order(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock, message_delay_level="1s 5s 10s")
    service = ScheduleMessageService(store, str(tmp_path / "config"), LEVELS_MS, clock_ms=clock)
    for i in range(3):
        await _put_delayed(store, i, 1)
    await _put_delayed(store, 10, 3)
    await _put_delayed(store, 20, 9)  # clamped to level 3
    delivered, next_due = await service.deliver_due()
    assert delivered == 0 and next_due == clock.now + 1000
    clock.now += 1000
    delivered, next_due = await service.deliver_due()
    assert delivered == 3 and next_due == clock.now + 1000  # nothing due before the idle bound (level 3 at +9 s)
    assert [r.body for r in _real(store)] == [b"body-0", b"body-1", b"body-2"]
    assert all(r.reconsume_times == 0 and "DELAY" not in r.properties for r in _real(store))
    clock.now += 9000
    delivered, _ = await service.deliver_due()
    assert delivered == 2 and service.offsets == {1: 3, 3: 2}
    assert json.loads(service.encode_json()) == {"offsetTable": {"1": 3, "3": 2}}
    store.close()


async def test_offsets_persist_and_reload(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock, message_delay_level="1s 5s 10s")
    config_dir = tmp_path / "config"
    service = ScheduleMessageService(store, str(config_dir), LEVELS_MS, clock_ms=clock)
    await _put_delayed(store, 1, 1)
    clock.now += 1000
    await service.deliver_due()
    service.persist()
    # fastjson-style bare keys are accepted on load
    (config_dir / "delayOffset.json").write_text('{"offsetTable":{1:1,2:0}}')
    again = ScheduleMessageService(store, str(config_dir), LEVELS_MS, clock_ms=clock)
    again.load()
    assert again.offsets == {1: 1, 2: 0}
    delivered, _ = await again.deliver_due()
    assert delivered == 0 and len(_real(store)) == 1
    store.close()


async def test_crash_after_delivery_before_persist_is_not_delivered_twice(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock, message_delay_level="1s 5s 10s")
    config_dir = str(tmp_path / "config")
    service = ScheduleMessageService(store, config_dir, LEVELS_MS, clock_ms=clock)
    for i in range(4):
        await _put_delayed(store, i, 1)
    # an identical-looking pair (same UNIQ_KEY, born time, reconsumeTimes): each needs its own copy
    await _put_delayed(store, 7, 1)
    await _put_delayed(store, 7, 1)
    clock.now += 1000
    service.persist()  # offsets {} on disk
    delivered, _ = await service.deliver_due()
    assert delivered == 6
    # "crash" before the progress was written: a fresh service loads the stale (empty) file
    fresh = ScheduleMessageService(store, config_dir, LEVELS_MS, clock_ms=clock)
    fresh.load()
    assert fresh.offsets == {1: 6} and fresh.deduplicated == 6
    assert (await fresh.deliver_due())[0] == 0
    assert len(_real(store)) == 6
    store.close()


async def test_dedup_stops_at_first_record_without_copy(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    store = open_store(tmp_path, clock=clock, message_delay_level="1s 5s 10s")
    config_dir = str(tmp_path / "config")
    service = ScheduleMessageService(store, config_dir, LEVELS_MS, clock_ms=clock)
    await _put_delayed(store, 1, 1)
    await _put_delayed(store, 2, 1)
    clock.now += 1000
    await service.deliver_due()  # both delivered
    await _put_delayed(store, 7, 1)
    await _put_delayed(store, 7, 1)
    clock.now += 1000
    service.offsets = {1: 2}
    assert (await service.deliver_due())[0] == 2  # the pair
    # Stale file at offset 1: record 1 (body-2) has a copy, the pair too -> all skipped
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "delayOffset.json").write_text('{"offsetTable":{"1":1}}')
    fresh = ScheduleMessageService(store, config_dir, LEVELS_MS, clock_ms=clock)
    fresh.load()
    assert fresh.offsets == {1: 4}
    # a new, undelivered record is not skipped
    await _put_delayed(store, 9, 1)
    clock.now += 1000
    (tmp_path / "config" / "delayOffset.json").write_text('{"offsetTable":{"1":4}}')
    fresh = ScheduleMessageService(store, config_dir, LEVELS_MS, clock_ms=clock)
    fresh.load()
    assert fresh.offsets == {1: 4}
    assert (await fresh.deliver_due())[0] == 1
    store.close()


async def test_start_stop_delivers_in_background_and_persists(tmp_path):
    store = open_store(tmp_path, message_delay_level="1s 5s 10s")
    await store.start()
    config_dir = tmp_path / "config"
    service = ScheduleMessageService(store, str(config_dir), [50, 100, 150])
    service.load()
    await service.start()
    store.delay_levels_ms = [50, 100, 150]
    await _put_delayed(store, 1, 1)
    await _put_delayed(store, 2, 2)
    for _ in range(100):
        if len(_real(store)) == 2:
            break
        await asyncio.sleep(0.02)
    assert [r.body for r in _real(store)] == [b"body-1", b"body-2"]
    await service.stop()
    assert json.loads((config_dir / "delayOffset.json").read_text())["offsetTable"] == {"1": 1, "2": 1}
    await store.shutdown()
