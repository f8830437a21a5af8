"""Building a controller from its configuration: the backend ``controllerType`` names, and the address brokers
use to reach it (shared by ``mqcontroller`` and a name server with ``enableControllerInNamesrv``)."""

from __future__ import annotations

from broker.controller.backend import Backend, LocalBackend
from broker.controller.config import ControllerConfig
from broker.controller.service import Controller

__all__ = ["advertised_address", "make_backend", "make_controller"]


def make_backend(config: ControllerConfig, self_address: str) -> Backend:
    """The backend ``controllerType`` names; ``self_address`` is how brokers reach this controller."""
    if config.controller_type == "etcd":
        from broker.controller.etcd_backend import EtcdBackend

        return EtcdBackend(self_address, config.etcd_endpoints)
    return LocalBackend(self_address, config.controller_store_path)


def make_controller(config: ControllerConfig, self_address: str) -> Controller:
    return Controller(config, make_backend(config, self_address))


def advertised_address(host: str, port: int) -> str:
    """How brokers and tools reach this controller: the bind host, or this machine's address for 0.0.0.0."""
    if host in ("", "0.0.0.0", "::"):
        from broker.config import default_broker_ip

        host = default_broker_ip()
    return f"{host}:{port}"
