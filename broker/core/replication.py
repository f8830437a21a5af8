"""What a stored message waits for before it is acknowledged on a replicating master (replication.md §4,
controller.md §8): the slaves' acknowledgements, and enough in-sync replicas to accept a write at all.

Built by the Broker with the settings, a getter of the current HA master (controller mode replaces it at run time) and
the commit log's end; used by the send service for every protocol."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.store.types import PutResult, PutStatus

__all__ = ["ReplicationWaiter"]


class ReplicationWaiter:
    """``config`` is read live (role and controller-mode keys change at run time); ``ha_master()`` the current HA
    master or None; ``log_end()`` the commit log's end offset."""

    def __init__(self, config: Any, ha_master: Callable[[], Any], log_end: Callable[[], int],
                 is_replica: Callable[[], bool] = lambda: False) -> None:
        self.config = config
        self.ha_master = ha_master
        self.log_end = log_end
        self.is_replica = is_replica  # the store refuses writes (this broker is, or is becoming, a slave)
        self.sync_master = False
        self.refresh_role()

    def refresh_role(self) -> None:
        """Read the role again (controller mode changes it at run time). A controller-mode master waits for acks
        only when allAckInSyncStateSet, inSyncReplicas > 1 or minInSyncReplicas > 1 ask for it (controller.md §8)."""
        cfg = self.config
        if cfg.enable_controller_mode:
            self.sync_master = cfg.broker_role != "SLAVE" and (
                cfg.all_ack_in_sync_state_set or cfg.in_sync_replicas > 1 or cfg.min_in_sync_replicas > 1)
        else:
            self.sync_master = cfg.broker_role == "SYNC_MASTER"

    @property
    def timeout_s(self) -> float:
        cfg = self.config
        return (cfg.slave_timeout if cfg.slave_timeout and cfg.slave_timeout > 0 else cfg.sync_flush_timeout) / 1000

    def in_sync_refusal(self) -> str | None:
        """Controller mode: fewer in-sync replicas than minInSyncReplicas -> the remark of the refusal (nothing is
        stored); None when a write may go ahead."""
        cfg = self.config
        ha = self.ha_master()
        if cfg.enable_controller_mode and cfg.min_in_sync_replicas > 1 and ha is not None \
                and ha.in_sync_count() < cfg.min_in_sync_replicas:
            return "in-sync replicas not enough"
        return None

    async def wait(self, result: PutResult) -> None:
        """SYNC_MASTER: a stored message is acknowledged once a slave has it; ``result.status`` says when not."""
        if result.status is not PutStatus.PUT_OK and result.status is not PutStatus.FLUSH_DISK_TIMEOUT:
            return
        if self.config.enable_controller_mode and self.is_replica():
            # stored as master, stepped down before its ack (a sync flush was awaited meanwhile): the new master may
            # not have it, so it is not acknowledged
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            return
        if not self.sync_master:
            return
        ha = self.ha_master()
        end = self.log_end()  # at or past this message's end: never acknowledged too early
        timeout_s = self.timeout_s
        cfg = self.config
        if cfg.enable_controller_mode:  # controller.md §8: no SLAVE_NOT_AVAILABLE in this mode
            if ha is None:
                return
            if cfg.all_ack_in_sync_state_set:
                ok = await ha.wait_for_in_sync(end, timeout_s)
            elif cfg.in_sync_replicas > 1:
                ok = await ha.wait_for_acks(end, cfg.in_sync_replicas - 1, timeout_s)
            else:
                ok = True
            if not ok:
                result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            return
        if ha is None or not ha.slave_available(end):
            result.status = PutStatus.SLAVE_NOT_AVAILABLE
        elif not await ha.wait_for_slave(end, timeout_s):
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
