"""The broker under test as a child process: free ports, a generated broker.conf, boot wait, bounded stop."""

from __future__ import annotations

import os
import queue
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOOT_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def free_port() -> int:
    """An ephemeral port the OS just handed out on 127.0.0.1 (bind port 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_broker_conf(path: str, store_dir: str, listen_port: int, namesrv_port: int, commit_log_size: int) -> None:
    lines = [
        "brokerClusterName=BenchCluster",
        "brokerName=bench-broker",
        "brokerId=0",
        "brokerRole=ASYNC_MASTER",
        "brokerIP1=127.0.0.1",
        "listenHost=127.0.0.1",
        f"listenPort={listen_port}",
        "enableEmbeddedNamesrv=true",
        f"namesrvListenPort={namesrv_port}",
        f"storePathRootDir={store_dir}",
        f"mappedFileSizeCommitLog={commit_log_size}",
        "flushDiskType=ASYNC_FLUSH",
        "autoCreateTopicEnable=true",
        "autoCreateSubscriptionGroup=true",
        "defaultTopicQueueNums=4",
        "enablePropertyFilter=true",
        "dashboardPort=0",
        "enableGrpcProxy=false",
    ]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


class BrokerProcess:
    """The broker as a child process; output is drained by a thread so the pipe never blocks it."""

    def __init__(self, conf_path: str, log_path: str, wrapper: str | None = None,
                 entry: list[str] | None = None) -> None:
        self.conf_path = conf_path
        self.log_path = log_path
        self.wrapper = shlex.split(wrapper) if wrapper else []
        self.entry = entry or ["-m", "broker"]  # what the interpreter runs: the broker, or a script wrapping it
        self.proc: subprocess.Popen | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._log = None

    def start(self, timeout: float = BOOT_TIMEOUT_S) -> str:
        cmd = self.wrapper + [sys.executable, *self.entry, "-c", self.conf_path, "-l", "WARNING"]
        self._log = open(self.log_path, "a", encoding="utf-8")
        self._lines = queue.Queue()  # a restart must not see the previous process's end-of-output marker
        self.proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            env={**os.environ, "PYTHONPATH": REPO_ROOT},
        )
        threading.Thread(target=self._drain, args=(self.proc, self._lines, self._log), daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"broker did not print its boot line within {timeout:.0f}s (log: {self.log_path})")
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"broker exited with {self.proc.wait()} before booting (log: {self.log_path})")
            if "boot success" in line:
                return line.strip()

    @staticmethod
    def _drain(proc: subprocess.Popen, lines: queue.Queue, log_file) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            log_file.write(line)
            log_file.flush()
            lines.put(line)
        lines.put(None)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait bounded, then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def prepare_broker(workdir: str, commit_log_size: int, wrapper: str | None,
                   entry: list[str] | None = None) -> tuple[BrokerProcess, int]:
    """Write workdir/broker.conf (store in workdir/store, two distinct free ports) and return the not yet started
    broker (logging to workdir/broker.log) with its embedded name server's port."""
    conf_path = os.path.join(workdir, "broker.conf")
    listen_port, namesrv_port = free_port(), free_port()
    while namesrv_port == listen_port:
        namesrv_port = free_port()
    write_broker_conf(conf_path, os.path.join(workdir, "store"), listen_port, namesrv_port, commit_log_size)
    return BrokerProcess(conf_path, os.path.join(workdir, "broker.log"), wrapper, entry), namesrv_port
