"""Broker side of route registration: tell the name server(s) which topics this broker hosts.

Registers every ``registerNameServerPeriod`` (30 s) and right after any topic config change, with
each address in ``namesrvAddr`` over REGISTER_BROKER (103), and - for the embedded name server -
directly into the in-process RouteInfoManager (no network, so routes are current immediately).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from broker.namesrv.outbound import OutboundConnection, next_opaque
from broker.namesrv.processor import body_crc32
from broker.namesrv.route_info import RouteInfoManager
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.jsonlenient import dumps_compact

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.managers.topic_config import TopicConfigManager

log = logging.getLogger(__name__)

PERM_READ = 4
PERM_WRITE = 2
BROKER_HEARTBEAT_TIMEOUT_MS = 120_000


class BrokerRegistrar:
    """Keeps this broker's routes registered; ``start()``/``close()`` bound its lifetime."""

    def __init__(
        self,
        config: "BrokerConfig",
        topic_configs: "TopicConfigManager",
        *,
        local_route_info: RouteInfoManager | None = None,
        namesrv_addrs: list[str] | None = None,
        request_timeout: float = 3.0,
    ) -> None:
        self.config = config
        self.topic_configs = topic_configs
        self.local_route_info = local_route_info
        self.namesrv_addrs = list(config.namesrv_addr_list if namesrv_addrs is None else namesrv_addrs)
        self.request_timeout = request_timeout
        self._connections: dict[str, OutboundConnection] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._last_ok: dict[str, bool] = {}  # addr -> outcome of the last attempt (log transitions only)
        topic_configs.add_change_listener(self.request_register)

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Register now (local synchronously, remote in the background loop) and every period after."""
        self._closed = False
        self.register_local()
        if (self.namesrv_addrs or self.local_route_info is not None) and self._task is None:
            self._task = asyncio.create_task(self._run(), name="namesrv-registrar")

    async def close(self, unregister: bool = True) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if unregister:
            if self.local_route_info is not None:
                self.local_route_info.unregister_broker(
                    self.config.broker_cluster_name, self.config.broker_addr, self.config.broker_name, self.config.broker_id
                )
            if self.namesrv_addrs:
                await asyncio.gather(*(self._unregister_remote(a) for a in self.namesrv_addrs), return_exceptions=True)
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def request_register(self) -> None:
        """Topic configs changed: update the embedded routes now, wake the remote registration loop."""
        if self._closed:
            return
        self.register_local()
        self._wake.set()

    # -- payload -----------------------------------------------------------------------------------
    def _topic_table(self) -> tuple[dict[str, Any], Any]:
        topics, version = self.topic_configs.snapshot()
        permission = self.config.broker_permission
        if not (permission & PERM_READ and permission & PERM_WRITE):
            # A read-only / write-only broker advertises its restriction on every topic, like RocketMQ.
            for tc in topics.values():
                tc.perm = permission
        return topics, version

    def build_register_request(self) -> RemotingCommand:
        topics, version = self._topic_table()
        body = dumps_compact(
            {
                "topicConfigSerializeWrapper": {
                    "topicConfigTable": {name: tc.to_json() for name, tc in topics.items()},
                    "dataVersion": version.to_json(),
                },
                "filterServerList": [],
            }
        )
        cfg = self.config
        ext = {
            "brokerName": cfg.broker_name,
            "brokerAddr": cfg.broker_addr,
            "clusterName": cfg.broker_cluster_name,
            "haServerAddr": cfg.ha_server_addr,
            "brokerId": str(cfg.broker_id),
            "heartbeatTimeoutMillis": str(max(BROKER_HEARTBEAT_TIMEOUT_MS, 4 * cfg.register_name_server_period)),
            "enableActingMaster": "false",
            "compressed": "false",
            "bodyCrc32": str(body_crc32(body)),
        }
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=next_opaque())

    # -- registration ------------------------------------------------------------------------------
    def register_local(self) -> None:
        if self.local_route_info is None:
            return
        topics, version = self._topic_table()
        cfg = self.config
        self.local_route_info.register_broker(
            cfg.broker_cluster_name,
            cfg.broker_name,
            cfg.broker_addr,
            cfg.broker_id,
            cfg.ha_server_addr,
            topics,
            version,
            timeout_ms=max(BROKER_HEARTBEAT_TIMEOUT_MS, 4 * cfg.register_name_server_period),
        )

    async def register_remote(self, addr: str) -> bool:
        """One REGISTER_BROKER to ``addr``. Failures are logged, never raised."""
        connection = self._connections.get(addr)
        if connection is None:
            connection = self._connections[addr] = OutboundConnection(addr, max_frame_size=self.config.frame_max_length)
        try:
            response = await connection.invoke(self.build_register_request(), self.request_timeout)
        except (OSError, asyncio.TimeoutError, ConnectionError, ValueError) as exc:
            self._log_failure(addr, f"{type(exc).__name__}: {exc}")
            connection.close()
            return False
        if response.code != ResponseCode.SUCCESS:
            self._log_failure(addr, f"code {response.code} {response.remark or ''}")
            return False
        if self._last_ok.get(addr) is not True:
            self._last_ok[addr] = True
            log.info("registered broker %s (%s) with name server %s", self.config.broker_name, self.config.broker_addr, addr)
        return True

    async def register_all(self) -> None:
        self.register_local()
        if self.namesrv_addrs:
            await asyncio.gather(*(self.register_remote(a) for a in self.namesrv_addrs))

    def _log_failure(self, addr: str, reason: str) -> None:
        if self._last_ok.get(addr) is not False:
            self._last_ok[addr] = False
            log.warning("registration with name server %s failed: %s (retrying)", addr, reason)
        else:
            log.debug("registration with name server %s failed: %s", addr, reason)

    async def _unregister_remote(self, addr: str) -> None:
        connection = self._connections.get(addr)
        if connection is None or not connection.connected:
            return
        cfg = self.config
        ext = {
            "brokerName": cfg.broker_name,
            "brokerAddr": cfg.broker_addr,
            "clusterName": cfg.broker_cluster_name,
            "brokerId": str(cfg.broker_id),
        }
        cmd = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext, opaque=next_opaque())
        try:
            await connection.invoke(cmd, min(self.request_timeout, 1.0))
        except (OSError, asyncio.TimeoutError, ConnectionError):
            pass

    async def _run(self) -> None:
        """Re-register every period (the name server expires silent brokers after 120 s), and
        promptly when woken by a topic change. The local registration also refreshes its timer."""
        period = self.config.register_name_server_period / 1000.0
        while True:
            self._wake.clear()
            await self.register_all()
            try:
                await asyncio.wait_for(self._wake.wait(), period)
            except asyncio.TimeoutError:
                pass
