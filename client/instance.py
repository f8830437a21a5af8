"""Machinery shared by producers and consumers: client id, name-server look-ups, broker connections, heartbeats.

Each Producer / PullConsumer / PushConsumer owns one ClientInstance (no process-wide singleton: simpler lifetimes and
distinct client ids, which rebalancing needs).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable
from typing import Self

from client.credentials import Credentials
from client.errors import MQBrokerError, RemotingError
from client.remoting import RemotingClient, RequestHandler, split_addr, tls_context
from client.route import TopicRoute
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.jsonlenient import dumps_compact

log = logging.getLogger(__name__)

_instance_counter = itertools.count(1)


def _int(value: object, default: int = 0) -> int:
    """extFields value (str from JSON peers, int from msgpack) -> int."""
    if value is None:
        return default
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


def local_ip_towards(addr: str) -> str:
    """The local address the OS would use to reach addr (no packet is sent); 127.0.0.1 if unknown."""
    try:
        host, port = split_addr(addr)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return probe.getsockname()[0]
    except (OSError, ValueError):
        return "127.0.0.1"


class NameServerClient:
    """GET_ROUTEINFO_BY_TOPIC with fail-over across a ';'-separated name server list."""

    def __init__(self, namesrv_addr: str, timeout: float = 3.0, credentials: Credentials | None = None,
                 ssl_context: "ssl.SSLContext | None" = None) -> None:
        self.addrs = [a.strip() for a in (namesrv_addr or "").split(";") if a.strip()]
        if not self.addrs:
            raise ValueError("namesrv_addr is empty; expected 'host:port[;host:port...]'")
        for a in self.addrs:
            split_addr(a)  # validate early with a clear message
        self.timeout = timeout
        # Name servers always speak JSON; requests are signed like the reference clients do (name servers ignore it).
        self.remoting = RemotingClient(credentials=credentials, ssl_context=ssl_context)
        self._preferred = 0

    async def invoke(self, cmd_factory: Callable[[], RemotingCommand], timeout: float | None = None) -> RemotingCommand:
        """Send to the preferred name server, falling over to the next ones on transport errors."""
        timeout = timeout or self.timeout
        last: Exception | None = None
        n = len(self.addrs)
        for i in range(n):
            index = (self._preferred + i) % n
            addr = self.addrs[index]
            try:
                reply = await self.remoting.invoke(addr, cmd_factory(), timeout)
            except RemotingError as exc:
                last = exc
                continue
            self._preferred = index
            return reply
        raise RemotingError(f"no name server reachable in {self.addrs}: {last}")

    async def get_route(self, topic: str, timeout: float | None = None) -> TopicRoute:
        """Route of a topic; MQBrokerError(17) when the name server does not know it."""

        def make() -> RemotingCommand:
            return RemotingCommand(
                code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                ext_fields={"topic": topic, "acceptStandardJsonOnly": "true"},
            )

        reply = await self.invoke(make, timeout)
        if reply.code != ResponseCode.SUCCESS:
            raise MQBrokerError(reply.code, reply.remark, "name server")
        try:
            return TopicRoute.parse(reply.body)
        except ValueError as exc:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"unreadable route for {topic!r}: {exc}") from exc

    async def close(self) -> None:
        await self.remoting.close()


class ClientInstance:
    """Client id, route cache, broker connection pool and the periodic heartbeat / route refresh."""

    def __init__(
        self,
        namesrv_addr: str,
        *,
        instance_name: str | None = None,
        heartbeat_data: Callable[[], dict] | None = None,
        request_handler: RequestHandler | None = None,
        allow_msgpack: bool = True,
        heartbeat_interval: float = 30.0,
        route_refresh_interval: float = 30.0,
        rpc_timeout: float = 3.0,
        credentials: Credentials | None = None,
        tls: "bool | ssl.SSLContext" = False,
        tls_ca_path: str | None = None,
    ) -> None:
        self.credentials = credentials
        ssl_context = tls_context(tls, tls_ca_path)  # name servers and brokers alike, as the Java client
        self.namesrv = NameServerClient(namesrv_addr, rpc_timeout, credentials, ssl_context)
        self.client_ip = local_ip_towards(self.namesrv.addrs[0])
        if not instance_name:
            instance_name = f"{os.getpid()}#{time.monotonic_ns()}#{next(_instance_counter)}"
        self.instance_name = instance_name
        self.client_id = f"{self.client_ip}@{instance_name}"
        self._heartbeat_data = heartbeat_data or (lambda: {})
        self.brokers = RemotingClient(
            request_handler=request_handler, heartbeat_body=self.heartbeat_body, allow_msgpack=allow_msgpack,
            credentials=credentials,
            ssl_context=ssl_context,
        )
        self.heartbeat_interval = heartbeat_interval
        self.route_refresh_interval = route_refresh_interval
        self.rpc_timeout = rpc_timeout
        self.routes: dict[str, TopicRoute] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.tracked_topics: set[str] = set()
        self.route_listeners: list[Callable[[str, TopicRoute], None]] = []
        self._tasks: list[asyncio.Task] = []
        self.started = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self.started:
            return
        self.started = True
        self._tasks.append(asyncio.create_task(self._periodic(), name=f"client-{self.client_id}-periodic"))

    async def shutdown(self, unregister: list[dict[str, str]] | None = None) -> None:
        """Stop periodic work, send UNREGISTER_CLIENT (one per entry of `unregister`) and close connections."""
        if not self.started:
            await self.brokers.close()
            await self.namesrv.close()
            return
        self.started = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        if unregister:
            await self._unregister(unregister)
        await self.brokers.close()
        await self.namesrv.close()

    async def _unregister(self, entries: list[dict[str, str]]) -> None:
        calls = []
        for addr in list(self.brokers.connections):
            for fields in entries:
                ext = {"clientID": self.client_id, **fields}
                calls.append(
                    self.brokers.invoke(addr, RemotingCommand(code=RequestCode.UNREGISTER_CLIENT, ext_fields=ext), 1.0)
                )
        if calls:
            await asyncio.gather(*calls, return_exceptions=True)

    # ------------------------------------------------------------------ heartbeats
    def heartbeat_body(self) -> bytes:
        data = {"clientID": self.client_id, "producerDataSet": [], "consumerDataSet": []}
        data.update(self._heartbeat_data())
        return dumps_compact(data)

    def all_broker_addrs(self) -> set[str]:
        return {addr for addrs in self.broker_addrs.values() for addr in addrs.values()}

    async def heartbeat_all(self) -> None:
        """Heartbeat every known broker (a new connection heartbeats as its handshake)."""
        calls = []
        for addr in self.all_broker_addrs():
            if self.brokers.connected(addr) is None:
                calls.append(self.brokers.connection(addr))
            else:
                cmd = RemotingCommand(code=RequestCode.HEART_BEAT, ext_fields={}, body=self.heartbeat_body())
                calls.append(self.brokers.invoke(addr, cmd, self.rpc_timeout))
        for result in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(result, Exception):
                log.debug("heartbeat failed: %s", result)

    # ------------------------------------------------------------------ routes
    async def update_route(self, topic: str) -> TopicRoute:
        """Fetch a topic's route from the name server and record its brokers (raises MQBrokerError 17 if unknown)."""
        route = await self.namesrv.get_route(topic)
        self.routes[topic] = route
        for broker in route.brokers:
            self.broker_addrs[broker.broker_name] = dict(broker.addrs)
        for listener in self.route_listeners:
            try:
                listener(topic, route)
            except Exception:  # a listener bug must not break route refresh
                log.exception("route listener failed for %s", topic)
        return route

    def master_addr(self, broker_name: str) -> str | None:
        addrs = self.broker_addrs.get(broker_name)
        return addrs.get(0) if addrs else None

    async def find_master_addr(self, broker_name: str, topic: str | None = None) -> str:
        """Master address of a broker, refreshing the topic route once if it is unknown."""
        addr = self.master_addr(broker_name)
        if addr is None and topic is not None:
            try:
                await self.update_route(topic)
            except MQBrokerError:
                pass
            addr = self.master_addr(broker_name)
        if addr is None:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"broker {broker_name!r} has no known master address")
        return addr

    async def refresh_routes(self) -> None:
        for topic in list(self.tracked_topics):
            try:
                await self.update_route(topic)
            except Exception as exc:
                log.debug("route refresh for %s failed: %s", topic, exc)

    async def _periodic(self) -> None:
        loop = asyncio.get_running_loop()
        next_route = loop.time() + self.route_refresh_interval
        next_heartbeat = loop.time() + self.heartbeat_interval
        while True:
            await asyncio.sleep(max(0.05, min(next_route, next_heartbeat) - loop.time()))
            now = loop.time()
            if now >= next_route:
                next_route = now + self.route_refresh_interval
                await self.refresh_routes()
            if now >= next_heartbeat:
                next_heartbeat = now + self.heartbeat_interval
                await self.heartbeat_all()

    # ------------------------------------------------------------------ requests
    async def invoke_broker(self, addr: str, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        return await self.brokers.invoke(addr, cmd, timeout or self.rpc_timeout)


__all__ = ["ClientInstance", "NameServerClient", "local_ip_towards", "_int"]


class ClientLifecycle:
    """start/shutdown/async-with for a producer or consumer that owns one ClientInstance; shutdown unregisters
    the group given by ``_unregister_entry()``."""

    _instance: ClientInstance
    _started: bool

    @property
    def client_id(self) -> str:
        return self._instance.client_id

    async def start(self) -> None:
        if self._started:
            return
        await self._instance.start()
        self._started = True

    async def shutdown(self) -> None:
        if not self._started:
            await self._instance.shutdown()
            return
        self._started = False
        await self._instance.shutdown(unregister=[self._unregister_entry()])

    def _unregister_entry(self) -> dict[str, str]:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.shutdown()
