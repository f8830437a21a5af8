"""Controller tests' helpers: the real ``mqcontroller`` process and a wire client playing a broker in controller
mode (broker ids, registration, heartbeats on its own connection, elections, SyncStateSet proposals)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.controller import SyncStateSet
from broker.testing.process import ServerProcess
from tests.support.broker_process import PROJECT_ROOT, free_port
from tests.support.wire import WireClient

CONTROLLER_BOOT_MARKER = "The Controller boot success."


class ControllerProcess:
    """``python -m broker.controller -c <conf>`` on 127.0.0.1 with its own folder ``workdir/name`` (its .conf, store
    and, if a test puts one there, the default ``plain_acl.yml``); ready once it prints its boot line."""

    def __init__(self, workdir: Path, name: str = "controller", port: int | None = None,
                 extra: dict[str, object] | None = None) -> None:
        self.workdir = workdir / name
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.name = name
        conf = {"listenPort": self.port, "controllerStorePath": str(self.workdir / "store")}
        conf.update(extra or {})
        self.conf_path = self.workdir / "controller.conf"
        self.conf_path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        self.server = ServerProcess([sys.executable, "-m", "broker.controller", "-c", str(self.conf_path),
                                     "-H", "127.0.0.1", "-l", "INFO"], ready=(CONTROLLER_BOOT_MARKER,),
                                    name=f"controller {name}", cwd=PROJECT_ROOT)
        self.started_at = 0.0

    async def past_grace(self, heartbeat_timeout_s: float = 10.0) -> None:
        """A controller that just started waits one heartbeat timeout before it declares a master dead."""
        await asyncio.sleep(max(0.0, self.started_at + heartbeat_timeout_s + 0.5 - time.monotonic()))

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def proc(self) -> subprocess.Popen | None:
        return self.server.proc

    @property
    def output(self) -> list[str]:
        return self.server.output  # type: ignore[return-value]

    def start(self, timeout: float = 20.0) -> "ControllerProcess":
        """Start and wait (bounded) for the boot line (ServerStartError, a RuntimeError, if it never comes)."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.server.env = env
        self.server.start(timeout)
        self.started_at = time.monotonic()
        return self

    def stop(self, timeout: float = 10.0) -> int | None:
        return self.server.stop(timeout)

    def kill(self) -> None:
        self.server.kill()

    def log_text(self) -> str:
        return self.server.log_text()


class FakeBroker:
    """One broker of a group as the controller sees it: its own connection (heartbeats, NOTIFY arrive here)."""

    def __init__(self, client: WireClient, cluster: str, broker_name: str, address: str) -> None:
        self.client = client
        self.cluster = cluster
        self.broker_name = broker_name
        self.address = address
        self.broker_id: int | None = None
        self.epoch = -1
        self.max_offset = 0
        self.priority: int | None = None

    @classmethod
    async def connect(cls, controller_addr: str, cluster: str, broker_name: str, address: str) -> "FakeBroker":
        return cls(await WireClient.connect(controller_addr), cluster, broker_name, address)

    async def close(self) -> None:
        await self.client.close()

    async def request(self, code: int, ext: dict | None = None, body: bytes = b"",
                      timeout: float = 5.0) -> RemotingCommand:
        return await self.client.request(code, ext or {}, body, timeout=timeout)

    async def obtain_id(self) -> int:
        """§3 steps 2-3: GET_NEXT_BROKER_ID then APPLY_BROKER_ID with a check code."""
        names = {"clusterName": self.cluster, "brokerName": self.broker_name}
        nxt = await self.request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, names)
        assert nxt.code == 0, nxt
        broker_id = int(nxt.ext_fields["nextBrokerId"])
        applied = await self.request(RequestCode.CONTROLLER_APPLY_BROKER_ID, dict(
            names, appliedBrokerId=broker_id, registerCheckCode=f"{self.address};{int(time.time() * 1000)}"))
        assert applied.code == 0, applied
        self.broker_id = broker_id
        return broker_id

    async def register(self) -> RemotingCommand:
        return await self.request(RequestCode.CONTROLLER_REGISTER_BROKER, {
            "clusterName": self.cluster, "brokerName": self.broker_name, "brokerId": self.broker_id,
            "brokerAddress": self.address})

    async def heartbeat(self, timeout_ms: int = 3000) -> None:
        ext = {"clusterName": self.cluster, "brokerName": self.broker_name, "brokerAddr": self.address,
               "brokerId": self.broker_id, "epoch": self.epoch, "maxOffset": self.max_offset, "confirmOffset": 0,
               "heartbeatTimeoutMills": timeout_ms}
        if self.priority is not None:
            ext["electionPriority"] = self.priority
        await self.client.oneway(RequestCode.BROKER_HEARTBEAT, ext)

    async def elect_self(self) -> RemotingCommand:
        return await self.request(RequestCode.CONTROLLER_ELECT_MASTER, {
            "clusterName": self.cluster, "brokerName": self.broker_name, "brokerId": self.broker_id})

    async def alter(self, ids: set[int], master_epoch: int, set_epoch: int) -> RemotingCommand:
        return await self.request(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
            "brokerName": self.broker_name, "masterBrokerId": self.broker_id, "masterEpoch": master_epoch},
            SyncStateSet(ids, set_epoch).encode())

    async def replica_info(self) -> RemotingCommand:
        return await self.request(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": self.broker_name})
