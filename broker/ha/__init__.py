"""Master/slave replication: the HA listener of a master (master.py), the HA client of a slave (slave.py) and
the slave's metadata copies (metadata_sync.py); the byte protocol is protocol/ha.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class HASlots:
    """The broker's current HA listener (``master``: a master's, else None) and HA client (``slave``: a slave's, else
    None). Held by the Broker and changed in place by the controller-mode role changes, so whoever reads them (the ack
    rule, runtime info, the console, shutdown) sees the current ones."""

    master: Any = None
    slave: Any = None


def replication_info(config: Any, master: Any, slave: Any, own_max_offset: Callable[[], int]) -> dict[str, Any]:
    """Replication state for runtime info and metrics: the master's slaves and lag (`master`: the HA listener, None on
    a slave), or the slave's master (`slave`: the HA client); empty in neither role."""
    if master is not None:
        return {"haListenAddr": f"{config.broker_ip2 or config.broker_ip1}:{master.port}",
                "haSlaveCount": len(master.slaves), "haReplicationLagBytes": master.replication_lag(),
                "haPushMaxOffset": max(master.push_max_offset, 0)}
    if slave is None:
        return {}
    own = own_max_offset()
    return {"haMasterAddress": slave.master_address or "", "haConnected": str(slave.connected).lower(),
            "haReplicationLagBytes": max(0, slave.master_max_seen - own) if slave.connected else -1}
