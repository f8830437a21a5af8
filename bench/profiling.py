"""Per-phase accounting: the CPU seconds both processes used, and the optional profiles (cProfile of the client,
py-spy attached to the broker)."""

from __future__ import annotations

import contextlib
import cProfile
import os
import signal
import subprocess
import sys
import time
from typing import Awaitable

from results import PhaseResult, row


def process_cpu_seconds(pid: int | None) -> float:
    """user+system CPU seconds of a process (all threads) from /proc; 0.0 when unavailable."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


class Profiling:
    """Optional per-phase profiles: cProfile of this (client) process, py-spy attached to the broker process."""

    def __init__(self, client_dir: str | None, broker_dir: str | None, broker_pid: int | None) -> None:
        self.client_dir = client_dir
        self.broker_dir = broker_dir
        self.broker_pid = broker_pid

    @contextlib.contextmanager
    def phase(self, name: str | None, results: list[PhaseResult] | None = None):
        """Profile one phase; when results is given, charge the CPU used meanwhile to the phase appended to it."""
        spy = None
        if name and self.broker_dir and self.broker_pid:
            os.makedirs(self.broker_dir, exist_ok=True)
            spy = subprocess.Popen(
                ["py-spy", "record", "--pid", str(self.broker_pid), "--rate", "250", "--format", "raw",
                 "-o", os.path.join(self.broker_dir, f"broker_{name}.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # let py-spy attach before the phase starts
        prof = None
        if name and self.client_dir:
            os.makedirs(self.client_dir, exist_ok=True)
            prof = cProfile.Profile()
            prof.enable()
        appended = len(results) if results is not None else 0
        client_cpu0, broker_cpu0 = time.process_time(), process_cpu_seconds(self.broker_pid)
        try:
            yield
        finally:
            client_cpu, broker_cpu = time.process_time() - client_cpu0, process_cpu_seconds(self.broker_pid) - broker_cpu0
            if results is not None and len(results) > appended:
                results[-1].client_cpu, results[-1].broker_cpu = client_cpu, broker_cpu
            if prof is not None:
                prof.disable()
                prof.dump_stats(os.path.join(self.client_dir, f"client_{name}.prof"))
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                try:
                    spy.wait(30)
                except subprocess.TimeoutExpired:
                    spy.kill()
                    spy.wait(5)

    async def run(self, name: str, results: list[PhaseResult], phase: Awaitable[PhaseResult]) -> None:
        """Await one phase under self.phase(name), append its result and print its row to stderr as progress."""
        with self.phase(name, results):
            results.append(await phase)
        print(row(results[-1]), file=sys.stderr, flush=True)
