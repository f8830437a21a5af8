"""Issue 11: a truncated or wrong-sized store file, or a bad checkpoint, gives a one-line error naming the file and
what to do (non-zero exit, no traceback), or is recovered safely."""

from __future__ import annotations

import os

from tests.support.recovery import expected, fill, pull_all, run_refused

MB = 1024 * 1024
EXIT_STORE_FILE_ERROR = 4


def _error_line(output: str) -> str:
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.startswith("mqbroker: ")]
    assert len(lines) == 1, output
    return lines[0]


async def _filled(broker_factory, name, count=3000):
    broker = broker_factory(name, extra={"mappedFileSizeCommitLog": MB})
    await fill(broker.addr, "FileTopic", 0, count, size=600, batch=100)
    assert broker.stop() == 0
    return broker


async def test_cut_middle_commit_log_file_is_a_one_line_error(broker_factory):
    broker = await _filled(broker_factory, "cutmid")
    names = sorted(os.listdir(broker.store_dir / "commitlog"))
    victim = broker.store_dir / "commitlog" / names[1]
    os.truncate(victim, 1234)
    code, output = run_refused(broker)
    assert code == EXIT_STORE_FILE_ERROR
    line = _error_line(output)
    assert f"commit log file {victim} is 1234 bytes, expected {MB} (mappedFileSizeCommitLog)" in line
    assert "backup" in line


async def test_changed_mapped_file_size_is_a_one_line_error_naming_the_size(broker_factory):
    await _filled(broker_factory, "resized")
    changed = broker_factory("resized", start=False, extra={"mappedFileSizeCommitLog": 2 * MB})
    code, output = run_refused(changed)
    assert code == EXIT_STORE_FILE_ERROR
    assert f"set mappedFileSizeCommitLog={MB}" in _error_line(output)
    same = broker_factory("resized", extra={"mappedFileSizeCommitLog": MB})  # the refused start changed nothing
    assert await pull_all(same.addr, "FileTopic", 0) == expected("FileTopic", 0, 3000, size=600)


async def test_cut_last_commit_log_file_is_recovered(broker_factory):
    broker = await _filled(broker_factory, "cutlast")
    names = sorted(os.listdir(broker.store_dir / "commitlog"))
    last = broker.store_dir / "commitlog" / names[-1]
    os.truncate(last, 1000)
    broker.start()
    got = await pull_all(broker.addr, "FileTopic", 0)
    lost = set(range(3000)) - set(got)
    assert got == expected("FileTopic", 0, 3000, size=600, skip=lost)
    assert lost and min(lost) > 2000 and os.path.getsize(last) == MB
    assert "cut short" in broker.log_text() and "Traceback" not in broker.log_text()
    placed = await fill(broker.addr, "FileTopic", 0, 1, size=600, start=3000)
    assert placed[0][0] == 3000


async def test_garbage_checkpoint_is_ignored_and_the_log_verified(broker_factory):
    broker = await _filled(broker_factory, "garbage", count=500)
    (broker.store_dir / "checkpoint").write_bytes(b"\xfe" * 4096)
    broker.start()
    assert await pull_all(broker.addr, "FileTopic", 0) == expected("FileTopic", 0, 500, size=600)
    assert "implausible" in broker.log_text() and "Traceback" not in broker.log_text()


async def test_unreadable_checkpoint_is_a_one_line_error(broker_factory):
    broker = await _filled(broker_factory, "cpdir", count=100)
    checkpoint = broker.store_dir / "checkpoint"
    os.unlink(checkpoint)
    os.mkdir(checkpoint)
    code, output = run_refused(broker)
    assert code == EXIT_STORE_FILE_ERROR
    assert f"cannot read the checkpoint file {checkpoint}" in _error_line(output)


async def test_stray_file_in_commitlog_is_reported_and_skipped(broker_factory):
    broker = await _filled(broker_factory, "stray", count=200)
    (broker.store_dir / "commitlog" / "notes.txt").write_text("hello")
    broker.start()
    assert await pull_all(broker.addr, "FileTopic", 0) == expected("FileTopic", 0, 200, size=600)
    assert "notes.txt: not a store file name" in broker.log_text()
