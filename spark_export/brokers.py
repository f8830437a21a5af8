"""Which broker wrote a store directory, and which of several directories a read covers.

One DataFrame can cover a whole cluster's stores: every store is tagged with its brokerName (the `broker` column),
and directories of the same brokerName are replicas (a master and its slaves hold byte-identical commit logs), of
which only the one whose commit log reaches furthest is read, so no record appears twice.

The brokerName of a directory, first found wins: the caller's (option brokerName / brokerNames); the file
``brokerIdentity`` (controller mode: ``clusterName#brokerName#brokerId``); ``config/brokerName.json`` (written
by this project's broker at start-up); else the directory's name (its parent's when it is called ``store``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace

from spark_export.store import StoreError, StoreLayout, data_extent, load_config_json, mapped, open_store

__all__ = ["IDENTITY_FILE", "NAME_FILE", "broker_name_of", "commit_log_reach", "same_log", "resolve_stores"]

log = logging.getLogger(__name__)

IDENTITY_FILE = "brokerIdentity"
NAME_FILE = "brokerName.json"  # under config/
_COMPARED_BYTES = 4096  # the first records of a file: two brokers never write the same ones (hosts, times)
_COMPARED_FILES = 3


def broker_name_of(root: str) -> tuple[str, str]:
    """(brokerName, where it came from) for the store directory `root`."""
    identity = os.path.join(root, IDENTITY_FILE)
    if os.path.isfile(identity):
        try:
            with open(identity, encoding="utf-8") as f:
                text = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"{identity}: cannot be read ({exc}); give the option brokerName") from None
        fields = text.split("#")
        if len(fields) != 3 or not fields[1] or not fields[2].lstrip("-").isdigit():
            raise StoreError(f"{identity}: expected clusterName#brokerName#brokerId, got {text[:80]!r}; "
                             "give the option brokerName")
        return fields[1], identity
    name_file = os.path.join(root, "config", NAME_FILE)
    doc = load_config_json(name_file)
    if doc is not None:
        name = doc.get("brokerName") if isinstance(doc, dict) else None
        if not isinstance(name, str) or not name:
            raise StoreError(f"{name_file}: no brokerName in it; give the option brokerName")
        return name, name_file
    path = os.path.normpath(os.path.abspath(root))
    name = os.path.basename(path)
    if name == "store":
        name = os.path.basename(os.path.dirname(path)) or name
    return name, "the directory's name"


def commit_log_reach(layout: StoreLayout) -> int:
    """About where the store's commit log ends (global offset): the written data of its last non-empty file."""
    for base, path, size in reversed(layout.commit_log_files):
        extent = data_extent(path, size)
        if extent > 0:
            return base + extent
    return 0


def same_log(a: StoreLayout, b: StoreLayout) -> bool | None:
    """Whether two stores hold the same commit log (replicas): the first bytes of the files both have, compared.
    None when they have no written file in common (nothing to compare)."""
    files_b = {base: (path, size) for base, path, size in b.commit_log_files}
    compared = 0
    for base, path_a, size_a in a.commit_log_files:
        if base not in files_b or compared >= _COMPARED_FILES:
            continue
        path_b, size_b = files_b[base]
        n = min(_COMPARED_BYTES, data_extent(path_a, size_a), data_extent(path_b, size_b))
        if n <= 0:
            continue
        compared += 1
        with mapped(path_a) as buf_a, mapped(path_b) as buf_b:
            if bytes(buf_a[:n]) != bytes(buf_b[:n]):
                return False
    return True if compared else None


def resolve_stores(paths: tuple[str, ...], names: tuple[str, ...] | None = None,
                   commit_log_dir: str | None = None) -> list[StoreLayout]:
    """The stores to read, each with its brokerName (StoreLayout.broker), one per brokerName, in the order given.

    `names`: a brokerName per path ("" = find it). Replicas: the one whose commit log reaches furthest is kept (the
    first given on a tie) and the others are logged as skipped; two directories of one brokerName whose logs differ
    are not replicas, and are refused (they need names of their own)."""
    layouts = []
    for k, path in enumerate(paths):
        layout = open_store(path, commit_log_dir)
        given = names[k] if names else ""
        broker = given or broker_name_of(layout.root)[0]
        layouts.append(replace(layout, broker=broker))
    groups: dict[str, list[StoreLayout]] = {}
    for layout in layouts:
        groups.setdefault(layout.broker, []).append(layout)
    chosen = []
    for broker, group in groups.items():
        if len(group) == 1:
            chosen.append(group[0])
            continue
        reach = [commit_log_reach(layout) for layout in group]
        best = group[reach.index(max(reach))]
        for layout, end in zip(group, reach):
            if layout is best:
                continue
            if same_log(best, layout) is False:
                raise StoreError(f"{best.root} and {layout.root} both hold broker {broker!r} but their commit logs "
                                 "differ (not a master and its slave): name each directory's broker with the "
                                 "option brokerNames (comma-separated, one per directory)")
            log.warning("rocketmq: %s is a replica of broker %r; reading %s instead (its commit log reaches %d, "
                        "this one %d)", layout.root, broker, best.root, max(reach), end)
        chosen.append(best)
    order = {id(layout): k for k, layout in enumerate(layouts)}
    return sorted(chosen, key=lambda layout: order[id(layout)])
