"""The persistent broker id of controller mode (controller.md §3): ``brokerIdentity`` holds
``clusterName#brokerName#brokerId`` once the controller accepted the id; ``brokerIdentity-temp`` holds
``clusterName#brokerName#brokerId#registerCheckCode`` while it is being applied (a retry after a crash sends the same
check code, which the controller accepts again)."""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["BrokerIdentity", "IdentityError", "load_identity", "save_identity", "load_temp", "save_temp",
           "delete_temp"]


class IdentityError(ValueError):
    """An identity file that belongs to another cluster or broker name, or that is not one."""


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    cluster: str
    broker_name: str
    broker_id: int
    check_code: str = ""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    return text or None


def _write(path: str, text: str) -> None:
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    tmp = path + ".writing"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _parse(path: str, text: str, parts: int, cluster: str, broker_name: str) -> BrokerIdentity:
    fields = text.split("#", parts - 1)
    if len(fields) != parts or not fields[2].lstrip("-").isdigit():
        raise IdentityError(f"{path}: expected {'#'.join(['clusterName', 'brokerName', 'brokerId', 'checkCode'][:parts])}"
                            f", got {text[:80]!r}")
    if fields[0] != cluster or fields[1] != broker_name:
        raise IdentityError(f"{path} belongs to {fields[0]}/{fields[1]}, not to this broker's {cluster}/{broker_name}:"
                            " this store is another broker's (point storePathRootDir elsewhere or remove the file)")
    return BrokerIdentity(fields[0], fields[1], int(fields[2]), fields[3] if parts == 4 else "")


def load_identity(path: str, cluster: str, broker_name: str) -> BrokerIdentity | None:
    text = _read(path)
    return None if text is None else _parse(path, text, 3, cluster, broker_name)


def save_identity(path: str, identity: BrokerIdentity) -> None:
    _write(path, f"{identity.cluster}#{identity.broker_name}#{identity.broker_id}")


def load_temp(path: str, cluster: str, broker_name: str) -> BrokerIdentity | None:
    text = _read(path + "-temp")
    return None if text is None else _parse(path + "-temp", text, 4, cluster, broker_name)


def save_temp(path: str, identity: BrokerIdentity) -> None:
    _write(path + "-temp", f"{identity.cluster}#{identity.broker_name}#{identity.broker_id}#{identity.check_code}")


def delete_temp(path: str) -> None:
    try:
        os.unlink(path + "-temp")
    except FileNotFoundError:
        pass
