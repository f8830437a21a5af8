"""Peer servers for bench/peers.py: Redis, NATS (JetStream) and RabbitMQ from Debian's packages, each started on
free 127.0.0.1 ports with its data in a temporary directory, and stopped (bounded) at the end.

Install them with `apt-get install redis-server nats-server rabbitmq-server`; a peer whose server binary is not
installed is skipped with a note. Persistence is set to what the broker's bench run does (ASYNC_FLUSH: durable on
disk, flushed in the background): Redis appendonly with appendfsync everysec, JetStream file storage, RabbitMQ
durable queues with persistent messages.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

from tests.support.broker_process import free_port

START_TIMEOUT_S = 90.0  # RabbitMQ's Erlang VM takes several seconds to boot
STOP_TIMEOUT_S = 20.0


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float, what: str) -> None:
    """Until 127.0.0.1:port accepts a connection (bounded); fails early if proc has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on port {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f}s")


class PeerServer:
    """One server process in its own session (so its children stop with it); output goes to workdir/<name>.log."""

    binary = ""
    name = ""

    def __init__(self, workdir: str) -> None:
        self.workdir = os.path.join(workdir, self.name)
        os.makedirs(self.workdir, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._log = None

    @classmethod
    def installed(cls) -> bool:
        return shutil.which(cls.binary) is not None or os.path.exists(cls.binary)

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def start(self) -> PeerServer:
        self._log = open(os.path.join(self.workdir, f"{self.name}.log"), "w", encoding="utf-8")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(self.command(), cwd=self.workdir, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=self.environment(), start_new_session=True)
        wait_for_port(self.port, self.proc, START_TIMEOUT_S, self.name)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()


class RedisServer(PeerServer):
    binary = "redis-server"
    name = "redis"

    def command(self) -> list[str]:
        return [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.workdir,
                "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--daemonize", "no",
                "--protected-mode", "yes"]


class NatsServer(PeerServer):
    binary = "nats-server"
    name = "nats"

    def command(self) -> list[str]:
        return [self.binary, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", os.path.join(self.workdir, "js")]


class RabbitMQServer(PeerServer):
    """rabbitmq-server as a foreground node with its own name, ports, Erlang cookie (HOME) and epmd port."""

    binary = "/usr/lib/rabbitmq/bin/rabbitmq-server"
    name = "rabbitmq"

    def __init__(self, workdir: str) -> None:
        super().__init__(workdir)
        self.dist_port = free_port()
        self.epmd_port = free_port()
        with open(os.path.join(self.workdir, "enabled_plugins"), "w", encoding="utf-8") as f:
            f.write("[].\n")

    def command(self) -> list[str]:
        return [self.binary]

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": self.workdir,
            "RABBITMQ_NODENAME": f"bench{os.getpid()}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": os.path.join(self.workdir, "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(self.workdir, "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(self.workdir, "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": os.path.join(self.workdir, "rabbitmq"),
            "RABBITMQ_PID_FILE": os.path.join(self.workdir, "rabbitmq.pid"),
        }

    def stop(self) -> None:
        super().stop()
        epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        if os.path.exists(epmd):  # epmd daemonizes out of the node's session
            subprocess.run([epmd, "-port", str(self.epmd_port), "-kill"], check=False, capture_output=True,
                           timeout=10, env={**os.environ, "ERL_EPMD_PORT": str(self.epmd_port)})


PEERS = {"redis": RedisServer, "nats": NatsServer, "rabbitmq": RabbitMQServer}
