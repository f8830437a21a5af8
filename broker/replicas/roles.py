"""Role changes of a controller-mode broker at run time (controller.md §6), without restarting the process.

Becoming master: the HA client and metadata copies stop, a partial record at the log's tail is cut, the epoch file
gets (newEpoch, maxPhyOffset), the HA listener (epoch handshake, SyncStateSet) starts, the store takes writes, the
master-only services (delayed delivery, timer, transaction checks, POP) run, the route id is 0 and the topic
DataVersion's stateVersion is the masterEpoch; the name servers hear of it at once.
Becoming slave: the reverse, the store refusing writes first (nothing is acknowledged once this broker knows it is
no longer master); the HA client replicates from the new master (its HA address: the name server's answer
for that master, else the master's port + 1) and metadata is copied from it; the route id is the controller id.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from broker.ha import HASlots
from broker.ha.epoch_master import EpochHAMaster
from broker.ha.epoch_slave import EpochHASlave
from broker.store.epoch_file import EpochFile
from broker.store.truncate import truncate_store
from broker.tls import outbound_context, outbound_tls_enabled

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.ha.metadata_sync import MetadataSync
    from broker.managers.consumer_offset import ConsumerOffsetManager
    from broker.managers.topic_config import TopicConfigManager
    from broker.namesrv.registrar import BrokerRegistrar
    from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

__all__ = ["BrokerRoles", "RoleParts"]


class Switchable(Protocol):
    """The master-only services (broker/master_services.py), as a role change starts and stops them."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


class ControllerSide(Protocol):
    """The ReplicasManager, as the role changes use it: the controller id it was given, and where the HA master
    proposes a larger SyncStateSet."""

    broker_id: int

    def propose_sync_state_set(self, members: set[int]) -> Any: ...


@dataclass(frozen=True, slots=True)
class RoleParts:
    """What a role change touches, never the Broker: ``config`` (its brokerRole and brokerId are changed here),
    the store, the consumer offsets (a slave's commits go to its master), the topic registry (its DataVersion's
    stateVersion is the masterEpoch), the metadata copies of a slave, ``ha`` (the broker's HA listener and client,
    swapped here), the master-only services, ``refresh_role`` (the send core reads the role again), ``wake`` (the
    new-messages notification of held pulls and POP receives), ``registrar()`` (the name-server registrar once the
    broker built it), ``spawn`` (a tracked background task of the broker), and how the HA listener authenticates
    (``admin_secret``) and encrypts (``ha_ssl_context``)."""

    config: "BrokerConfig"
    store: "MessageStore"
    offsets: "ConsumerOffsetManager"
    topics: "TopicConfigManager"
    metadata_sync: "MetadataSync"
    ha: HASlots
    master_services: Switchable
    refresh_role: Callable[[], None]
    wake: Callable[[str, int, int, Any], None]
    registrar: Callable[[], "BrokerRegistrar | None"]
    spawn: Callable[[Coroutine[Any, Any, Any], str], None]
    admin_secret: Callable[[str], str | None] | None
    ha_ssl_context: ssl.SSLContext | None


def _guess_ha_addr(master_addr: str) -> str:
    host, _, port = master_addr.rpartition(":")
    return f"{host}:{int(port) + 1}"


