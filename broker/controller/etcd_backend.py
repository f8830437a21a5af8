"""controllerType=etcd: several controllers share the group state in etcd and choose the active one there
(controller.md §15). No consensus of our own: etcd's revisions, transactions and leases do the work.

* Election: the key ``/rmq/controller/leader`` is created only if absent (create_revision == 0) on this
  controller's lease (a few seconds, refreshed every third of it). Its ``create_revision`` is this controller's
  term. Losing it (watch DELETE/PUT by another, a failed or late refresh, a fenced commit) makes the controller
  answer 2007 at once.
* State: one key per group, ``/rmq/controller/groups/<brokerName>``, JSON of both records (broker.controller.state).
  Every change is one transaction comparing the group key's mod_revision (nobody changed it since it was read) AND
  the leader key's create_revision (this controller still holds the term that read it), so a deposed leader can
  never write.
* A new leader reloads every group (linearizable read) before serving; the service then waits one heartbeat timeout
  before declaring masters dead (its liveness table is in memory, fed by the brokers' heartbeats to every
  controller).
* Members: ``/rmq/controller/members/<address>`` on each controller's lease: the ``peers`` of the metadata answer.

The client is ``aetcd`` (gRPC). It talks to one endpoint at a time; on a connection error the next endpoint of
``controllerEtcdEndpoints`` is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from broker.controller.backend import Backend, BackendError, ConflictError, NotLeaderError
from broker.controller.state import GroupState, group_from_json, group_to_json
from broker.log_limit import RateLimitedLog
from protocol.jsonlenient import dumps_compact

__all__ = ["EtcdBackend", "PREFIX", "LEADER_KEY", "GROUPS_PREFIX", "MEMBERS_PREFIX", "LEASE_TTL_S"]

log = logging.getLogger("broker.controller")
_limited = RateLimitedLog(log)

PREFIX = b"/rmq/controller"
LEADER_KEY = PREFIX + b"/leader"
GROUPS_PREFIX = PREFIX + b"/groups/"
MEMBERS_PREFIX = PREFIX + b"/members/"
LEASE_TTL_S = 3  # a killed active controller is replaced within this (etcd's minimum is about 2 s)
POLL_S = 0.5  # campaign / leader-key check when no watch event comes
RPC_TIMEOUT_S = 2


class EtcdBackend(Backend):
    def __init__(self, self_address: str, endpoints: list[tuple[str, int]], lease_ttl: int = LEASE_TTL_S) -> None:
        super().__init__(self_address)
        if not endpoints:
            raise BackendError("controllerEtcdEndpoints is empty")
        self.endpoints = endpoints
        self.lease_ttl = lease_ttl
        self._endpoint = 0
        self._client: Any = None
        self._lease: Any = None
        self._lease_ok_at = 0.0  # monotonic time of the last successful grant/refresh
        self._term: int | None = None  # create_revision of our leader key while we lead
        self._revs: dict[str, int] = {}  # group -> mod_revision of what the cache holds
        self._stale: set[str] = set()  # groups whose last commit's outcome is unknown
        self._peers: list[str] = [self_address]
        self._tasks: list[asyncio.Task] = []
        self._wake = asyncio.Event()
        self._closing: set[asyncio.Task] = set()
        self._stopping = False  # loops also check this: Python 3.11's wait_for can swallow a cancellation

    @property
    def group_name(self) -> str:
        return "etcd:" + ",".join(f"{h}:{p}" for h, p in self.endpoints)

    def peers(self) -> list[str]:
        return list(self._peers)

    # ---- connection --------------------------------------------------------------------------------------------
    def _new_client(self) -> Any:
        import aetcd

        host, port = self.endpoints[self._endpoint % len(self.endpoints)]
        return aetcd.Client(host=host, port=port, timeout=RPC_TIMEOUT_S)

    async def _rotate(self, why: str) -> None:
        """Drop the current endpoint's client; the next call uses the next endpoint."""
        old, self._client = self._client, None
        self._endpoint += 1
        host, port = self.endpoints[(self._endpoint - 1) % len(self.endpoints)]
        _limited.warning(("etcd-endpoint", host, port), "controller: etcd %s:%s failed (%s); trying the next "
                         "endpoint", host, port, why)
        if old is not None:  # closed in the background: a hung endpoint must not delay the next call
            task = asyncio.ensure_future(self._close_quietly(old))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close_quietly(client: Any) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), 2)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """One RPC on the current endpoint; BackendError (after moving to the next endpoint) when it fails."""
        import aetcd.exceptions

        if self._client is None:
            self._client = self._new_client()
        client = self._client
        try:
            return await getattr(client, method)(*args, **kwargs)
        except (aetcd.exceptions.ClientError, OSError, asyncio.TimeoutError) as exc:
            if self._client is client:
                await self._rotate(f"{type(exc).__name__}: {exc}")
            raise BackendError(f"etcd {method} failed: {type(exc).__name__}: {exc}") from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # we are being cancelled
            # gRPC cancels the calls of a channel that was closed (another call moved to the next endpoint)
            raise BackendError(f"etcd {method} was cut off: its endpoint was dropped") from None

    @property
    def tx(self) -> Any:
        """aetcd's comparison/operation builders (no connection needed)."""
        from aetcd.client import Transactions

        return Transactions()

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect (any endpoint), take a lease and announce this controller; leadership is campaigned for in the
        background. Raises BackendError when no endpoint answers."""
        last: Exception | None = None
        for _ in range(len(self.endpoints)):
            try:
                await self._grant_lease()
                break
            except BackendError as exc:
                last = exc
        else:
            raise BackendError(f"no etcd endpoint of {self.group_name[5:]} answers: {last}")
        self._tasks = [asyncio.create_task(self._keep_alive(), name="controller-etcd-lease"),
                       asyncio.create_task(self._campaign(), name="controller-etcd-campaign"),
                       asyncio.create_task(self._watch_leader(), name="controller-etcd-watch")]

    async def close(self) -> None:
        self._stopping = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=5)
            for task in pending:  # a lost cancellation: once more
                task.cancel()
        term, lease = self._term, self._lease
        self._step_down("shutting down")
        with contextlib.suppress(Exception):
            if term is not None:  # hand over at once instead of after the lease's TTL
                await self._call("transaction", compare=[self.tx.create(LEADER_KEY) == term],
                                 success=[self.tx.delete(LEADER_KEY)], failure=[])
            if lease is not None:
                await self._call("revoke_lease", lease.id)
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), 2)

    async def _grant_lease(self) -> None:
        lease = await self._call("lease", self.lease_ttl)
        self._lease = lease
        self._lease_ok_at = time.monotonic()
        await self._call("put", MEMBERS_PREFIX + self.self_address.encode(), self.self_address.encode(), lease=lease)

    async def _keep_alive(self) -> None:
        """Refresh the lease every third of its TTL. A lease etcd no longer knows, or no successful refresh for
        most of the TTL, ends this controller's term before etcd would hand it to another."""
        while not self._stopping:
            await asyncio.sleep(self.lease_ttl / 3)
            try:
                if self._lease is None:
                    await self._grant_lease()
                    continue
                reply = await self._call("refresh_lease", self._lease.id)
                if reply is None or getattr(reply, "TTL", 0) <= 0:
                    self._step_down("its etcd lease expired")
                    self._lease = None
                    await self._grant_lease()
                else:
                    self._lease_ok_at = time.monotonic()
            except BackendError:
                pass
            except Exception:  # a bug: keep refreshing, say so (rate-limited)
                _limited.error(("etcd-lease",), "controller: etcd lease refresh failed", exc_info=True)
            if self.is_leader and time.monotonic() - self._lease_ok_at > self.lease_ttl * 2 / 3:
                self._step_down("its etcd lease could not be refreshed")

    async def _campaign(self) -> None:
        while not self._stopping:
            try:
                await self._campaign_once()
            except BackendError:
                pass
            except asyncio.CancelledError:
                raise
            except Exception:
                _limited.error(("etcd-campaign",), "controller: etcd campaign failed", exc_info=True)
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)

    async def _campaign_once(self) -> None:
        members = await self._call("get_prefix", MEMBERS_PREFIX)
        self._peers = sorted(kv.value.decode() for kv in members) or [self.self_address]
        lease = self._lease
        if lease is None:
            return
        tx = self.tx
        ok, responses = await self._call("transaction", compare=[tx.create(LEADER_KEY) == 0],
                                         success=[tx.put(LEADER_KEY, self.self_address.encode(), lease=lease)],
                                         failure=[tx.get(LEADER_KEY)])
        if ok:
            await self._take_office(responses[0].response_put.header.revision)
            return
        current = responses[0][0][1] if responses and responses[0] else None
        if current is None:
            return
        self.leader_address = current.value.decode()
        if self.is_leader and current.create_revision != self._term:
            self._step_down("another controller holds the leader key")
        elif not self.is_leader and current.lease == lease.id:
            # our own key survived a refresh hiccup: still our term
            await self._take_office(current.create_revision)

    async def _take_office(self, term: int) -> None:
        await self._reload_all()
        self._term = term
        self.leader_address = self.self_address
        log.info("controller: %s leads the etcd controller group (term %s, %d groups)", self.self_address, term,
                 len(self.groups))
        self._set_leader(True)

    def _step_down(self, why: str) -> None:
        if self.is_leader:
            log.warning("controller: %s is no longer the active controller: %s", self.self_address, why)
            self.leader_address = None
        self._term = None
        self._set_leader(False)

    async def _watch_leader(self) -> None:
        """Leader-key changes end a term at once (the poll would see them within POLL_S anyway)."""
        while not self._stopping:
            try:
                if self._client is None:
                    await asyncio.sleep(POLL_S)
                    continue
                watch = await self._client.watch(LEADER_KEY)
                async for event in watch:
                    kind = str(getattr(event, "kind", ""))
                    if "DELETE" in kind:
                        self.leader_address = None
                        if self.is_leader:
                            self._step_down("the leader key was deleted")
                    elif self.is_leader and event.kv.create_revision != self._term:
                        self._step_down("another controller holds the leader key")
                    self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(POLL_S)

    # ---- state -------------------------------------------------------------------------------------------------
    async def _reload_all(self) -> None:
        found = await self._call("get_prefix", GROUPS_PREFIX)
        groups: dict[str, GroupState] = {}
        revs: dict[str, int] = {}
        for kv in found:
            name = kv.key[len(GROUPS_PREFIX):].decode()
            try:
                groups[name] = group_from_json(kv.value)
            except ValueError as exc:
                raise BackendError(f"etcd key {kv.key.decode()} is corrupt: {exc}") from None
            revs[name] = kv.mod_revision
        self.groups, self._revs, self._stale = groups, revs, set()

    async def _reload_group(self, name: str) -> None:
        got = await self._call("get", GROUPS_PREFIX + name.encode())
        groups = dict(self.groups)
        if got is None:
            groups.pop(name, None)
            self._revs.pop(name, None)
        else:
            try:
                groups[name] = group_from_json(got.value)
            except ValueError as exc:
                raise BackendError(f"etcd key for group {name} is corrupt: {exc}") from None
            self._revs[name] = got.mod_revision
        self.groups = groups
        self._stale.discard(name)

    async def prepare(self, name: str) -> None:
        if name in self._stale and self.is_leader:
            await self._reload_group(name)

    async def commit(self, name: str, expected: GroupState | None, new: GroupState | None) -> None:
        term = self._term
        if not self.is_leader or term is None:
            raise NotLeaderError("not the active controller")
        if self.groups.get(name) is not expected:
            raise ConflictError(name)
        key = GROUPS_PREFIX + name.encode()
        tx = self.tx
        op = tx.put(key, dumps_compact(group_to_json(new))) if new is not None else tx.delete(key)
        try:
            ok, responses = await self._call(
                "transaction", compare=[tx.mod(key) == self._revs.get(name, 0), tx.create(LEADER_KEY) == term],
                success=[op], failure=[tx.get(LEADER_KEY), tx.get(key)])
        except BackendError:
            self._stale.add(name)  # it may or may not have been applied: read it again before deciding
            raise
        if ok:
            groups = dict(self.groups)
            if new is None:
                groups.pop(name, None)
                self._revs.pop(name, None)
            else:
                groups[name] = new
                self._revs[name] = responses[0].response_put.header.revision
            self.groups = groups
            return
        leader = responses[0][0][1] if responses and responses[0] else None
        if leader is None or leader.create_revision != term:
            self._step_down("its term ended (fenced commit)")
            raise NotLeaderError("not the active controller")
        await self._reload_group(name)
        raise ConflictError(name)
