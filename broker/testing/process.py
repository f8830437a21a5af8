"""One server subprocess — a broker, a name server, a controller — for tests and benchmarks: started, its output read
by a thread (so the pipe never blocks it) into ``output`` and copied to a log file when asked, ready once it prints
its boot line, stopped with SIGTERM and SIGKILL if it hangs. ``RocketMQBroker`` and the project's own test helpers
(tests/support) all launch through it. Standard library only."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import IO

__all__ = ["ServerProcess", "ServerStartError"]


class ServerStartError(RuntimeError):
    """The process did not boot (it exited, or printed no boot line in time); the message ends with the last lines
    it printed."""


class ServerProcess:
    """``argv`` run in ``cwd`` with ``env``; ready once a line contains every string of ``ready``. ``output`` keeps
    every line (the last ``keep_lines`` when given); ``log_path`` gets a copy. ``name`` names it in errors."""

    def __init__(self, argv: Sequence[str], *, ready: Sequence[str], name: str, cwd: str | os.PathLike,
                 env: dict[str, str] | None = None, log_path: str | os.PathLike | None = None,
                 keep_lines: int | None = None) -> None:
        self.argv = list(argv)
        self.ready = tuple(ready)
        self.name = name
        self.cwd = cwd
        self.env = env
        self.log_path = log_path
        self.output: list[str] | collections.deque[str] = \
            collections.deque(maxlen=keep_lines) if keep_lines else []
        self.ready_line = ""
        self.proc: subprocess.Popen | None = None
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return "".join(self.output)

    def wait_for_log(self, text: str, timeout: float = 5.0) -> str:
        """The output once it contains ``text`` (the reader thread copies it with a small lag), or as it is when
        ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while text not in (log := self.log_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return log

    def start(self, timeout: float) -> None:
        """Start and wait (bounded) for the boot line; a process that exits or hangs is killed and ServerStartError
        raised with the end of its output."""
        self.output.clear()
        self.ready_line = ""
        self._ready.clear()
        log_file = open(self.log_path, "a", encoding="utf-8") if self.log_path is not None else None
        self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self._reader = threading.Thread(target=self._drain, args=(self.proc, log_file), daemon=True,
                                        name=f"{self.name}-{self.proc.pid}-output")
        self._reader.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._ready.wait(0.05):
                return
            if self.proc.poll() is not None:
                self._reader.join(2)  # the last lines of a process that exited
                break
        code = self.proc.poll()
        self.kill()
        where = f" (log: {self.log_path})" if self.log_path is not None else ""
        state = f"exited with code {code}" if code is not None else f"printed no boot line within {timeout:g} s"
        raise ServerStartError(f"{self.name} did not boot: {state}{where}:\n" + "".join(list(self.output)[-60:]))

    def _drain(self, proc: subprocess.Popen, log_file: IO[str] | None) -> None:
        assert proc.stdout is not None
        ready, output = self.ready, self.output
        try:
            for line in proc.stdout:
                output.append(line)
                if log_file is not None:
                    log_file.write(line)
                    log_file.flush()
                if not self._ready.is_set() and all(marker in line for marker in ready):
                    self.ready_line = line.strip()
                    self._ready.set()
        except (OSError, ValueError):  # the pipe closed under us at stop
            pass
        finally:
            if log_file is not None:
                log_file.close()

    def stop(self, timeout: float) -> int | None:
        """SIGTERM (a graceful shutdown), SIGKILL if it has not exited within ``timeout`` s; its exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._join()
        return proc.returncode

    def kill(self) -> None:
        """kill -9: no shutdown code runs."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        self._join()

    def _join(self) -> None:
        if self._reader is not None:
            self._reader.join(2)