class BrokerRoles:
    """Owned by the broker object in controller mode, built from ``parts`` (RoleParts); the ReplicasManager that
    drives it is attached once built (``attach``)."""

    def __init__(self, parts: RoleParts) -> None:
        self.parts = parts
        cfg = parts.config
        self.epoch_file = EpochFile(cfg.epoch_file_path)
        self.manager: ControllerSide | None = None
        self.epoch_master: EpochHAMaster | None = None
        self.master_addr: str | None = None
        self.unreconcilable: str | None = None
        self._held_arrivals: dict[tuple[str, int], int] = {}  # queues that got records consumers cannot see yet
        parts.store.add_arrival_listener(self._on_arrival)
        credentials = (cfg.access_key, cfg.secret_key) if cfg.acl_enable and cfg.access_key else None
        self.epoch_slave = EpochHASlave(parts.store, None, epoch_file=self.epoch_file, broker_id=-1,
                                        async_learner=cfg.async_learner, on_unreconcilable=self._on_unreconcilable,
                                        on_confirm=self._on_slave_confirm,
                                        credentials=credentials,
                                        ssl_context=outbound_context(cfg) if outbound_tls_enabled(cfg) else None)

    def attach(self, manager: ControllerSide) -> None:
        """The ReplicasManager follows the controller and calls become_master / become_slave here, and a role change
        needs it back (the controller id it was given; where the HA master proposes SyncStateSet changes). It is
        built from this object (its heartbeats read ``offsets``), so the link is a cycle: set once, after both
        exist. The ReplicasProcessor reaches it here too (NOTIFY_BROKER_ROLE_CHANGED)."""
        self.manager = manager

    def load(self) -> None:
        os.makedirs(os.path.dirname(self.epoch_file.path) or ".", exist_ok=True)
        self.epoch_file.load()

    def offsets(self) -> tuple[int, int, int]:
        """(last epoch, max offset, confirm offset) for heartbeats."""
        store = self.parts.store
        max_offset = store.commit_log.max_offset
        if len(self.epoch_file.entries) > 1 and store.commit_log.mfq.files:
            self.epoch_file.truncate_below(store.commit_log.min_offset)  # old commit-log files were deleted
        if self.epoch_master is not None and self.parts.ha.master is self.epoch_master:
            confirm = self.epoch_master.confirm_offset()
        else:
            confirm = self.epoch_slave.confirm_offset if self.epoch_slave.confirm_offset >= 0 else max_offset
        return self.epoch_file.last_epoch, max_offset, confirm

    def local_state(self) -> dict[str, Any]:
        """This replica's own log for the web console: role, max/confirm offsets and its epochs (the epoch file, as
        GET_BROKER_EPOCH_CACHE gives it)."""
        epoch, max_offset, confirm = self.offsets()
        return {"role": self.parts.config.broker_role, "maxOffset": max_offset, "confirmOffset": confirm,
                "lastEpoch": epoch, "unreconcilable": self.unreconcilable,
                "epochs": [{"epoch": e, "startOffset": start, "endOffset": end}
                           for e, start, end in self.epoch_file.with_ends(max_offset)]}

    # ---- confirmOffset: what consumers may see (controller.md §7) ----------------------------------------------
    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, _tags: Any = None) -> None:
        if self.parts.store.visible_limit is not None:
            self._held_arrivals[(topic, queue_id)] = max_offset

    def _on_confirm(self, confirm: int) -> None:
        """The master's confirmOffset moved: with allAckInSyncStateSet and other set members, consumers see
        records up to it only (readUnCommitted: everything); held pulls of queues that got records meanwhile wake."""
        cfg = self.parts.config
        master = self.epoch_master
        limited = (cfg.all_ack_in_sync_state_set and not cfg.read_un_committed and master is not None
                   and len(master.sync_state_set) > 1)
        self.parts.store.visible_limit = confirm if limited else None
        self._wake_held()

    def _on_slave_confirm(self, confirm: int) -> None:
        """A slave shows its consumers what its master confirmed (readUnCommitted: everything)."""
        p = self.parts
        if p.ha.slave is not self.epoch_slave:
            return
        p.store.visible_limit = None if p.config.read_un_committed else confirm
        self._wake_held()

    def _wake_held(self) -> None:
        if self._held_arrivals:
            arrivals, self._held_arrivals = self._held_arrivals, {}
            wake = self.parts.wake
            for (topic, queue_id), max_offset in arrivals.items():
                wake(topic, queue_id, max_offset, None)  # held pulls and POP receives alike

    def _on_unreconcilable(self, reason: str | None) -> None:
        """A replica whose history cannot be reconciled is taken out of the routes."""
        self.unreconcilable = reason
        registrar = self.parts.registrar()
        if reason is not None:
            log.error("this replica cannot be reconciled with its master: %s; it is unregistered from the name "
                      "servers and copies nothing until its store is wiped", reason)
            if registrar is not None and not registrar.closed:
                self.parts.spawn(registrar.close(unregister=True), "unregister-unreconcilable")

    # ---- the two changes ---------------------------------------------------------------------------------------
    async def become_master(self, epoch: int, members: set[int], set_epoch: int) -> None:
        p = self.parts
        cfg = p.config
        store = p.store
        ha = p.ha
        manager = self.manager
        was_master = ha.master is self.epoch_master and self.epoch_master is not None
        if was_master:
            self.epoch_file.append(epoch, store.commit_log.max_offset)
        else:
            await self.epoch_slave.stop()
            ha.slave = None
            await p.metadata_sync.stop()
            dispatched = store.replica_dispatched
            if dispatched is not None and dispatched < store.commit_log.max_offset:
                cut = truncate_store(store, dispatched)  # a record the old master never finished sending
                log.info("cut a partial record at the log's tail: %d bytes from %d", cut.bytes_cut, cut.to_offset)
            store.replica_dispatched = None
            last = self.epoch_file.last()
            if last is not None and epoch < last.epoch:
                log.warning("controller mode: told to be master in epoch %d, but the epoch file is at %d: ignored",
                            epoch, last.epoch)
                return
            if last is None or last.epoch != epoch:  # the same epoch again (a quick restart): its start stays
                self.epoch_file.set_last_epoch(epoch, store.commit_log.max_offset)
            if self.epoch_master is None:
                self.epoch_master = EpochHAMaster(
                    store.commit_log, cfg.listen_host, cfg.ha_port, epoch_file=self.epoch_file,
                    local_id=manager.broker_id, max_not_catchup_ms=cfg.ha_max_time_slave_not_catchup,
                    all_ack=cfg.all_ack_in_sync_state_set, on_expand=manager.propose_sync_state_set,
                    on_confirm=self._on_confirm,
                    max_connections=cfg.ha_max_connections,
                    admin_secret=p.admin_secret, ssl_context=p.ha_ssl_context)
                store.add_arrival_listener(self.epoch_master.on_append)
            await self.epoch_master.start()
            ha.master = self.epoch_master
        self.epoch_master.set_sync_state_set(members, set_epoch)
        cfg.broker_role = "SYNC_MASTER"
        cfg.broker_id = 0
        p.offsets.client_commits = None  # a master keeps no commits to hand over
        p.refresh_role()
        store.config.replica = False  # writes only once the HA master and the ack rule are in place
        await p.master_services.start()
        p.topics.data_version.state_version = epoch
        log.info("controller mode: MASTER of %s in epoch %d (SyncStateSet %s); epochs %s", cfg.broker_name, epoch,
                 sorted(members), [(e.epoch, e.start_offset) for e in self.epoch_file.entries])
        await self._register_now()

    async def become_slave(self, master_id: int, master_addr: str | None, epoch: int) -> None:
        p = self.parts
        cfg = p.config
        store = p.store
        ha = p.ha
        manager = self.manager
        # Fenced before the first await: a write taken while the HA master and the master services stop would be
        # acknowledged by nobody's ack rule (no HA master), in an epoch the new master never sees, and cut when this
        # broker rejoins as its slave -- an acknowledged message lost. Sends already waiting for acks fail there.
        store.config.replica = True
        cfg.broker_role = "SLAVE"
        cfg.broker_id = manager.broker_id
        p.refresh_role()
        if ha.master is not None:
            await ha.master.stop()
            ha.master = None
        await p.master_services.stop()
        store.replica_dispatched = None
        store.visible_limit = None
        if p.offsets.client_commits is None:  # commits made here go to the master (metadata_sync)
            p.offsets.client_commits = {}
        p.topics.data_version.state_version = epoch
        self.master_addr = master_addr
        slave = self.epoch_slave
        slave.broker_id = manager.broker_id
        ha.slave = slave
        if master_addr:
            slave.set_master(_guess_ha_addr(master_addr))
            slave.start()
            p.metadata_sync.learn_master(master_addr)
            p.metadata_sync.start()
        log.info("controller mode: SLAVE (id %d) of %s in epoch %d, master %s (id %d)", manager.broker_id,
                 cfg.broker_name, epoch, master_addr, master_id)
        await self._register_now()

    def learn_master(self, ha_addr: str | None, master_addr: str | None) -> None:
        """A registration answer names the master's HA address: use it when it is the controller's master."""
        if ha_addr and master_addr and master_addr == self.master_addr and self.parts.ha.slave is self.epoch_slave:
            self.epoch_slave.set_master(ha_addr)

    async def _register_now(self) -> None:
        registrar = self.parts.registrar()
        if registrar is None or self.unreconcilable:
            return
        if not registrar.running and not registrar.closed:
            await registrar.start()  # built with master_listener=self.learn_master
        else:
            registrar.request_register()

    async def stop(self) -> None:
        await self.epoch_slave.stop()
        if self.epoch_master is not None:
            await self.epoch_master.stop()
        await asyncio.sleep(0)
