"""Controller settings (controller.md §12), read from controller.conf, a name server's conf or broker.conf.

Same keys wherever the controller runs. A bad value raises ConfigError naming the key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from broker.errors import ConfigError

__all__ = ["ControllerConfig", "CONTROLLER_KEYS", "CONTROLLER_TYPES", "parse_endpoints"]

CONTROLLER_TYPES = ("local", "etcd")
DEFAULT_LISTEN_PORT = 9878

# conf key -> attribute
CONTROLLER_KEYS: dict[str, str] = {
    "controllerType": "controller_type",
    "controllerStorePath": "controller_store_path",
    "controllerEtcdEndpoints": "controller_etcd_endpoints",
    "scanNotActiveBrokerInterval": "scan_not_active_broker_interval",
    "scanInactiveMasterInterval": "scan_inactive_master_interval",
    "electMasterMaxRetryCount": "elect_master_max_retry_count",
    "enableElectUncleanMaster": "enable_elect_unclean_master",
    "notifyBrokerRoleChanged": "notify_broker_role_changed",
}


def parse_endpoints(text: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` -> [(host, port)]. Raises ValueError naming the bad entry."""
    out: list[tuple[str, int]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("http://"):
            part = part[len("http://"):]
        host, sep, port = part.rpartition(":")
        host = host.strip("[]")
        if not sep or not host:
            raise ValueError(f"expected host:port, got {part!r}")
        try:
            number = int(port)
        except ValueError:
            raise ValueError(f"expected host:port, got {part!r}") from None
        if not 0 < number < 65536:
            raise ValueError(f"port out of range in {part!r}")
        out.append((host, number))
    return out


@dataclass(slots=True)
class ControllerConfig:
    controller_type: str = "local"
    controller_store_path: str = ""  # "" -> ~/<controllerType>Controller
    controller_etcd_endpoints: str = ""
    scan_not_active_broker_interval: int = 5000
    scan_inactive_master_interval: int = 5000
    elect_master_max_retry_count: int = 3
    enable_elect_unclean_master: bool = False
    notify_broker_role_changed: bool = True

    @classmethod
    def from_properties(cls, values: Mapping[str, str]) -> "ControllerConfig":
        """From conf text values (keys of CONTROLLER_KEYS; others ignored). Raises ConfigError(key)."""
        cfg = cls()
        for key, attr in CONTROLLER_KEYS.items():
            if key not in values:
                continue
            raw = str(values[key]).strip()
            current = getattr(cfg, attr)
            if isinstance(current, bool):
                if raw.lower() not in ("true", "false"):
                    raise ConfigError(f"expected true or false, got {raw!r}", key)
                setattr(cfg, attr, raw.lower() == "true")
            elif isinstance(current, int):
                try:
                    setattr(cfg, attr, int(raw))
                except ValueError:
                    raise ConfigError(f"expected an integer, got {raw!r}", key) from None
            else:
                setattr(cfg, attr, raw)
        cfg.check()
        return cfg

    @classmethod
    def from_object(cls, obj: object) -> "ControllerConfig":
        """From an object carrying the same attributes (BrokerConfig's controller block)."""
        cfg = cls(**{attr: getattr(obj, attr) for attr in CONTROLLER_KEYS.values() if hasattr(obj, attr)})
        cfg.check()
        return cfg

    def check(self) -> None:
        """Normalise and validate; raises ConfigError naming the key."""
        self.controller_type = (self.controller_type or "local").strip()
        if self.controller_type.lower() not in CONTROLLER_TYPES:
            raise ConfigError(f"expected one of {', '.join(CONTROLLER_TYPES)}, got {self.controller_type!r}",
                              "controllerType")
        self.controller_type = self.controller_type.lower()
        for key in ("scanNotActiveBrokerInterval", "scanInactiveMasterInterval", "electMasterMaxRetryCount"):
            value = getattr(self, CONTROLLER_KEYS[key])
            if value <= 0:
                raise ConfigError(f"must be greater than 0, got {value}", key)
        if self.controller_type == "etcd":
            try:
                endpoints = parse_endpoints(self.controller_etcd_endpoints or "")
            except ValueError as exc:
                raise ConfigError(str(exc), "controllerEtcdEndpoints") from None
            if not endpoints:
                raise ConfigError("controllerType=etcd needs at least one host:port", "controllerEtcdEndpoints")
        path = (self.controller_store_path or "").strip()
        if not path:
            path = os.path.join("~", f"{self.controller_type}Controller")
        self.controller_store_path = os.path.abspath(os.path.expanduser(path))

    @property
    def etcd_endpoints(self) -> list[tuple[str, int]]:
        return parse_endpoints(self.controller_etcd_endpoints or "")
