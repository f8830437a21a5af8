"""``<storePathRootDir>/config/brokerName.json``: which broker wrote this store.

A store directory does not otherwise say whose it is outside controller mode (``brokerIdentity``), so tools that
read stores offline (the Spark data source's file mode, spark_export) could only guess from the directory's name.
Written once the broker has started (its store lock held, its listeners bound), and only when missing or
different, so a restart does not rewrite it.
"""

from __future__ import annotations

import logging
import os

from broker.store.config_file import JsonConfigFile

__all__ = ["FILE_NAME", "write_broker_name"]

log = logging.getLogger(__name__)

FILE_NAME = "brokerName.json"


def write_broker_name(config_dir: str, cluster: str, broker_name: str) -> bool:
    """Record the cluster and broker name of the store (atomically); True when the file was (re)written.

    A write failure is logged, not raised: the broker runs fine without the file, only offline readers lose it."""
    wanted = {"brokerClusterName": cluster, "brokerName": broker_name}
    file = JsonConfigFile(os.path.join(config_dir, FILE_NAME))
    try:
        current = file.load()
    except OSError:
        current = None
    if isinstance(current, dict) and {k: current.get(k) for k in wanted} == wanted:
        return False
    try:
        file.save(wanted)
    except OSError as exc:
        log.warning("cannot write %s (%s): offline readers of this store will not know its brokerName",
                    file.path, exc.strerror or exc)
        return False
    return True
