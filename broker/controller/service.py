"""The controller service: request handlers, heartbeats, failure detection and elections (controller.md §1-§5).

Built from its config and a backend; it does not know whether it runs alone (``mqcontroller``) or inside a name
server: whoever hosts it merges ``handlers()`` into its remoting server. State-changing requests go through one
lock (the reference's single event queue): decide on the cached group (broker.controller.logic), commit the
event through the backend, answer. Only the active controller decides; the others answer 2007.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from broker.controller import logic
from broker.controller.backend import Backend, BackendError, ConflictError, NotLeaderError
from broker.controller.config import ControllerConfig
from broker.controller.liveness import DEFAULT_HEARTBEAT_TIMEOUT_MS, BrokerLive, LivenessTable
from broker.controller.state import GroupState, apply_event
from broker.log_limit import RateLimitedLog
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import (AlterSyncStateSetRequestHeader, ApplyBrokerIdRequestHeader,
                                 BrokerHeartbeatRequestHeader, CleanControllerBrokerDataRequestHeader,
                                 ElectMasterRequestHeader, GetMetaDataResponseHeader, GetNextBrokerIdRequestHeader,
                                 GetReplicaInfoRequestHeader, NotifyBrokerRoleChangedRequestHeader,
                                 RegisterBrokerToControllerRequestHeader, SyncStateSet)
from protocol.jsonlenient import loads_lenient

__all__ = ["Controller", "CONTROLLER_CODES"]

log = logging.getLogger("broker.controller")
_limited = RateLimitedLog(log)

# every request code a controller answers (the name server's ACL treats them as admin codes)
CONTROLLER_CODES = frozenset({
    RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, RequestCode.CONTROLLER_ELECT_MASTER,
    RequestCode.CONTROLLER_REGISTER_BROKER, RequestCode.CONTROLLER_GET_REPLICA_INFO,
    RequestCode.CONTROLLER_GET_METADATA_INFO, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
    RequestCode.CLEAN_BROKER_DATA, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, RequestCode.CONTROLLER_APPLY_BROKER_ID,
})

NOT_LEADER_REMARK = "The controller is not in leader state"
COMMIT_ATTEMPTS = 5
ELECT_RETRY_SLEEP_S = 3.0
FIRST_SCAN_DELAY_S = 2.0

Handler = Callable[[Any, RemotingCommand], Any]


class Controller:
    """One controller (active or standby) over a backend."""

    def __init__(self, config: ControllerConfig, backend: Backend, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.backend = backend
        self.clock = clock
        self.live = LivenessTable()
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task] = []
        self._electing: set[str] = set()
        self._background: set[asyncio.Task] = set()
        self._watched_channels: set[int] = set()
        backend.on_leadership = self._leadership_changed

    # ---- lifecycle -----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.backend.start()
        self._tasks = [
            asyncio.create_task(self._every(self.config.scan_not_active_broker_interval / 1000.0,
                                            self.scan_not_active_brokers), name="controller-heartbeat-scan"),
            asyncio.create_task(self._every(self.config.scan_inactive_master_interval / 1000.0,
                                            self.scan_inactive_masters), name="controller-master-scan"),
        ]

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, []
        tasks += list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.backend.close()

    def _leadership_changed(self, leader: bool) -> None:
        log.info("controller %s is %s", self.backend.self_address,
                 "now the active controller" if leader else "no longer the active controller")

    async def _every(self, interval_s: float, job: Callable[[], Awaitable[None]]) -> None:
        await asyncio.sleep(min(FIRST_SCAN_DELAY_S, interval_s))
        while True:
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                _limited.error(("scan", job.__name__), "controller: %s failed", job.__name__, exc_info=True)
            await asyncio.sleep(interval_s)

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---- handlers ------------------------------------------------------------------------------------------------
    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.BROKER_HEARTBEAT: self.on_heartbeat,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self.on_alter_sync_state_set,
            RequestCode.CONTROLLER_ELECT_MASTER: self.on_elect_master,
            RequestCode.CONTROLLER_REGISTER_BROKER: self.on_register_broker,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self.on_get_replica_info,
            RequestCode.CONTROLLER_GET_METADATA_INFO: self.on_get_metadata,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self.on_get_sync_state_data,
            RequestCode.CLEAN_BROKER_DATA: self.on_clean_broker_data,
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: self.on_get_next_broker_id,
            RequestCode.CONTROLLER_APPLY_BROKER_ID: self.on_apply_broker_id,
        }

    @staticmethod
    def _answer(cmd: RemotingCommand, decision: logic.Decision) -> RemotingCommand:
        return cmd.make_response(decision.code, decision.remark, decision.ext_fields(), decision.body)

    @staticmethod
    def _not_leader(cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(ResponseCode.CONTROLLER_NOT_LEADER, NOT_LEADER_REMARK)

    async def _commit(self, name: str, decide: Callable[[GroupState | None], logic.Decision],
                      after: Callable[[logic.Decision], None] | None = None) -> logic.Decision:
        """Decide on the current group and store the event, one request at a time; shielded, so a closing
        connection cannot leave the cache and the store apart (nor skip ``after``, e.g. the notification of a
        new master)."""
        return await asyncio.shield(self._commit_and_follow(name, decide, after))

    async def _commit_and_follow(self, name: str, decide: Callable[[GroupState | None], logic.Decision],
                                 after: Callable[[logic.Decision], None] | None) -> logic.Decision:
        decision = await self._commit_inner(name, decide)
        if after is not None:
            after(decision)
        return decision

    async def _commit_inner(self, name: str, decide: Callable[[GroupState | None], logic.Decision]) -> logic.Decision:
        async with self._lock:
            for _ in range(COMMIT_ATTEMPTS):
                if not self.backend.is_leader:
                    return logic.Decision(ResponseCode.CONTROLLER_NOT_LEADER, NOT_LEADER_REMARK)
                try:
                    await self.backend.prepare(name)
                except BackendError as exc:
                    return logic.Decision(ResponseCode.SYSTEM_ERROR, f"cannot read the group: {exc}")
                state = self.backend.groups.get(name)
                decision = decide(state)
                if decision.event is None:
                    return decision
                try:
                    await self.backend.commit(name, state, apply_event(state, decision.event))
                except ConflictError:
                    continue
                except NotLeaderError:
                    return logic.Decision(ResponseCode.CONTROLLER_NOT_LEADER, NOT_LEADER_REMARK)
                except BackendError as exc:
                    _limited.error(("commit", type(exc).__name__), "controller: cannot store a change of %s: %s",
                                   name, exc)
                    return logic.Decision(ResponseCode.SYSTEM_ERROR, f"cannot store the change: {exc}")
                return decision
            return logic.Decision(ResponseCode.SYSTEM_ERROR, f"group {name} kept changing; try again")

    # 904 -------------------------------------------------------------------------------------------------------
    def on_heartbeat(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        header = BrokerHeartbeatRequestHeader.decode(cmd.ext_fields)
        if header.broker_id is None:
            return cmd.make_response(ResponseCode.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId")
        self.live.heartbeat(self.clock(), header.cluster_name, header.broker_name, header.broker_id,
                            header.broker_addr, channel, header.epoch, header.max_offset, header.confirm_offset,
                            header.heartbeat_timeout_mills, header.election_priority)
        self._watch(channel)
        return cmd.make_response(ResponseCode.SUCCESS, "Heart beat success")

    def _watch(self, channel: Any) -> None:
        """A broker is inactive as soon as the connection its heartbeats use closes (kill -9)."""
        if channel is None or not hasattr(channel, "add_close_listener") or id(channel) in self._watched_channels:
            return
        self._watched_channels.add(id(channel))

        def closed(ch: Any) -> None:
            self._watched_channels.discard(id(ch))
            for entry in self.live.drop_channel(ch):
                self._broker_inactive(entry, "its connection closed")

        channel.add_close_listener(closed)

    # 1012 / 1013 -----------------------------------------------------------------------------------------------
    async def on_get_next_broker_id(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = GetNextBrokerIdRequestHeader.decode(cmd.ext_fields)
        if not self.backend.is_leader:
            return self._not_leader(cmd)
        return self._answer(cmd, logic.get_next_broker_id(self.backend.groups.get(h.broker_name), h.cluster_name,
                                                          h.broker_name))

    async def on_apply_broker_id(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = ApplyBrokerIdRequestHeader.decode(cmd.ext_fields)
        decision = await self._commit(h.broker_name, lambda s: logic.apply_broker_id(
            s, h.cluster_name, h.broker_name, h.applied_broker_id, h.register_check_code))
        return self._answer(cmd, decision)

    # 1003 / 1004 -----------------------------------------------------------------------------------------------
    async def on_register_broker(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerToControllerRequestHeader.decode(cmd.ext_fields)
        decision = await self._commit(h.broker_name, lambda s: logic.register_broker(
            s, h.cluster_name, h.broker_name, h.broker_id, h.broker_address, self.live))
        return self._answer(cmd, decision)

    async def on_get_replica_info(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = GetReplicaInfoRequestHeader.decode(cmd.ext_fields)
        if not self.backend.is_leader:
            return self._not_leader(cmd)
        return self._answer(cmd, logic.get_replica_info(self.backend.groups.get(h.broker_name), h.broker_name))

    # 1002 ------------------------------------------------------------------------------------------------------
    async def on_elect_master(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = ElectMasterRequestHeader.decode(cmd.ext_fields)
        decision = await self._commit(h.broker_name, lambda s: logic.elect_master(
            s, h.broker_name, h.broker_id, h.designate_elect, self.live, self.config.enable_elect_unclean_master),
            lambda d: self._after_election(h.broker_name, d))
        return self._answer(cmd, decision)

    def _after_election(self, name: str, decision: logic.Decision) -> None:
        if decision.code == ResponseCode.SUCCESS and decision.new_master:
            h = decision.header
            log.info("controller: broker %s elected master of %s (masterEpoch %s)", h.master_broker_id, name,
                     h.master_epoch)
            if self.config.notify_broker_role_changed:
                self.notify_role_changed(name)
        elif decision.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE:
            log.warning("controller: the master of %s is gone and no replica can take over", name)

    def notify_role_changed(self, name: str) -> int:
        """NOTIFY_BROKER_ROLE_CHANGED (1008), one-way, to every alive member of the group; returns how many."""
        state = self.backend.groups.get(name)
        if state is None:
            return 0
        header = NotifyBrokerRoleChangedRequestHeader(
            master_address=state.master_address, master_epoch=state.master_epoch,
            sync_state_set_epoch=state.sync_state_set_epoch, master_broker_id=state.master_broker_id).encode()
        body = SyncStateSet(set(state.sync_state_set), state.sync_state_set_epoch).encode()
        sent = 0
        for entry in self.live.members(state.cluster_name, name):
            if entry.broker_id not in state.brokers:
                continue
            cmd = RemotingCommand.request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header, body, opaque=0,
                                          oneway=True)
            send = getattr(entry.channel, "send_oneway", None)
            if send is not None and send(cmd):
                sent += 1
        return sent

    # 1001 ------------------------------------------------------------------------------------------------------
    async def on_alter_sync_state_set(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = AlterSyncStateSetRequestHeader.decode(cmd.ext_fields)
        try:
            proposed = SyncStateSet.decode(cmd.body or b"{}")
        except ValueError as exc:
            return cmd.make_response(ResponseCode.CONTROLLER_INVALID_REQUEST, f"bad SyncStateSet body: {exc}")
        decision = await self._commit(h.broker_name, lambda s: logic.alter_sync_state_set(
            s, h.broker_name, h.master_broker_id, h.master_epoch, proposed, self.live))
        return self._answer(cmd, decision)

    # 1005 / 1006 -----------------------------------------------------------------------------------------------
    def on_get_metadata(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        backend = self.backend
        leader = backend.leader_address
        header = GetMetaDataResponseHeader(
            group=backend.group_name,
            controller_leader_id=backend.controller_id(leader) if leader else None,
            controller_leader_address=leader, is_leader=backend.is_leader,
            peers="".join(f"{backend.controller_id(p)}:{p};" for p in backend.peers()))
        return cmd.make_response(ResponseCode.SUCCESS, None, header.encode())

    async def on_get_sync_state_data(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        if not self.backend.is_leader:
            return self._not_leader(cmd)
        try:
            names = loads_lenient(cmd.body) if cmd.body else []
        except ValueError as exc:
            return cmd.make_response(ResponseCode.CONTROLLER_INVALID_REQUEST, f"bad broker name list: {exc}")
        if not isinstance(names, list):
            return cmd.make_response(ResponseCode.CONTROLLER_INVALID_REQUEST, "expected a JSON list of broker names")
        return self._answer(cmd, logic.get_sync_state_data(self.backend.groups, [str(n) for n in names], self.live))

    # 1011 ------------------------------------------------------------------------------------------------------
    async def on_clean_broker_data(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = CleanControllerBrokerDataRequestHeader.decode(cmd.ext_fields)
        decision = await self._commit(h.broker_name, lambda s: logic.clean_broker_data(
            s, h.cluster_name or "", h.broker_name, h.broker_controller_ids_to_clean, h.is_clean_living_broker,
            self.live))
        if decision.code == ResponseCode.SUCCESS:
            log.info("controller: broker data of %s cleaned (ids %s)", h.broker_name,
                     h.broker_controller_ids_to_clean or "all")
        return self._answer(cmd, decision)

    # ---- failure detection (§5) ------------------------------------------------------------------------------------
    def _grace_over(self) -> bool:
        """A controller that just became active waits one heartbeat timeout before declaring masters dead: its
        table may not have heard every broker yet (a restart, or heartbeats racing the take-over)."""
        since = self.backend.leader_since
        if since is None:
            return False
        timeouts = [e.timeout_ms for e in self.live]
        wait_ms = max(timeouts) if timeouts else DEFAULT_HEARTBEAT_TIMEOUT_MS
        return self.clock() - since >= wait_ms / 1000.0

    async def scan_not_active_brokers(self) -> None:
        for entry in self.live.expire(self.clock()):
            close = getattr(entry.channel, "close", None)
            if close is not None and not any(e.channel is entry.channel for e in self.live):
                close()
            self._broker_inactive(entry, "its heartbeats stopped")

    def _broker_inactive(self, entry: BrokerLive, why: str) -> None:
        log.info("controller: broker %s/%s id %s (%s) is inactive: %s", entry.cluster_name, entry.broker_name,
                 entry.broker_id, entry.address, why)
        if not self.backend.is_leader or not self._grace_over():
            return
        state = self.backend.groups.get(entry.broker_name)
        if state is not None and state.master_broker_id == entry.broker_id:
            self.trigger_election(entry.broker_name)

    async def scan_inactive_masters(self) -> None:
        """Re-elect in groups whose master is dead while some member is alive."""
        if not self.backend.is_leader or not self._grace_over():
            return
        for name, state in list(self.backend.groups.items()):
            master = state.master_broker_id
            if master is None or self.live.is_alive(state.cluster_name, name, master):
                continue
            if any(self.live.is_alive(state.cluster_name, name, i) for i in state.brokers):
                self.trigger_election(name)

    def trigger_election(self, name: str) -> None:
        if name in self._electing:
            return
        self._electing.add(name)
        self._spawn(self._controller_election(name), f"controller-elect-{name}")

    async def _controller_election(self, name: str) -> None:
        try:
            for attempt in range(self.config.elect_master_max_retry_count):
                decision = await self._commit(name, lambda s: logic.elect_master(
                    s, name, -1, False, self.live, self.config.enable_elect_unclean_master),
                    lambda d: self._after_election(name, d))
                if decision.code != ResponseCode.SYSTEM_ERROR:
                    return
                await asyncio.sleep(ELECT_RETRY_SLEEP_S)
        finally:
            self._electing.discard(name)
