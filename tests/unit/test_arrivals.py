"""The one new-message notification (broker/core/arrivals.py): held pulls and POP-style watches woken by the same
arrival, per queue and per topic, with filters, timeouts, cancellation and shutdown; fed once per put by a real
store."""

from __future__ import annotations

import asyncio

from broker.core.arrivals import ANY_QUEUE, WAKE_ARRIVAL, WAKE_SHUTDOWN, WAKE_TIMEOUT, Arrivals
from tests.support.store import make_msg, open_store


async def test_one_arrival_wakes_a_held_pull_and_a_watch_of_its_topic_only() -> None:
    arrivals = Arrivals()
    woken: list[tuple[str, str]] = []
    arrivals.hold([("T", 0)], 5.0, lambda reason: woken.append(("pull-T0", reason)))
    arrivals.hold([("T", 1)], 5.0, lambda reason: woken.append(("pull-T1", reason)))
    arrivals.hold([("U", 0)], 5.0, lambda reason: woken.append(("pull-U0", reason)))
    assert arrivals.held_count == 3
    with arrivals.watch([("T", ANY_QUEUE), ("%RETRY%g_T", ANY_QUEUE)]) as watch:
        assert arrivals.watch_count == 1
        waiting = asyncio.ensure_future(watch.wait(5.0))
        await asyncio.sleep(0)
        arrivals.notify("T", 0, 3, [1, 2])
        assert woken == [("pull-T0", WAKE_ARRIVAL)]
        assert await asyncio.wait_for(waiting, 1.0) == WAKE_ARRIVAL
        assert arrivals.held_count == 2  # the held pull is gone once woken; the watch stays until closed
        assert arrivals.watch_count == 1
        watch.clear()
        arrivals.notify("%RETRY%g_T", 0, 1, 0)  # the retry topic is watched too
        assert await watch.wait(1.0) == WAKE_ARRIVAL
    assert arrivals.watch_count == 0
    assert woken == [("pull-T0", WAKE_ARRIVAL)]


async def test_a_filter_decides_and_a_woken_waiter_is_woken_once() -> None:
    arrivals = Arrivals()
    woken: list[str] = []
    arrivals.hold([("T", 0)], 5.0, woken.append, matches=lambda max_offset, tags: max_offset > 10)
    arrivals.notify("T", 0, 5, 0)
    assert woken == []
    arrivals.notify("T", 0, 11, 0)
    arrivals.notify("T", 0, 12, 0)
    assert woken == [WAKE_ARRIVAL]
    assert arrivals.held_count == 0


async def test_timeouts_of_holds_and_watches() -> None:
    arrivals = Arrivals()
    woken: list[str] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    arrivals.hold([("T", 0)], 0.05, woken.append)
    with arrivals.watch([("T", ANY_QUEUE)]) as watch:
        assert await watch.wait(0.1) == WAKE_TIMEOUT
    assert woken == [WAKE_TIMEOUT]
    assert 0.09 <= loop.time() - started < 1.0
    assert arrivals.held_count == 0
    arrivals.notify("T", 0, 100, None)  # nothing left to wake
    assert woken == [WAKE_TIMEOUT]


async def test_cancel_forgets_and_shutdown_releases_everyone() -> None:
    arrivals = Arrivals()
    woken: list[tuple[str, str]] = []
    gone = arrivals.hold([("T", 0)], 5.0, lambda reason: woken.append(("gone", reason)))
    arrivals.hold([("T", 0)], 5.0, lambda reason: woken.append(("held", reason)))
    arrivals.cancel(gone)
    with arrivals.watch([("T", ANY_QUEUE)]) as watch:
        waiting = asyncio.ensure_future(watch.wait(5.0))
        await asyncio.sleep(0)
        arrivals.release_all()
        assert await asyncio.wait_for(waiting, 1.0) == WAKE_SHUTDOWN
        watch.clear()  # a shutdown is never forgotten
        assert await watch.wait(5.0) == WAKE_SHUTDOWN
    assert woken == [("held", WAKE_SHUTDOWN)]
    arrivals.hold([("T", 0)], 5.0, lambda reason: woken.append(("late", reason)))  # after shutdown: at once
    assert woken[-1] == ("late", WAKE_SHUTDOWN) and arrivals.held_count == 0


async def test_poke_wakes_topic_watches_but_not_held_pulls() -> None:
    arrivals = Arrivals()
    woken: list[str] = []
    arrivals.hold([("T", 0)], 5.0, woken.append)
    with arrivals.watch([("T", ANY_QUEUE)]) as watch:
        arrivals.poke("T")
        assert await watch.wait(1.0) == WAKE_ARRIVAL
    assert woken == []


async def test_the_store_notifies_once_per_batch_and_wakes_both_kinds(tmp_path) -> None:
    store = open_store(tmp_path)
    arrivals = Arrivals()
    calls: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda topic, queue_id, max_offset, tags: calls.append((topic, queue_id, max_offset)))
    store.add_arrival_listener(arrivals.notify)
    woken: list[str] = []
    try:
        arrivals.hold([("TopicTest", 0)], 5.0, woken.append, matches=lambda max_offset, tags: max_offset > 0)
        with arrivals.watch([("TopicTest", ANY_QUEUE)]) as watch:
            batch = [make_msg(i) for i in range(5)]
            result = await store.put_messages(batch)
            assert result.ok
            assert calls == [("TopicTest", 0, 5)]  # one notification for the batch of five
            assert woken == [WAKE_ARRIVAL]
            assert await watch.wait(1.0) == WAKE_ARRIVAL
    finally:
        await store.shutdown()
