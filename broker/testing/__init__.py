"""A real broker for application tests: ``RocketMQBroker``, a broker process on free loopback ports with a
temporary store, started and stopped around the code that uses it.

Outside pytest::

    async with RocketMQBroker() as broker:
        producer = Producer("my-group", broker.namesrv_addr)   # remoting clients
        ...                                                     # 5.x SDKs: broker.grpc_endpoint

(``with RocketMQBroker() as broker:`` works too.) Under pytest the plugin in ``broker.testing.pytest_plugin``
(registered through the ``pytest11`` entry point when this package is installed) gives the same object as the
fixtures ``rocketmq_broker`` (one broker for the session) and ``rocketmq_broker_function`` (a fresh broker, with an
empty store, per test).

The broker is the real one (``python -m broker``), with an embedded name server, auto-created topics and groups,
small store files, no web console and no metrics port. Ports are drawn below the kernel's ephemeral range, so an
outgoing connection cannot take one between its choice and the bind; a port taken anyway makes the start retry on
other ports. Importing this module imports nothing but the standard library.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from broker.testing.process import ServerProcess, ServerStartError

__all__ = ["RocketMQBroker", "BrokerStartError", "free_port"]

BOOT_MARKER = "boot success."
EXIT_CONFIG_ERROR = 2  # mqbroker's exit code for a configuration problem (a port in use among them)
_PORT_LOW, _PORT_HIGH = 20000, 32000  # below Linux's ephemeral range 32768-60999
_handed_out: set[int] = set()
_random = random.Random(os.getpid() ^ time.monotonic_ns())
_lock = threading.Lock()

# Small files (the reference sizes pre-allocate over 1 GB per broker) and nothing listening beyond what tests use.
DEFAULT_CONF: dict[str, object] = {
    "brokerClusterName": "DefaultCluster",
    "brokerIP1": "127.0.0.1",
    "listenHost": "127.0.0.1",
    "enableEmbeddedNamesrv": "true",
    "autoCreateTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
    "mappedFileSizeCommitLog": 16 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 20_000,
    "maxHashSlotNum": 50_000,
    "maxIndexNum": 200_000,
    "flushConsumerOffsetInterval": 1000,
    "enableVipChannel": "false",
    "dashboardPort": 0,
    "metricsPort": 0,
}


def _checkout_root() -> str | None:
    """The folder holding this ``broker`` package when it is a source checkout (not an installed site-packages
    copy, which the child finds by itself)."""
    root = str(Path(__file__).resolve().parents[2])
    installed = {str(Path(p).resolve()) for p in site.getsitepackages() + [site.getusersitepackages()]}
    return None if root in installed else root


_CHECKOUT = _checkout_root()


BrokerStartError = ServerStartError  # the broker did not boot; the message ends with the last lines it printed


def _bindable(port: int) -> bool:
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                return False
    return True


def free_port() -> int:
    """A TCP port between 20000 and 32000 that was free on 127.0.0.1 and 0.0.0.0 a moment ago; never the same one
    twice in this process."""
    with _lock:
        for _ in range(2000):
            port = _random.randrange(_PORT_LOW, _PORT_HIGH)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
    raise BrokerStartError(f"no free TCP port between {_PORT_LOW} and {_PORT_HIGH}")


class RocketMQBroker:
    """One broker process for tests.

    ``conf``: more broker.conf keys (they win over the defaults, e.g. ``{"aclEnable": "true"}``);
    ``workdir``: where broker.conf and the store go (default: a temporary directory removed on stop);
    ``grpc``: open the gRPC endpoint of the 5.x SDKs (``grpc_endpoint``).

    After ``start()``: ``namesrv_addr`` (clients' name server), ``broker_addr`` (remoting endpoint),
    ``grpc_endpoint`` (``host:port`` for 5.x SDKs, None without gRPC), ``store_dir``, ``conf_path``, ``pid``.
    """

    def __init__(self, conf: Mapping[str, Any] | None = None, *, workdir: str | os.PathLike | None = None,
                 name: str = "test-broker", grpc: bool = True, boot_timeout: float = 60.0,
                 stop_timeout: float = 15.0, attempts: int = 3) -> None:
        self.conf = dict(conf or {})
        self.name = name
        self.grpc = grpc
        self.boot_timeout = boot_timeout
        self.stop_timeout = stop_timeout
        self.attempts = attempts
        self._own_workdir = workdir is None
        self._workdir_arg = Path(workdir) if workdir is not None else None
        self.workdir: Path | None = None
        self.port = self.namesrv_port = self.ha_port = 0
        self.grpc_port: int | None = None
        self._server: ServerProcess | None = None

    # ---- endpoints ------------------------------------------------------------------------------
    @property
    def namesrv_addr(self) -> str:
        """``127.0.0.1:<port>`` of the embedded name server (what clients are given)."""
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        """``127.0.0.1:<port>`` of the broker's remoting endpoint."""
        return f"127.0.0.1:{self.port}"

    @property
    def grpc_endpoint(self) -> str | None:
        """``127.0.0.1:<port>`` of the gRPC endpoint (RocketMQ 5.x SDKs), None when started without it."""
        return f"127.0.0.1:{self.grpc_port}" if self.grpc_port else None

    @property
    def store_dir(self) -> Path:
        assert self.workdir is not None, "not started"
        return self.workdir / "store"

    @property
    def conf_path(self) -> Path:
        assert self.workdir is not None, "not started"
        return self.workdir / "broker.conf"

    @property
    def proc(self) -> subprocess.Popen | None:
        return self._server.proc if self._server is not None else None

    @property
    def pid(self) -> int | None:
        return self._server.pid if self._server is not None else None

    def log_text(self) -> str:
        """The last lines the broker printed (its log goes to the same place)."""
        return self._server.log_text() if self._server is not None else ""

    # ---- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "RocketMQBroker":
        """Start the broker and wait until it serves; retried on other ports if one was taken meanwhile."""
        if self._server is not None and self._server.running:
            return self
        if self.workdir is None:
            if self._workdir_arg is not None:
                self._workdir_arg.mkdir(parents=True, exist_ok=True)
                self.workdir = self._workdir_arg
            else:
                self.workdir = Path(tempfile.mkdtemp(prefix="rocketmq-broker-"))
        for attempt in range(1, self.attempts + 1):
            self._write_conf()
            try:
                self._launch()
                return self
            except BrokerStartError:
                busy = self.proc is not None and self.proc.returncode == EXIT_CONFIG_ERROR \
                    and "already in use" in self.log_text()
                if not busy or attempt == self.attempts:
                    self._cleanup()
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> int | None:
        """SIGTERM (a graceful shutdown), SIGKILL if it hangs; then the temporary directory is removed."""
        code = self._server.stop(self.stop_timeout) if self._server is not None else None
        self._cleanup()
        return code

    def __enter__(self) -> "RocketMQBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> "RocketMQBroker":
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    # ---- internals ------------------------------------------------------------------------------
    def _write_conf(self) -> None:
        assert self.workdir is not None
        self.port, self.namesrv_port, self.ha_port = free_port(), free_port(), free_port()
        self.grpc_port = free_port() if self.grpc else None
        settings: dict[str, object] = dict(DEFAULT_CONF, brokerName=self.name, listenPort=self.port,
                                           namesrvListenPort=self.namesrv_port, haListenPort=self.ha_port,
                                           storePathRootDir=self.store_dir)
        if self.grpc_port:
            settings.update(enableGrpcProxy="true", grpcServerPort=self.grpc_port)
        else:
            settings["enableGrpcProxy"] = "false"
        settings.update(self.conf)
        self.port = int(settings["listenPort"])  # a caller's own ports win
        self.namesrv_port = int(settings["namesrvListenPort"])
        if settings.get("enableGrpcProxy") == "true" and settings.get("grpcServerPort"):
            self.grpc_port = int(settings["grpcServerPort"])  # type: ignore[arg-type]
        self.conf_path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()), encoding="utf-8")

    def _launch(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if _CHECKOUT is not None:  # run the broker of this very checkout, whatever the working directory
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [_CHECKOUT, env.get("PYTHONPATH")]))
        self._server = ServerProcess([sys.executable, "-m", "broker", "-c", str(self.conf_path), "-l", "WARNING"],
                                     ready=(BOOT_MARKER, "The broker["), name=f"broker {self.name}",
                                     cwd=str(self.workdir), env=env, keep_lines=500)
        self._server.start(self.boot_timeout)

    def _cleanup(self) -> None:
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __repr__(self) -> str:
        return (f"RocketMQBroker(namesrv={self.namesrv_addr}, broker={self.broker_addr}, "
                f"grpc={self.grpc_endpoint}, pid={self.pid})")
