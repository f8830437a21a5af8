"""A broker in controller mode (controller.md §3-§7): gets its persistent id, registers with the controller,
heartbeats every reachable controller, follows the role the controller decides and, as master, keeps the controller's
SyncStateSet up to date.

Every role change (registration answer, election answer, role sync, NOTIFY_BROKER_ROLE_CHANGED) acts only on a
masterEpoch strictly greater than the one this broker last acted on; changes run one at a time. The role change itself
is the broker object's (``roles``: ``become_master(epoch, members, set_epoch)`` / ``become_slave(master_id,
master_addr, epoch)``, both awaitable). Until the first registration succeeds the broker is fenced: its store refuses
writes and it is not registered with the name servers (the broker object starts the registrar on the first role).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from typing import Any

from broker.log_limit import RateLimitedLog
from broker.replicas.controller_link import ControllerError, ControllerLink
from broker.replicas.identity import (
    BrokerIdentity,
    IdentityError,
    delete_temp,
    load_identity,
    load_temp,
    save_identity,
    save_temp,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    BrokerReplicasInfo,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    ReplicasInfo,
    SyncStateSet,
    ElectMasterResponseBody,
)

log = logging.getLogger(__name__)
_limited = RateLimitedLog(log, interval_s=30.0)

__all__ = ["ReplicasManager"]

REGISTER_RETRY_S = 5.0


class ReplicasManager:
    """``config``: BrokerConfig; ``roles``: the broker object's role changes; ``offsets()``: (epoch, maxOffset,
    confirmOffset) for heartbeats."""

    def __init__(self, config: Any, roles: Any, offsets: Any, *, ssl_context=None) -> None:
        self.config = config
        self.roles = roles
        self.offsets = offsets
        self.link = ControllerLink(config.controller_addrs, on_request=self.on_controller_request,
                                   max_frame_size=config.frame_max_length, ssl_context=ssl_context,
                                   credentials=(config.access_key, config.secret_key)
                                   if config.access_key and config.secret_key else None)
        self.broker_id = -1  # the controller id, once known
        self.master_epoch = 0  # the epoch this broker last acted on
        self.master_id: int | None = None
        self.master_addr: str | None = None
        self.sync_state_set: set[int] = set()
        self.sync_state_set_epoch = 0
        self.registered = False
        self.identity_problem: str | None = None
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task] = []
        self._pending: set[asyncio.Task] = set()

    @property
    def is_master(self) -> bool:
        return self.registered and self.master_id == self.broker_id and self.broker_id > 0

    # ---- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run(), name="controller-mode")]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks + list(self._pending), []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.link.close()

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._pending.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._pending.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, (ControllerError, OSError, ConnectionError, asyncio.TimeoutError)):
            _limited.info(("task", task.get_name()), "controller mode: %s: %s (the role sync tries again)",
                          task.get_name(), exc)
        elif exc is not None:
            log.error("controller mode: %s failed", task.get_name(), exc_info=exc)

    async def _run(self) -> None:
        while not self.registered:
            try:
                if await self._register():
                    break
            except ControllerError as exc:
                _limited.warning("register", "controller mode: registration failed: %s (retrying every %.0f s; "
                                 "the broker stays fenced)", exc, REGISTER_RETRY_S)
            await asyncio.sleep(REGISTER_RETRY_S)
        cfg = self.config
        loop = asyncio.get_running_loop()
        self._tasks += [
            loop.create_task(self._every(cfg.broker_heartbeat_interval, 0, self.send_heartbeat), name="ctl-heartbeat"),
            loop.create_task(self._every(cfg.sync_broker_metadata_period, 3000, self.sync_role), name="ctl-role-sync"),
            loop.create_task(self._every(cfg.sync_controller_metadata_period, cfg.sync_controller_metadata_period,
                                         self.link.find_leader), name="ctl-leader"),
            loop.create_task(self._every(cfg.check_sync_state_set_period, 3000, self.check_sync_state_set),
                             name="ctl-sync-state-set"),
        ]

    @staticmethod
    async def _every(period_ms: int, first_ms: int, job) -> None:
        await asyncio.sleep(first_ms / 1000)
        while True:
            try:
                await job()
            except ControllerError as exc:
                _limited.info(("job", job.__name__), "controller mode: %s: %s", job.__name__, exc)
            except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
                _limited.info(("job", job.__name__), "controller mode: %s: %s", job.__name__, exc)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller mode: %s failed", job.__name__)
            await asyncio.sleep(period_ms / 1000)

    # ---- registration (§3) --------------------------------------------------------------------------------------
    async def _get_id(self) -> int | None:
        cfg = self.config
        path = cfg.broker_identity_path
        try:
            identity = load_identity(path, cfg.broker_cluster_name, cfg.broker_name)
            temp = None if identity is not None else load_temp(path, cfg.broker_cluster_name, cfg.broker_name)
        except IdentityError as exc:
            if str(exc) != self.identity_problem:
                self.identity_problem = str(exc)
                log.error("controller mode: %s; the broker stays fenced", exc)
            return None
        if identity is not None:
            return identity.broker_id
        if temp is None:
            response = await self.link.invoke_leader(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, GetNextBrokerIdRequestHeader(
                cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name).encode())
            if response.code != ResponseCode.SUCCESS:
                raise ControllerError(f"GET_NEXT_BROKER_ID: code {response.code} {response.remark or ''}")
            next_id = GetNextBrokerIdResponseHeader.decode(response.ext_fields).next_broker_id
            temp = BrokerIdentity(cfg.broker_cluster_name, cfg.broker_name, int(next_id),
                                  f"{cfg.broker_addr};{int(time.time() * 1000)}")
            save_temp(path, temp)
        response = await self.link.invoke_leader(RequestCode.CONTROLLER_APPLY_BROKER_ID, ApplyBrokerIdRequestHeader(
            cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name, applied_broker_id=temp.broker_id,
            register_check_code=temp.check_code).encode())
        if response.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID:
            log.info("controller mode: broker id %d was taken meanwhile; asking for another", temp.broker_id)
            delete_temp(path)
            return None
        if response.code != ResponseCode.SUCCESS:
            raise ControllerError(f"APPLY_BROKER_ID: code {response.code} {response.remark or ''}")
        save_identity(path, temp)
        delete_temp(path)
        log.info("controller mode: this broker is %s/%s id %d (saved in %s)", cfg.broker_cluster_name,
                 cfg.broker_name, temp.broker_id, path)
        return temp.broker_id

    async def _register(self) -> bool:
        cfg = self.config
        broker_id = None
        for _ in range(5):
            broker_id = await self._get_id()
            if broker_id is not None or self.identity_problem:
                break
            await asyncio.sleep(random.random())
        if broker_id is None:
            return False
        self.broker_id = broker_id
        response = await self.link.invoke_leader(RequestCode.CONTROLLER_REGISTER_BROKER,
                                                 RegisterBrokerToControllerRequestHeader(
                                                     cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name,
                                                     broker_id=broker_id, broker_address=cfg.broker_addr,
                                                     invoke_time=int(time.time() * 1000)).encode())
        if response.code != ResponseCode.SUCCESS:
            raise ControllerError(f"REGISTER_BROKER: code {response.code} {response.remark or ''}")
        header = RegisterBrokerToControllerResponseHeader.decode(response.ext_fields)
        sync_set = SyncStateSet.decode(response.body) if response.body else None
        self.registered = True
        log.info("controller mode: registered as %s id %d with controller %s", cfg.broker_name, broker_id,
                 self.link.leader)
        if header.master_broker_id is not None and header.master_broker_id > 0 and header.master_epoch:
            await self.apply_role(header.master_broker_id, header.master_address, header.master_epoch,
                                  sync_set.sync_state_set if sync_set else None,
                                  header.sync_state_set_epoch or 0)
        await self.send_heartbeat()
        if self.master_id is None:
            await self.elect()
        return True

    # ---- periodic jobs (§4) -------------------------------------------------------------------------------------
    async def send_heartbeat(self) -> None:
        cfg = self.config
        epoch, max_offset, confirm = self.offsets()
        header = BrokerHeartbeatRequestHeader(
            cluster_name=cfg.broker_cluster_name, broker_addr=cfg.broker_addr, broker_name=cfg.broker_name,
            broker_id=self.broker_id, epoch=epoch, max_offset=max_offset, confirm_offset=confirm,
            heartbeat_timeout_mills=cfg.controller_heart_beat_timeout_mills,
            election_priority=cfg.broker_election_priority).encode()
        await self.link.oneway_all(RequestCode.BROKER_HEARTBEAT, header)

    async def sync_role(self) -> None:
        response = await self.link.invoke_leader(RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequestHeader(
            broker_name=self.config.broker_name).encode())
        if response.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            self.registered = False
            await self._register()
            return
        if response.code != ResponseCode.SUCCESS:
            raise ControllerError(f"GET_REPLICA_INFO: code {response.code} {response.remark or ''}")
        header = GetReplicaInfoResponseHeader.decode(response.ext_fields)
        sync_set = SyncStateSet.decode(response.body) if response.body else SyncStateSet()
        epoch = header.master_epoch or 0
        if epoch > self.master_epoch:
            if header.master_broker_id is not None and header.master_broker_id > 0:
                await self.apply_role(header.master_broker_id, header.master_address, epoch, sync_set.sync_state_set,
                                      sync_set.sync_state_set_epoch)
            else:
                await self.elect()
        elif epoch == self.master_epoch and self.is_master and sync_set.sync_state_set_epoch > self.sync_state_set_epoch:
            self._adopt_set(sync_set.sync_state_set, sync_set.sync_state_set_epoch)

    async def elect(self) -> None:
        """Ask for an election with this broker as candidate (no master known); 2011 (master still exists) is
        followed like a success."""
        cfg = self.config
        if cfg.async_learner:
            return
        response = await self.link.invoke_leader(RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(
            cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name, broker_id=self.broker_id,
            designate_elect=False, invoke_time=int(time.time() * 1000)).encode())
        if response.code not in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
            _limited.info("elect", "controller mode: election not possible now: code %d %s", response.code,
                          response.remark or "")
            return
        header = ElectMasterResponseHeader.decode(response.ext_fields)
        body = ElectMasterResponseBody.decode(response.body) if response.body else ElectMasterResponseBody()
        if header.master_broker_id is not None and header.master_broker_id > 0:
            await self.apply_role(header.master_broker_id, header.master_address, header.master_epoch or 0,
                                  body.sync_state_set, header.sync_state_set_epoch or 0)

    async def check_sync_state_set(self) -> None:
        """Master only: propose a shrunk set (members behind or gone)."""
        ha = getattr(self.roles, "epoch_master", None)
        if not self.is_master or ha is None or ha.pending_set is not None:
            return
        shrunk = ha.check_sync_state_set()
        if shrunk is not None:
            ha.pending_set = shrunk
            await self.alter_sync_state_set(shrunk)

    def propose_sync_state_set(self, members: set[int]) -> None:
        """The HA master's callback: a grown (or at once shrunk) set, proposed in the background."""
        self._spawn(self.alter_sync_state_set(members), "ctl-alter-sync-state-set")

    async def alter_sync_state_set(self, members: set[int]) -> None:
        ha = getattr(self.roles, "epoch_master", None)
        try:
            response = await self.link.invoke_leader(
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                AlterSyncStateSetRequestHeader(broker_name=self.config.broker_name, master_broker_id=self.broker_id,
                                               master_epoch=self.master_epoch,
                                               invoke_time=int(time.time() * 1000)).encode(),
                SyncStateSet(set(members), self.sync_state_set_epoch).encode())
        except ControllerError as exc:
            if ha is not None:
                ha.proposal_failed()
            _limited.info("alter", "controller mode: SyncStateSet %s not proposed: %s", sorted(members), exc)
            return
        if response.code != ResponseCode.SUCCESS:
            if ha is not None:
                ha.proposal_failed()
            _limited.info("alter", "controller mode: SyncStateSet %s refused: code %d %s", sorted(members),
                          response.code, response.remark or "")
            return
        header = AlterSyncStateSetResponseHeader.decode(response.ext_fields)
        new = SyncStateSet.decode(response.body) if response.body else SyncStateSet(set(members), 0)
        epoch = header.new_sync_state_set_epoch or new.sync_state_set_epoch
        self._adopt_set(new.sync_state_set or set(members), epoch)

    def _adopt_set(self, members: set[int], epoch: int) -> None:
        if members != self.sync_state_set:
            log.info("controller mode: SyncStateSet is now %s (epoch %d)", sorted(members), epoch)
        self.sync_state_set, self.sync_state_set_epoch = set(members), epoch
        ha = getattr(self.roles, "epoch_master", None)
        if ha is not None:
            ha.set_sync_state_set(self.sync_state_set, epoch)

    # ---- what the web console shows (issue 28) ------------------------------------------------------------------
    async def group_state(self) -> ReplicasInfo | None:
        """This group as the active controller knows it (CONTROLLER_GET_SYNC_STATE_DATA, 1006): replicas with
        address, alive and in/not in sync, master, masterEpoch, syncStateSetEpoch; None when it knows no such group.
        ControllerError when no controller answers."""
        body = json.dumps([self.config.broker_name]).encode()
        response = await self.link.invoke_leader(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, body)
        if response.code != ResponseCode.SUCCESS:
            raise ControllerError(f"GET_SYNC_STATE_DATA: code {response.code} {response.remark or ''}")
        table = BrokerReplicasInfo.decode(response.body).replicas_info_table if response.body else {}
        return table.get(self.config.broker_name)

    def local_state(self) -> dict[str, Any]:
        """What this broker itself acted on: its controller id, registration, the master and epochs it follows."""
        return {"controllerId": self.broker_id if self.broker_id > 0 else None, "registered": self.registered,
                "activeController": self.link.leader, "controllerAddrs": list(self.link.addrs),
                "actedMasterEpoch": self.master_epoch, "masterBrokerId": self.master_id,
                "masterAddress": self.master_addr, "syncStateSet": sorted(self.sync_state_set),
                "syncStateSetEpoch": self.sync_state_set_epoch, "identityProblem": self.identity_problem}

    # ---- role changes (§6) --------------------------------------------------------------------------------------
    async def apply_role(self, master_id: int, master_addr: str | None, epoch: int, members: set[int] | None,
                         set_epoch: int) -> None:
        async with self._lock:
            if epoch <= self.master_epoch:
                return  # stale: only a strictly higher masterEpoch changes anything
            if master_id == self.broker_id:
                self.sync_state_set, self.sync_state_set_epoch = set(members or {master_id}), set_epoch
                await self.roles.become_master(epoch, self.sync_state_set, set_epoch)
            else:
                await self.roles.become_slave(master_id, master_addr, epoch)
            self.master_epoch, self.master_id, self.master_addr = epoch, master_id, master_addr

    def on_controller_request(self, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.NOTIFY_BROKER_ROLE_CHANGED:
            self.on_role_changed(cmd)

    def on_role_hint(self) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED on the broker's own port, from anyone: not trusted as such (it could name any
        master), only a reason to ask the controller now (GET_REPLICA_INFO)."""
        if self.registered:
            self._spawn(self._sync_quietly(), "ctl-role-sync-now")

    async def _sync_quietly(self) -> None:
        try:
            await self.sync_role()
        except (ControllerError, OSError, ConnectionError, asyncio.TimeoutError) as exc:
            _limited.info("hint", "controller mode: role sync after a notification failed: %s", exc)

    def on_role_changed(self, cmd: RemotingCommand) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED (1008) from a controller on this broker's own connection to it: follow it in
        the background (a newer one wins)."""
        header = NotifyBrokerRoleChangedRequestHeader.decode(cmd.ext_fields)
        body = SyncStateSet.decode(cmd.body) if cmd.body else SyncStateSet()
        if not self.registered or header.master_epoch is None or header.master_epoch <= self.master_epoch:
            return
        if header.master_broker_id is None or header.master_broker_id <= 0:
            self._spawn(self.elect(), "ctl-elect")
            return
        self._spawn(self.apply_role(header.master_broker_id, header.master_address, header.master_epoch,
                                    body.sync_state_set, header.sync_state_set_epoch or body.sync_state_set_epoch),
                    "ctl-role-change")
