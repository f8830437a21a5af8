"""Rounds of kill -9 under concurrent producer load lose, duplicate, corrupt and skip nothing (bench/soak.py, short)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.broker_process import PROJECT_ROOT


@pytest.mark.slow
def test_three_kill9_rounds_under_load_then_full_pull_back():
    proc = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "bench" / "soak.py"), "--rounds", "3", "--producers", "3",
         "--min-run", "0.5", "--max-run", "1.5", "--seed", "7"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "lost 0  duplicated 0  corrupted 0  skipped 0" in summary, summary
    acked = int(summary.split("acked ")[1].split()[0].replace(",", ""))
    assert acked > 1000, summary
