"""Shared fixtures: run the real broker (``python -m broker -c <conf>``) as a subprocess."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BOOT_TIMEOUT_S = 20.0
BOOT_MARKER = "boot success."


def free_port() -> int:
    """An ephemeral TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_listen_port() -> int:
    """A free port whose companions the broker also opens (VIP: port - 2, HA: port + 1) are free as well."""
    for _ in range(100):
        port = free_port()
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as vip, \
                    socket.socket(socket.AF_INET, socket.SOCK_STREAM) as ha:
                vip.bind(("127.0.0.1", port - 2))
                ha.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    raise RuntimeError("no free ports (p - 2, p, p + 1) on 127.0.0.1")


class BrokerProcess:
    """A broker subprocess with its own broker.conf and store directory."""

    def __init__(self, workdir: Path, name: str = "broker-a", *, embedded_namesrv: bool = True,
                 namesrv_addr: str | None = None, extra: dict[str, object] | None = None) -> None:
        self.workdir = workdir
        self.name = name
        self.port = free_listen_port()
        self.namesrv_port = free_port() if embedded_namesrv else None
        self.store_dir = workdir / f"store-{name}"
        self.conf_path = workdir / f"{name}.conf"
        settings: dict[str, object] = {
            "brokerClusterName": "DefaultCluster",
            "brokerName": name,
            "brokerIP1": "127.0.0.1",
            "listenPort": self.port,
            "storePathRootDir": self.store_dir,
            "mappedFileSizeCommitLog": 4 * 1024 * 1024,
            "mappedFileSizeConsumeQueue": 20 * 20_000,
            "enableEmbeddedNamesrv": "true" if embedded_namesrv else "false",
            "flushConsumerOffsetInterval": 1000,
            # small index files (4 MB instead of RocketMQ's 420 MB, pre-allocated per broker)
            "maxHashSlotNum": 50_000,
            "maxIndexNum": 200_000,
            "dashboardPort": 0,  # the web console only where a test asks for it (its default port is shared)
            "enableGrpcProxy": "false",  # the same for the gRPC endpoint
        }
        if self.namesrv_port:
            settings["namesrvListenPort"] = self.namesrv_port
        if namesrv_addr:
            settings["namesrvAddr"] = namesrv_addr
        settings.update(extra or {})
        self.conf_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []
        self._booted = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def namesrv_addr(self) -> str:
        assert self.namesrv_port, "this broker runs without an embedded name server"
        return f"127.0.0.1:{self.namesrv_port}"

    def start(self, timeout: float = BOOT_TIMEOUT_S) -> "BrokerProcess":
        self._booted.clear()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "-c", str(self.conf_path), "-l", "WARNING"],
            cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1,
        )
        self._reader = threading.Thread(target=self._drain, args=(self.proc,), daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._booted.wait(0.05):
                return self
            if self.proc.poll() is not None:
                break
        self.kill()
        raise RuntimeError(f"broker {self.name} did not boot:\n" + "".join(self.output[-60:]))

    def _drain(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.output.append(line)
            if BOOT_MARKER in line and "The broker[" in line:
                self._booted.set()

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (graceful shutdown), then SIGKILL if it hangs."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else None
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(5)
        finally:
            if self._reader is not None:
                self._reader.join(2)

    def kill(self) -> None:
        """kill -9: no shutdown code runs."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if self._reader is not None:
            self._reader.join(2)

    def log_text(self) -> str:
        return "".join(self.output)

    def wait_for_log(self, text: str, timeout: float = 5.0) -> str:
        """The log once it contains text (the reader thread copies the broker's output with a small lag)."""
        deadline = time.monotonic() + timeout
        while text not in (log := self.log_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return log


@pytest.fixture
def broker_factory(tmp_path):
    """Start brokers on demand; all are stopped at the end of the test."""
    started: list[BrokerProcess] = []

    def make(name: str = "broker-a", *, start: bool = True, **kwargs) -> BrokerProcess:
        broker = BrokerProcess(tmp_path, name, **kwargs)
        started.append(broker)
        return broker.start() if start else broker

    yield make
    for broker in started:
        broker.stop()


@pytest.fixture
def grpc_broker_factory(broker_factory):
    """`make(**extra)`: a started broker with its gRPC endpoint for 5.x SDKs on a free port (`grpc_port`, and
    `endpoints` as SDKs take it); `extra` are more broker.conf keys."""

    def make(**extra: object) -> BrokerProcess:
        port = free_port()
        broker = broker_factory(extra={"enableGrpcProxy": "true", "grpcServerPort": port, **extra})
        broker.grpc_port = port
        broker.endpoints = f"127.0.0.1:{port}"
        return broker

    return make


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for a whole test module (tests use distinct topics/groups)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("shared"), "broker-shared").start()
    yield broker
    broker.stop()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()
