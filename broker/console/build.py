"""The web console as the Broker builds it: its facts, views and sign-in throttle from the broker's settings and
read-only parts (never the Broker)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.console.access import ConsoleError
from broker.console.replication import ReplicationView
from broker.console.server import ConsoleServer
from broker.console.throttle import SignInThrottle, ThrottlePolicy
from broker.console.views import BrokerFacts, ConsoleViews, ResetOffsets
from broker.errors import ConfigError
from broker.processors.inprocess import AdminCallError, call_handler
from protocol.admin_bodies import ResetOffsetBody
from protocol.bodies import MessageQueue
from protocol.codes import RequestCode, ResponseCode

__all__ = ["build_console"]


def reset_through_handler(dispatch_table: dict[int, Any]) -> ResetOffsets:
    """The console's offset reset as INVOKE_BROKER_TO_RESET_OFFSET run in process by its remoting handler (the one
    console action not yet a typed request of the core): its table and how many consumers were told."""
    async def reset(group: str, topic: str, timestamp_ms: int, caller: str) -> tuple[dict[MessageQueue, int], int]:
        fields = {"topic": topic, "group": group, "timestamp": timestamp_ms, "isForce": "true"}
        try:
            response = await call_handler(dispatch_table, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields,
                                          caller=caller)
        except AdminCallError as exc:
            raise ConsoleError(400 if exc.code != ResponseCode.SYSTEM_ERROR else 500,
                               f"{exc.remark} (code {exc.code})") from None
        table = ResetOffsetBody.decode(response.body).offset_table
        return table, int((response.ext_fields or {}).get("online") or 0)
    return reset


def build_console(cfg: Any, port: int, view: Any, admin: Any, dispatch_table: dict[int, Any], resends: Any,
                  authorizer: Any, route_info: Callable[..., Any] | None, replication_parts: Any) -> ConsoleServer:
    """``view``: the broker's BrokerView; ``admin``: the core's AdminService (the console's admin actions);
    ``dispatch_table``: the remoting handlers (only the offset reset still runs through one); ``resends``: the
    dead-letter resend log; ``route_info``: the embedded name server's routes (None without one);
    ``replication_parts``: ClassicParts or ControllerParts (broker/console/replication.py). A dashboardAllowedHosts
    entry the console cannot read is a ConfigError naming the key."""
    facts = BrokerFacts(cfg.broker_cluster_name, cfg.broker_name, cfg.broker_id, cfg.broker_addr, cfg.broker_role,
                        cfg.store_path_root_dir, cfg.flush_disk_type, view.runtime_info, route_info)
    views = ConsoleViews(view, admin, facts,
                         ReplicationView(cfg.broker_cluster_name, cfg.broker_name, replication_parts),
                         resends=resends, reset_offsets=reset_through_handler(dispatch_table))
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
