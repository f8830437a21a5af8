"""Broker side of route registration: tell the name server(s) which topics this broker hosts.

Embedded name server: the whole table is registered once in-process, then every topic change is
applied to its RouteInfoManager as a one-topic delta (like RocketMQ's registerIncrementBrokerData),
so routes are current immediately and a change costs the same at 500 or 8,000 topics; the periodic
registration only refreshes the broker's timer.

Remote name servers (``namesrvAddr``): the full REGISTER_BROKER (103) every
``registerNameServerPeriod`` (30 s), and after topic changes - at once for an isolated change, at most
once per ``CHANGE_REGISTER_DEBOUNCE_S`` during a burst - with the body encoded off the event loop
when large.
A full table is sent rather than only the changed topics because name servers that replace a
broker's topics with each registration (ours) would otherwise drop the rest.
A slave learns its master's HA and remoting addresses from the answers; while no answer names them it
registers again within seconds (``MASTER_LOOKUP_*``), not a period later.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
import copy
import logging
import ssl
from typing import TYPE_CHECKING, Any

from broker.namesrv.outbound import OutboundConnection, next_opaque
from broker.tls import outbound_context, outbound_tls_enabled
from broker.namesrv.processor import body_crc32
from broker.managers.persistence import data_version_key
from broker.namesrv.route_info import RouteInfoManager
from protocol.codes import RequestCode, ResponseCode
from protocol.acl_signature import ACCESS_KEY, SIGNATURE, sign
from protocol.command import RemotingCommand
from protocol.jsonlenient import dumps_compact

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.managers.topic_config import TopicConfigManager
    from protocol.config_bodies import DataVersion, TopicConfig

log = logging.getLogger(__name__)

PERM_READ = 4
PERM_WRITE = 2
BROKER_HEARTBEAT_TIMEOUT_MS = 120_000
# Topic changes trigger at most one registration with remote name servers per this interval, so a
# burst (a heartbeat naming thousands of groups, a creation storm) costs one or two registrations.
CHANGE_REGISTER_DEBOUNCE_S = 0.3
# Bodies of tables larger than this are encoded in a worker thread instead of on the event loop.
INLINE_ENCODE_MAX_TOPICS = 256
# A slave whose registration answers name no master yet (it started first, or the master's registration expired)
# registers again after 1 s, 2 s, 4 s, then every MASTER_LOOKUP_MAX_S, instead of waiting a whole period: it learns
# the master's HA address (and SYNC_MASTER sends stop answering SLAVE_NOT_AVAILABLE) seconds after the master starts.
MASTER_LOOKUP_FIRST_S = 1.0
MASTER_LOOKUP_MAX_S = 5.0


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
        change_debounce_s: float = CHANGE_REGISTER_DEBOUNCE_S,
        master_listener: Callable[[str | None, str | None], None] | None = None,
    ) -> None:
        self.config = config
        self.topic_configs = topic_configs
        self.local_route_info = local_route_info
        # A slave's hook: called with the master's HA and remoting addresses from each registration answer
        # (None: no master registered).
        self.master_listener = master_listener
        self._master_named = False  # a slave: some answer of the last round named the master's HA address
        self.namesrv_addrs = list(config.namesrv_addr_list if namesrv_addrs is None else namesrv_addrs)
        self.request_timeout = request_timeout
        self.change_debounce_s = change_debounce_s
        self._connections: dict[str, OutboundConnection] = {}
        self._outbound_ssl: ssl.SSLContext | None = None  # built on first use when tlsEnable
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._last_ok: dict[str, bool] = {}  # addr -> outcome of the last attempt (log transitions only)
        self.remote_registrations = 0  # REGISTER_BROKER requests sent (observability, tests)
        topic_configs.add_topic_listener(self._on_topic_changed)

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """close() was called and no start() since: it registers nothing more."""
        return self._closed

    @property
    def running(self) -> bool:
        """Its background loop (remote registrations, periodic re-registration) is running."""
        return self._task is not None

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
        """Re-register everything: the embedded routes now, remote name servers soon."""
        if self._closed:
            return
        self.register_local()
        self._wake.set()

    def _on_topic_changed(self, topic: str, config: "TopicConfig | None") -> None:
        """One topic changed: apply just that topic to the embedded routes (O(1)), and let the remote
        loop register once the burst is over."""
        if self._closed:
            return
        if self.local_route_info is not None:
            change = {topic: None if config is None else self._advertised(config)}
            applied = self.local_route_info.apply_topic_changes(
                self.config.broker_addr, change, self.topic_configs.data_version
            )
            if not applied:  # not registered (yet, or any more): register the whole table once
                self.register_local()
        if self.namesrv_addrs:
            self._wake.set()

    # -- payload -----------------------------------------------------------------------------------
    def _restricted_permission(self) -> int | None:
        """A read-only / write-only broker advertises its restriction on every topic, like RocketMQ."""
        permission = self.config.broker_permission
        return None if permission & PERM_READ and permission & PERM_WRITE else permission

    def _advertised(self, config: "TopicConfig") -> "TopicConfig":
        permission = self._restricted_permission()
        if permission is None:
            return config
        advertised = copy.copy(config)
        advertised.perm = permission
        return advertised

    def _encode_body(self, topics: dict[str, "TopicConfig"], version: "DataVersion") -> bytes:
        """RegisterBrokerBody JSON of a table snapshot (safe in a worker thread: configs are never
        modified in place and ``topics`` is a private copy of the table)."""
        permission = self._restricted_permission()
        table: dict[str, Any] = {}
        for name, tc in topics.items():
            obj = tc.to_json()
            if permission is not None:
                obj["perm"] = permission
            table[name] = obj
        return dumps_compact(
            {
                "topicConfigSerializeWrapper": {"topicConfigTable": table, "dataVersion": version.to_json()},
                "filterServerList": [],
            }
        )

    def _table_snapshot(self) -> tuple[dict[str, "TopicConfig"], "DataVersion"]:
        # A shallow dict copy is enough (and C-fast): changes replace TopicConfig objects, never mutate them.
        return dict(self.topic_configs.topics), copy.copy(self.topic_configs.data_version)

    async def build_register_body(self) -> bytes:
        """The body for the current table; large tables are encoded in a worker thread."""
        topics, version = self._table_snapshot()
        if len(topics) <= INLINE_ENCODE_MAX_TOPICS:
            return self._encode_body(topics, version)
        return await asyncio.to_thread(self._encode_body, topics, version)

    def _register_request(self, body: bytes) -> RemotingCommand:
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
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, self._signed(ext, body), body, opaque=next_opaque())

    def _signed(self, ext: dict[str, str], body: bytes = b"") -> dict[str, str]:
        """With accessKey/secretKey in broker.conf: AccessKey then Signature added, for name servers with ACL on."""
        cfg = self.config
        if cfg.access_key and cfg.secret_key:
            ext[ACCESS_KEY] = cfg.access_key
            ext[SIGNATURE] = sign(cfg.secret_key, ext, body)
        return ext

    def build_register_request(self) -> RemotingCommand:
        """REGISTER_BROKER with the whole table, encoded inline (tools and tests)."""
        return self._register_request(self._encode_body(*self._table_snapshot()))

    # -- registration ------------------------------------------------------------------------------
    def register_local(self) -> None:
        """Register the whole table with the embedded name server (start, or after it forgot us)."""
        if self.local_route_info is None:
            return
        permission = self._restricted_permission()
        topics: Any = self.topic_configs.topics  # read synchronously by register_broker, no copy needed
        if permission is not None:
            topics = {name: self._advertised(tc) for name, tc in topics.items()}
        cfg = self.config
        result = self.local_route_info.register_broker(
            cfg.broker_cluster_name,
            cfg.broker_name,
            cfg.broker_addr,
            cfg.broker_id,
            cfg.ha_server_addr,
            topics,
            copy.copy(self.topic_configs.data_version),
            timeout_ms=max(BROKER_HEARTBEAT_TIMEOUT_MS, 4 * cfg.register_name_server_period),
        )
        if self.master_listener is not None and result is not None:
            self._tell_master(getattr(result, "ha_server_addr", None), getattr(result, "master_addr", None))

    def refresh_local(self) -> None:
        """Periodic embedded registration: deltas keep the routes current, so only the broker's
        timer needs refreshing - unless the name server lost us or our version, then everything."""
        route_info = self.local_route_info
        if route_info is None:
            return
        live = route_info.broker_live_table.get(self.config.broker_addr)
        if self.master_listener is not None:
            self.register_local()  # a slave: the answer names its master (a slave's registration scans no topics)
        elif live is not None and live.data_version == data_version_key(self.topic_configs.data_version):
            route_info.update_broker_heartbeat(self.config.broker_addr)
        else:
            self.register_local()

    async def register_remote(self, addr: str, body: bytes | None = None) -> bool:
        """One REGISTER_BROKER to ``addr``. Failures are logged, never raised."""
        if body is None:
            body = await self.build_register_body()
        connection = self._connections.get(addr)
        if connection is None:
            if self._outbound_ssl is None and outbound_tls_enabled(self.config):
                self._outbound_ssl = outbound_context(self.config)
            connection = self._connections[addr] = OutboundConnection(addr, max_frame_size=self.config.frame_max_length,
                                                                      ssl_context=self._outbound_ssl)
        self.remote_registrations += 1
        try:
            response = await connection.invoke(self._register_request(body), self.request_timeout)
        except (OSError, asyncio.TimeoutError, ConnectionError, ValueError) as exc:
            self._log_failure(addr, f"{type(exc).__name__}: {exc}")
            connection.close()
            return False
        if response.code != ResponseCode.SUCCESS:
            self._log_failure(addr, f"code {response.code} {response.remark or ''}")
            return False
        if self.master_listener is not None:  # a slave learns its master's HA address from the answer
            fields = response.ext_fields or {}
            self._tell_master(fields.get("haServerAddr") or None, fields.get("masterAddr") or None)
        if self._last_ok.get(addr) is not True:
            self._last_ok[addr] = True
            log.info("registered broker %s (%s) with name server %s", self.config.broker_name, self.config.broker_addr, addr)
        return True

    def _tell_master(self, ha_addr: str | None, master_addr: str | None) -> None:
        if ha_addr:
            self._master_named = True
        self.master_listener(ha_addr, master_addr)  # type: ignore[misc]

    async def register_all(self) -> None:
        """Refresh the embedded registration and send one full registration to every remote name server."""
        self._master_named = False
        self.refresh_local()
        if self.namesrv_addrs:
            body = await self.build_register_body()  # encoded once for all addresses
            await asyncio.gather(*(self.register_remote(a, body) for a in self.namesrv_addrs))

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
        cmd = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, self._signed(ext), opaque=next_opaque())
        try:
            await connection.invoke(cmd, min(self.request_timeout, 1.0))
        except (OSError, asyncio.TimeoutError, ConnectionError):
            pass

    async def _run(self) -> None:
        """Re-register every period (the name server expires silent brokers after 120 s), and after
        topic changes: at once for an isolated change, but at most once per ``change_debounce_s``,
        so the changes of a burst that arrive meanwhile share the next registration."""
        period = self.config.register_name_server_period / 1000.0
        loop = asyncio.get_running_loop()
        lookup = MASTER_LOOKUP_FIRST_S
        while True:
            self._wake.clear()
            await self.register_all()
            registered_at = loop.time()
            wait = period
            if self.master_listener is not None and not self._master_named:  # a slave still looking for its master
                wait, lookup = min(period, lookup), min(lookup * 2, MASTER_LOOKUP_MAX_S)
            else:
                lookup = MASTER_LOOKUP_FIRST_S
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except asyncio.TimeoutError:
                continue
            pause = self.change_debounce_s - (loop.time() - registered_at)
            if pause > 0:
                await asyncio.sleep(pause)
