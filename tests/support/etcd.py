"""A real 3-member etcd cluster on loopback for the controllerType=etcd tests (Debian's etcd-server).

Free ports, data folders under the test's tmp_path, every member killed at teardown. Tests that need it skip with
a clear reason when the ``etcd`` binary is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.broker_process import free_port

ETCD = shutil.which("etcd")
needs_etcd = pytest.mark.skipif(ETCD is None, reason="the etcd binary is missing (apt-get install etcd-server)")


class EtcdCluster:
    def __init__(self, workdir: Path, members: int = 3) -> None:
        self.workdir = workdir
        self.names = [f"e{i}" for i in range(members)]
        self.client_ports = [free_port() for _ in self.names]
        self.peer_ports = [free_port() for _ in self.names]
        self.procs: list[subprocess.Popen | None] = [None] * members
        self.logs: list[Path] = [workdir / f"{name}.log" for name in self.names]

    @property
    def endpoints(self) -> str:
        """``controllerEtcdEndpoints``: host:port,host:port,..."""
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports)

    def start(self, timeout: float = 30.0) -> "EtcdCluster":
        assert ETCD is not None
        initial = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(self.names, self.peer_ports))
        for i, name in enumerate(self.names):
            client, peer = self.client_ports[i], self.peer_ports[i]
            args = [ETCD, "--name", name, "--data-dir", str(self.workdir / f"{name}.etcd"),
                    "--listen-client-urls", f"http://127.0.0.1:{client}",
                    "--advertise-client-urls", f"http://127.0.0.1:{client}",
                    "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-cluster", initial, "--initial-cluster-state", "new",
                    "--initial-cluster-token", f"rmq-test-{self.client_ports[0]}",
                    "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn"]
            with open(self.logs[i], "wb") as out:
                self.procs[i] = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.healthy(i) for i in range(len(self.names))):
                return self
            for i, proc in enumerate(self.procs):
                if proc is not None and proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"etcd {self.names[i]} exited:\n{self.logs[i].read_text()[-3000:]}")
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("etcd cluster did not become healthy")

    def healthy(self, i: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.client_ports[i]}/health", timeout=1) as resp:
                return json.loads(resp.read()).get("health") in ("true", True)
        except (OSError, ValueError):
            return False

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            if proc is not None:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
