"""The broker's connections to its controllers (controller.md §4): one per ``controllerAddr`` entry, the active
controller found with CONTROLLER_GET_METADATA_INFO (1005), leader-only requests sent there (a 2007 NOT_LEADER answer
looks the leader up again once), heartbeats one-way to every reachable controller. Requests a controller sends back on
these connections (NOTIFY_BROKER_ROLE_CHANGED) go to ``on_request``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker.log_limit import RateLimitedLog
from broker.namesrv.outbound import OutboundConnection, next_opaque
from protocol.acl_signature import ACCESS_KEY, SIGNATURE, sign
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import GetMetaDataResponseHeader

log = logging.getLogger(__name__)
_limited = RateLimitedLog(log, interval_s=30.0)

__all__ = ["ControllerLink", "ControllerError"]

REQUEST_TIMEOUT_S = 3.0


class ControllerError(ConnectionError):
    """No controller could be reached or none leads."""


class _Connection(OutboundConnection):
    def __init__(self, addr: str, on_request: Callable[[RemotingCommand], None] | None, **kwargs) -> None:
        super().__init__(addr, **kwargs)
        self._on_request = on_request

    def arrived(self, cmd: RemotingCommand) -> None:
        if not cmd.is_response:
            if self._on_request is not None:
                self._on_request(cmd)
            return
        super().arrived(cmd)


class ControllerLink:
    def __init__(self, addrs: list[str], *, on_request: Callable[[RemotingCommand], None] | None = None,
                 max_frame_size: int = 16 * 1024 * 1024, ssl_context=None,
                 credentials: tuple[str, str] | None = None) -> None:
        self.credentials = credentials  # (accessKey, secretKey): sign every request, for controllers with ACL on
        self._on_request = on_request  # also for the connection to a leader known by its advertised address only
        self.addrs = list(addrs)
        self.connections = {a: _Connection(a, on_request, connect_timeout=1.0, max_frame_size=max_frame_size,
                                           ssl_context=ssl_context) for a in self.addrs}
        self._extra: dict[str, _Connection] = {}  # a leader reachable only under its advertised address
        self.leader: str | None = None

    def close(self) -> None:
        for c in [*self.connections.values(), *self._extra.values()]:
            c.close()

    def _request(self, code: int, header: dict[str, str], body: bytes = b"", *, oneway: bool = False) -> RemotingCommand:
        fields = dict(header)
        if self.credentials is not None:
            fields[ACCESS_KEY] = self.credentials[0]
            fields[SIGNATURE] = sign(self.credentials[1], fields, body)
        return RemotingCommand.request(code, fields, body, opaque=next_opaque(), oneway=oneway)

    async def find_leader(self) -> str | None:
        """Ask the controllers who leads (1005). A configured controller that answers isLeader is used through its
        own connection (the one its heartbeats take: a controller treats that connection closing as the broker
        dying); only a leader known by its advertised address alone gets a connection of its own."""
        named = None
        for addr, conn in self.connections.items():
            try:
                response = await conn.invoke(self._request(RequestCode.CONTROLLER_GET_METADATA_INFO, {}),
                                             REQUEST_TIMEOUT_S)
            except (OSError, asyncio.TimeoutError, ConnectionError, ValueError) as exc:
                _limited.info(("meta", addr), "controller %s unreachable: %s", addr, exc or type(exc).__name__)
                continue
            if response.code != ResponseCode.SUCCESS:
                continue
            header = GetMetaDataResponseHeader.decode(response.ext_fields)
            if header.is_leader:
                return self._set_leader(addr)
            named = named or header.controller_leader_address
        if named:
            if named not in self.connections and named not in self._extra:
                first = next(iter(self.connections.values()))
                self._extra[named] = _Connection(named, self._on_request, connect_timeout=1.0,
                                                 max_frame_size=first.max_frame_size, ssl_context=first.ssl_context)
            return self._set_leader(named)
        self.leader = None
        return None

    def _set_leader(self, addr: str) -> str:
        if addr != self.leader:
            log.info("active controller: %s", addr)
        self.leader = addr
        return addr

    def _connection(self, addr: str) -> "_Connection":
        return self.connections.get(addr) or self._extra[addr]

    async def invoke_leader(self, code: int, header: dict[str, str], body: bytes = b"",
                            timeout: float = REQUEST_TIMEOUT_S) -> RemotingCommand:
        """A leader-only request; ControllerError when no controller leads or answers."""
        for attempt in range(2):
            leader = self.leader or await self.find_leader()
            if leader is None:
                raise ControllerError(f"no active controller among {';'.join(self.addrs)}")
            conn = self._connection(leader)
            try:
                response = await conn.invoke(self._request(code, header, body), timeout)
            except (OSError, asyncio.TimeoutError, ConnectionError, ValueError) as exc:
                self.leader = None  # never closed here: a controller takes its connection closing for a dead broker
                if attempt:
                    raise ControllerError(f"controller {leader}: {exc or type(exc).__name__}") from None
                continue
            if response.code == ResponseCode.CONTROLLER_NOT_LEADER and not attempt:
                self.leader = None
                continue
            return response
        raise ControllerError("no active controller")

    async def oneway_all(self, code: int, header: dict[str, str]) -> int:
        """Send to every reachable controller (heartbeats); how many took it."""
        sent = 0
        for addr in list(self.connections):
            conn = self.connections[addr]
            try:
                await conn.invoke_oneway(self._request(code, header, oneway=True))
                sent += 1
            except (OSError, asyncio.TimeoutError, ConnectionError, ValueError):
                pass  # unreachable now: the next heartbeat connects again
        return sent
