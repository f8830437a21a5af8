"""Where the two sides of a one-in-flight benchmark run: pinning a server and this process to chosen CPUs.

On a small VM a client and a server that answer one message at a time either share one vCPU (they take turns; a
hand-over costs a few µs) or sit on two (every hand-over wakes a sleeping vCPU: tens of µs). The scheduler picks one
and tends to keep it, so unpinned single-send figures jump between two levels from run to run. Pinning both sides
to one CPU gives the comparison a fixed placement (see bench/latency_floor.py).
"""

from __future__ import annotations

import os

ALL_CPUS: set[int] = os.sched_getaffinity(0)


def one_cpu() -> set[int]:
    """The first CPU this process may run on."""
    return {min(ALL_CPUS)}


class Pinned:
    """Pin a server's main thread (its event loop) and this process's thread for one measurement; restored after."""

    def __init__(self, server_pid: int, server_cpus: set[int] | None, client_cpus: set[int] | None) -> None:
        self.server_pid = server_pid
        self.server_cpus = server_cpus
        self.client_cpus = client_cpus
        self._server_before: set[int] | None = None

    def __enter__(self) -> "Pinned":
        if self.server_cpus:
            self._server_before = os.sched_getaffinity(self.server_pid)
            os.sched_setaffinity(self.server_pid, self.server_cpus)
        if self.client_cpus:
            os.sched_setaffinity(0, self.client_cpus)
        return self

    def __exit__(self, *exc: object) -> None:
        os.sched_setaffinity(0, ALL_CPUS)
        if self._server_before is not None:
            try:
                os.sched_setaffinity(self.server_pid, self._server_before)
            except ProcessLookupError:
                pass
