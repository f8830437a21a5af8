"""RateLimitedLog: first line at once, then one line per interval per key that counts what was swallowed."""

from __future__ import annotations

import logging

import pytest

from broker import log_limit
from broker.log_limit import RateLimitedLog


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(log_limit.time, "monotonic", c)
    return c


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.ratelimit"]


def test_first_logged_rest_counted_per_interval(clock: _Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    rl = RateLimitedLog(logging.getLogger("test.ratelimit"), interval_s=10.0)
    assert rl.warning("bad", "bad header from %s", "a")
    for _ in range(999):
        assert not rl.warning("bad", "bad header from %s", "a")
    assert _lines(caplog) == ["bad header from a"]
    clock.now += 10.0
    assert rl.warning("bad", "bad header from %s", "b")
    assert _lines(caplog)[-1] == "bad header from b (999 similar messages suppressed in the last 10 s)"
    assert rl.suppressed_total == 999


def test_keys_are_independent_and_levels_kept(clock: _Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    rl = RateLimitedLog(logging.getLogger("test.ratelimit"), interval_s=10.0)
    rl.warning("a", "A")
    rl.error("b", "B")
    rl.error("b", "B")
    recs = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "test.ratelimit"]
    assert recs == [(logging.WARNING, "A"), (logging.ERROR, "B")]


def test_flush_reports_pending_counts(clock: _Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    rl = RateLimitedLog(logging.getLogger("test.ratelimit"), interval_s=10.0)
    rl.warning("k", "disk full on %s", "q1")
    rl.warning("k", "disk full on %s", "q2")
    rl.warning("k", "disk full on %s", "q3")
    assert rl.flush() == 1
    assert _lines(caplog)[-1] == "disk full on q3 (2 similar messages suppressed)"
    assert rl.flush() == 0


def test_key_table_is_bounded(clock: _Clock, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_limit, "MAX_KEYS", 16)
    rl = RateLimitedLog(logging.getLogger("test.ratelimit"), interval_s=10.0)
    for i in range(1000):
        rl.warning(("peer", i), "bad frame from %d", i)
    assert len(rl._keys) <= 16


def test_exc_info_reaches_the_logger(clock: _Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    rl = RateLimitedLog(logging.getLogger("test.ratelimit"), interval_s=10.0)
    try:
        raise KeyError("boom")
    except KeyError as exc:
        rl.error("k", "failed: %s", exc, exc_info=exc)
    (rec,) = [r for r in caplog.records if r.name == "test.ratelimit"]
    assert rec.exc_info is not None and rec.exc_info[0] is KeyError
