"""The web console as the Broker builds it: its facts, views and sign-in throttle from the broker's settings and
read-only parts (never the Broker)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import logging

from broker.clients import tell_offset_reset
from broker.console.access import ConsoleError
from broker.console.replication import ReplicationView
from broker.console.server import ConsoleServer
from broker.console.throttle import SignInThrottle, ThrottlePolicy
from broker.console.views import BrokerFacts, ConsoleViews, ResetOffsets
from broker.core.offsets import OffsetService, ResetOffset
from broker.errors import ConfigError
from protocol.bodies import MessageQueue
from protocol.codes import ResponseCode

__all__ = ["build_console"]

log = logging.getLogger(__name__)


def reset_through_core(offsets: OffsetService, consumers: Any, broker_name: str) -> ResetOffsets:
    """The console's offset reset: the offsets core's ResetOffset (forced), then the group's online consumers told
    as a remoting INVOKE_BROKER_TO_RESET_OFFSET tells them; its table and how many consumers were told."""
    async def reset(group: str, topic: str, timestamp_ms: int, caller: str) -> tuple[dict[MessageQueue, int], int]:
        outcome = await offsets.reset(ResetOffset(group, topic, timestamp_ms, True, caller))
        result = outcome.value
        if result is None:
            raise ConsoleError(500 if outcome.code == ResponseCode.SYSTEM_ERROR else 400,
                               f"{outcome.remark} (code {outcome.code})")
        table, _body, told = tell_offset_reset(consumers, broker_name, result)
        log.info("offsets of group %s on topic %s reset to %s by %s (timestamp %d, %d consumer(s) told)",
                 group, topic, result.offsets, caller, timestamp_ms, told)
        return table, told
    return reset


def build_console(cfg: Any, port: int, view: Any, admin: Any, offsets: OffsetService, consumers: Any, resends: Any,
                  authorizer: Any, route_info: Callable[..., Any] | None, replication_parts: Any) -> ConsoleServer:
    """``view``: the broker's BrokerView; ``admin``: the core's AdminService (the console's admin actions);
    ``offsets``: the core's OffsetService (offset resets) and ``consumers`` (who to tell of one); ``resends``: the
    dead-letter resend log; ``route_info``: the embedded name server's routes (None without one);
    ``replication_parts``: ClassicParts or ControllerParts (broker/console/replication.py). A dashboardAllowedHosts
    entry the console cannot read is a ConfigError naming the key."""
    facts = BrokerFacts(cfg.broker_cluster_name, cfg.broker_name, cfg.broker_id, cfg.broker_addr, cfg.broker_role,
                        cfg.store_path_root_dir, cfg.flush_disk_type, view.runtime_info, route_info)
    views = ConsoleViews(view, admin, facts,
                         ReplicationView(cfg.broker_cluster_name, cfg.broker_name, replication_parts),
                         resends=resends, reset_offsets=reset_through_core(offsets, consumers, cfg.broker_name))
    lock_s = float(cfg.dashboard_sign_in_lock_seconds)
    max_delay_s = float(cfg.dashboard_sign_in_max_delay_seconds)
    sign_in = SignInThrottle(
        ThrottlePolicy(cfg.dashboard_sign_in_delay_after, cfg.dashboard_sign_in_lock_after, max_delay_s, lock_s),
        ThrottlePolicy(cfg.dashboard_sign_in_account_delay_after, cfg.dashboard_sign_in_account_lock_after,
                       max_delay_s, lock_s))
    try:
        return ConsoleServer(views, authorizer, cfg.dashboard_host, port, broker_ip=cfg.broker_ip1,
                             allowed_hosts=[h for h in cfg.dashboard_allowed_hosts.split(",") if h.strip()],
                             sign_in=sign_in)
    except ValueError as exc:  # an allowed host the console cannot read (the conf check lets few through)
        raise ConfigError(f"key 'dashboardAllowedHosts': {exc}", "dashboardAllowedHosts") from None
