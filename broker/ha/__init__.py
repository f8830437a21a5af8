"""Master/slave replication: the HA listener of a master (master.py), the HA client of a slave (slave.py) and
the slave's metadata copies (metadata_sync.py); the byte protocol is protocol/ha.py."""

from __future__ import annotations

from typing import Any


def replication_info(broker: Any) -> dict[str, Any]:
    """Replication state for runtime info and metrics: the master's slaves and lag, or the slave's master."""
    master = getattr(broker, "ha_master", None)
    if master is not None:
        return {"haListenAddr": f"{broker.config.broker_ip2 or broker.config.broker_ip1}:{master.port}",
                "haSlaveCount": len(master.slaves), "haReplicationLagBytes": master.replication_lag(),
                "haPushMaxOffset": max(master.push_max_offset, 0)}
    slave = getattr(broker, "ha_slave", None)
    if slave is None:
        return {}
    own = broker.store.commit_log.max_offset
    return {"haMasterAddress": slave.master_address or "", "haConnected": str(slave.connected).lower(),
            "haReplicationLagBytes": max(0, slave.master_max_seen - own) if slave.connected else -1}
