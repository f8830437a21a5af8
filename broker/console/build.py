"""The web console as the Broker builds it: its facts, views and sign-in throttle from the broker's settings and
read-only parts (never the Broker)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.console.replication import ReplicationView
from broker.console.server import ConsoleServer
from broker.console.throttle import SignInThrottle, ThrottlePolicy
from broker.console.views import BrokerFacts, ConsoleViews
from broker.errors import ConfigError

__all__ = ["build_console"]


def build_console(cfg: Any, port: int, view: Any, dispatch_table: dict[int, Any], resends: Any, authorizer: Any,
                  route_info: Callable[..., Any] | None, replication_parts: Any) -> ConsoleServer:
    """``view``: the broker's BrokerView; ``dispatch_table``: the remoting handlers (the console's admin actions);
    ``resends``: the dead-letter resend log; ``route_info``: the embedded name server's routes (None without one);
    ``replication_parts``: ClassicParts or ControllerParts (broker/console/replication.py). A dashboardAllowedHosts
    entry the console cannot read is a ConfigError naming the key."""
    facts = BrokerFacts(cfg.broker_cluster_name, cfg.broker_name, cfg.broker_id, cfg.broker_addr, cfg.broker_role,
                        cfg.store_path_root_dir, cfg.flush_disk_type, view.runtime_info, route_info)
    views = ConsoleViews(view, dispatch_table, facts,
                         ReplicationView(cfg.broker_cluster_name, cfg.broker_name, replication_parts),
                         resends=resends)
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
