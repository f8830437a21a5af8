"""The real broker as a child process (``python -m broker -c <conf>``) for the tests and the benchmarks.

Free loopback ports, a generated broker.conf, a bounded wait for the boot line, SIGTERM then SIGKILL on stop.
The tests build a small-file configuration with :class:`BrokerProcess`; the benchmarks write their own
configuration (:func:`prepare_broker`) and may log to a file, wrap the interpreter (a profiler) or run another
entry script.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

# the package's free_port (below the kernel's ephemeral range, never the same port twice in a process)
from broker.testing import free_port
from broker.testing.process import ServerProcess

PROJECT_ROOT = Path(__file__).resolve().parents[2]
REPO_ROOT = str(PROJECT_ROOT)  # the benchmarks' spelling (a str for os.path and sys.path)
BOOT_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
BENCH_BOOT_TIMEOUT_S = 60.0  # benchmark stores pre-allocate larger files
BENCH_STOP_TIMEOUT_S = 30.0
BOOT_MARKER = "boot success."
NAMESRV_BOOT_MARKER = "The Name Server boot success."


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


def _read_conf(path: Path) -> dict[str, str]:
    """key=value lines of a broker.conf (comments and blank lines skipped)."""
    settings: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings


class _ServerHelper:
    """What the broker and name-server helpers share: their process (broker.testing.process.ServerProcess, the
    launcher RocketMQBroker uses too), its Popen (``proc``), pid and output."""

    server: ServerProcess

    @property
    def proc(self) -> subprocess.Popen | None:
        return self.server.proc

    @property
    def pid(self) -> int | None:
        return self.server.pid

    @property
    def output(self) -> list[str]:
        return self.server.output  # type: ignore[return-value]

    def log_text(self) -> str:
        return self.server.log_text()

    def wait_for_log(self, text: str, timeout: float = 5.0) -> str:
        """The log once it contains text (the reader thread copies the process's output with a small lag)."""
        return self.server.wait_for_log(text, timeout)


class BrokerProcess(_ServerHelper):
    """A broker subprocess with its own broker.conf and store directory; its output is kept in memory (and copied
    to ``log_path`` when given) by a reader thread so the pipe never blocks it."""

    def __init__(self, workdir: Path, name: str = "broker-a", *, embedded_namesrv: bool = True,
                 namesrv_addr: str | None = None, extra: dict[str, object] | None = None,
                 log_path: str | os.PathLike | None = None, wrapper: str | None = None,
                 entry: list[str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.name = name
        self.port = free_listen_port()
        self.namesrv_port = free_port() if embedded_namesrv else None
        self.store_dir = self.workdir / f"store-{name}"
        self.conf_path = self.workdir / f"{name}.conf"
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
        self._init_process(log_path, wrapper, entry, BOOT_TIMEOUT_S, STOP_TIMEOUT_S)

    @classmethod
    def from_conf(cls, conf_path: str | os.PathLike, log_path: str | os.PathLike | None = None,
                  wrapper: str | None = None, entry: list[str] | None = None,
                  root: str | None = None) -> "BrokerProcess":
        """A broker whose broker.conf is already written (the benchmarks' own settings); ports, name and store
        directory are read back from it. root: the checkout whose broker runs (default this one), for a benchmark
        comparing an older version with this one."""
        self = cls.__new__(cls)
        self.conf_path = Path(conf_path)
        self.workdir = self.conf_path.parent
        conf = _read_conf(self.conf_path)
        self.name = conf.get("brokerName", "broker-a")
        self.port = int(conf.get("listenPort", "10911"))
        embedded = conf.get("enableEmbeddedNamesrv", "false").lower() == "true"
        self.namesrv_port = int(conf.get("namesrvListenPort", "9876")) if embedded else None
        self.store_dir = Path(conf.get("storePathRootDir", str(Path.home() / "store")))
        self._init_process(log_path, wrapper, entry, BENCH_BOOT_TIMEOUT_S, BENCH_STOP_TIMEOUT_S, root)
        return self

    def _init_process(self, log_path: str | os.PathLike | None, wrapper: str | None, entry: list[str] | None,
                      boot_timeout: float, stop_timeout: float, root: str | None = None) -> None:
        self.root = root or REPO_ROOT
        self.log_path = Path(log_path) if log_path is not None else None
        self.wrapper = shlex.split(wrapper) if wrapper else []  # e.g. a profiler that runs the interpreter
        self.entry = entry or ["-m", "broker"]  # what the interpreter runs: the broker, or a script wrapping it
        self.boot_timeout = boot_timeout
        self.stop_timeout = stop_timeout
        self.server = ServerProcess([], ready=(BOOT_MARKER, "The broker["), name=f"broker {self.name}", cwd=self.root,
                                    log_path=self.log_path)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def namesrv_addr(self) -> str:
        assert self.namesrv_port, "this broker runs without an embedded name server"
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def boot_line(self) -> str:
        return self.server.ready_line

    def start(self, timeout: float | None = None, log_level: str = "WARNING") -> "BrokerProcess":
        """Start the process and wait (bounded) for its boot line; a broker that exits or hangs is killed and
        reported with the end of its output (ServerStartError, a RuntimeError). Tests that read INFO lines pass
        log_level="INFO"."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = self.root + os.pathsep + env.get("PYTHONPATH", "")
        self.server.env = env
        self.server.argv = [*self.wrapper, sys.executable, *self.entry, "-c", str(self.conf_path), "-l", log_level]
        self.server.start(self.boot_timeout if timeout is None else timeout)
        return self

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM (graceful shutdown), then SIGKILL if it hangs. Returns the exit code."""
        return self.server.stop(self.stop_timeout if timeout is None else timeout)

    def kill(self) -> None:
        """kill -9: no shutdown code runs."""
        self.server.kill()


class NamesrvProcess(_ServerHelper):
    """``python -m broker.namesrv`` on 127.0.0.1 as a subprocess, ready once it prints its boot line.

    Without ``conf`` it listens on ``-p <port>``; with ``conf`` (more namesrv.conf keys: ACL, TLS, connection
    limits, the embedded controller) it reads ``workdir/namesrv.conf`` holding ``listenPort`` and those keys, so a
    ``plain_acl.yml`` put in workdir is its default aclFile."""

    def __init__(self, port: int | None = None, *, workdir: Path | None = None,
                 conf: dict[str, object] | None = None, log_level: str = "WARNING",
                 timeout: float = BOOT_TIMEOUT_S) -> None:
        self.port = port or free_port()
        if conf is None:
            where = ["-p", str(self.port)]
        else:
            if workdir is None:
                raise ValueError("a name server conf needs a workdir to hold namesrv.conf")
            workdir.mkdir(parents=True, exist_ok=True)
            self.conf_path = workdir / "namesrv.conf"
            settings = {"listenPort": self.port, **conf}
            self.conf_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            where = ["-c", str(self.conf_path)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.server = ServerProcess([sys.executable, "-m", "broker.namesrv", *where, "-H", "127.0.0.1", "-l", log_level],
                                    ready=(NAMESRV_BOOT_MARKER,), name="name server", cwd=PROJECT_ROOT, env=env)
        self.server.start(timeout)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        """SIGTERM (SIGKILL after 10 s); the whole output is in log_text() afterwards."""
        self.server.stop(10)


# ---- the benchmarks' broker: their own configuration (larger files, async flush), logged to a file ---------------
def write_broker_conf(path: str, store_dir: str, listen_port: int, namesrv_port: int, commit_log_size: int,
                      broker_name: str = "bench-broker", namesrv_addr: str | None = None,
                      extra: dict[str, object] | None = None, embedded_namesrv: bool = True) -> None:
    """The benchmarks' broker.conf: one async master with an embedded name server (or registering with the name
    server at namesrv_addr, or with none when embedded_namesrv is false), auto-created topics; extra: more
    broker.conf keys."""
    if namesrv_addr:
        namesrv = [f"namesrvAddr={namesrv_addr}", "enableEmbeddedNamesrv=false"]
    elif embedded_namesrv:
        namesrv = ["enableEmbeddedNamesrv=true", f"namesrvListenPort={namesrv_port}"]
    else:
        namesrv = ["enableEmbeddedNamesrv=false"]
    lines = [
        "brokerClusterName=BenchCluster",
        f"brokerName={broker_name}",
        "brokerId=0",
        "brokerRole=ASYNC_MASTER",
        "brokerIP1=127.0.0.1",
        "listenHost=127.0.0.1",
        f"listenPort={listen_port}",
        *namesrv,
        f"storePathRootDir={store_dir}",
        f"mappedFileSizeCommitLog={commit_log_size}",
        "flushDiskType=ASYNC_FLUSH",
        "autoCreateTopicEnable=true",
        "autoCreateSubscriptionGroup=true",
        "defaultTopicQueueNums=4",
        "enablePropertyFilter=true",
        "dashboardPort=0",
        "enableGrpcProxy=false",
        *(f"{key}={value}" for key, value in (extra or {}).items()),
    ]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def prepare_broker(workdir: str, commit_log_size: int, wrapper: str | None,
                   entry: list[str] | None = None, broker_name: str = "bench-broker",
                   namesrv_addr: str | None = None, extra: dict[str, object] | None = None,
                   embedded_namesrv: bool = True, root: str | None = None) -> tuple[BrokerProcess, int]:
    """Write workdir/broker.conf (store in workdir/store, two distinct free ports) and return the not yet started
    broker (logging to workdir/broker.log) with its embedded name server's port (unused when namesrv_addr names
    another broker's name server to register with, or embedded_namesrv is false). root: the checkout whose broker
    runs (default this one)."""
    conf_path = os.path.join(workdir, "broker.conf")
    listen_port, namesrv_port = free_port(), free_port()
    while namesrv_port == listen_port:
        namesrv_port = free_port()
    write_broker_conf(conf_path, os.path.join(workdir, "store"), listen_port, namesrv_port, commit_log_size,
                      broker_name, namesrv_addr, extra, embedded_namesrv)
    broker = BrokerProcess.from_conf(conf_path, os.path.join(workdir, "broker.log"), wrapper, entry, root)
    return broker, namesrv_port
