"""Standalone name server: ``mqnamesrv [-c namesrv.conf] [-p 9876] [-H 0.0.0.0] [-l INFO]`` or
``python -m broker.namesrv``.

The optional config file is Java properties like broker.conf; it takes ``listenPort`` and the connection
limits the broker has (serverChannelMaxIdleTimeSeconds, serverMaxConnections, serverMaxBufferedFrameBytes,
serverFrameStallTimeoutSeconds, writeBufferHighWaterMark, writeBufferLowWaterMark) plus frameMaxLength.
Command-line options win over the file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import ssl
import sys
from typing import TYPE_CHECKING, Any

from broker.connection_guard import ConnectionGuard, ConnectionLimits
from broker.namesrv.processor import NamesrvProcessor
from broker.namesrv.route_info import RouteInfoManager

if TYPE_CHECKING:
    from broker.acl.validator import AclValidator
    from broker.acl.watcher import AclFileWatcher
    from broker.controller.config import ControllerConfig
    from broker.controller.service import Controller
    from broker.remoting_server import RemotingServer
    from broker.tls import TlsSettings

log = logging.getLogger("broker.namesrv")

SCAN_NOT_ACTIVE_BROKER_INTERVAL_S = 10.0


async def expire_brokers_forever(route_info: RouteInfoManager, interval_s: float = SCAN_NOT_ACTIVE_BROKER_INTERVAL_S) -> None:
    """Every ``interval_s``: drop brokers that have not registered within their timeout (120 s).
    Also used by the broker for its embedded name server."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            route_info.scan_not_active_broker()
        except Exception:
            log.exception("broker expiry scan failed")


class NameServer:
    """A name server on a remoting port (standalone process or embedded in a broker)."""

    def __init__(self, host: str = "0.0.0.0", port: int = 9876, max_frame_size: int = 16 * 1024 * 1024,
                 route_info: RouteInfoManager | None = None, guard: ConnectionGuard | None = None,
                 acl_validator: "AclValidator | None" = None,
                 tls: "TlsSettings | None" = None, ssl_context: "ssl.SSLContext | None" = None,
                 controller_config: "ControllerConfig | None" = None, advertise_host: str | None = None) -> None:
        self.route_info = route_info or RouteInfoManager()
        self.processor = NamesrvProcessor(self.route_info)
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.guard = guard  # shared with the broker when embedded; None: default limits
        # ACL on: route-changing codes need an admin account's signature (the broker's validator when embedded)
        self.acl_validator = acl_validator
        self.acl_watcher: "AclFileWatcher | None" = None
        self.tls = tls  # the broker's when embedded; None: disabled
        self.ssl_context = ssl_context
        self._server = None
        self._expiry_task: asyncio.Task[None] | None = None
        # enableControllerInNamesrv: a controller answering on this port too (built once the port is bound)
        self.controller_config = controller_config
        self.advertise_host = advertise_host
        self.controller: "Controller | None" = None

    async def start(self) -> None:
        from broker.remoting_server import RemotingServer

        self._server = RemotingServer(
            self.processor.handlers(), self.host, self.port, max_frame_size=self.max_frame_size, name="namesrv",
            guard=self.guard, tls=self.tls, ssl_context=self.ssl_context,
            request_guard=self.acl_validator.request_guard(namesrv=True) if self.acl_validator is not None else None,
        )
        await self._server.start()
        self.port = self._server.port
        if self.controller_config is not None:
            from broker.controller.build import advertised_address, make_controller

            controller = make_controller(self.controller_config,
                                         advertised_address(self.advertise_host or self.host, self.port))
            try:
                await controller.start()
            except BaseException as exc:
                await self._server.close()
                self._server = None
                from broker.config import ConfigError
                from broker.controller.backend import BackendError

                if isinstance(exc, BackendError):  # its store cannot be used: one line naming the key
                    key = "controllerEtcdEndpoints" if self.controller_config.controller_type == "etcd" \
                        else "controllerStorePath"
                    raise ConfigError(f"key '{key}': controller: {exc}", key) from None
                raise
            self.controller = controller
            self._server.handlers.update(controller.handlers())
        self._expiry_task = asyncio.create_task(expire_brokers_forever(self.route_info), name="namesrv-expiry")
        if self.acl_watcher is not None:
            self.acl_watcher.start()

    @property
    def server(self) -> "RemotingServer | None":
        return self._server

    async def close(self) -> None:
        if self.acl_watcher is not None:
            await self.acl_watcher.stop()
        task, self._expiry_task = self._expiry_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        server, self._server = self._server, None
        if server is not None:
            await server.close()
        controller, self.controller = self.controller, None
        if controller is not None:
            await controller.close()


_SERVER_KEYS = ("listenPort", "frameMaxLength")
_ACL_KEYS = ("aclEnable", "aclFile")
_TLS_KEYS = ("tlsMode", "tlsServerCertPath", "tlsServerKeyPath", "tlsServerTrustCertPath", "tlsServerNeedClientAuth")


def load_namesrv_tls(path: str | None) -> "tuple[TlsSettings, ssl.SSLContext | None]":
    """The TLS keys of the config file (same as broker.conf's) and the server context built from them.
    Raises ConfigError naming the key (and the file of a missing certificate)."""
    from broker.config import ConfigError, parse_properties
    from broker.tls import TlsSettings

    values: dict[str, str] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                values = {k: v for _, k, v in parse_properties(handle.read(), path) if k in _TLS_KEYS}
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        tls = TlsSettings.from_properties(values)
        return tls, tls.server_context()
    except ConfigError as exc:
        raise ConfigError(f"{path}: key '{exc.key}': {exc.detail}", exc.key) from None


def load_namesrv_config(path: str) -> tuple[dict[str, Any], ConnectionLimits]:
    """Read a name server config file: (listenPort/frameMaxLength/aclEnable/aclFile found, connection limits).
    aclFile is made absolute against the file's folder (default: plain_acl.yml there).
    Other keys (NamesrvConfig's, e.g. kvConfigPath) are reported and ignored. Raises ValueError."""
    from broker.config import ConfigError, parse_properties

    try:
        with open(path, encoding="utf-8") as handle:
            entries = parse_properties(handle.read(), path)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    from broker.controller.config import CONTROLLER_KEYS

    limit_keys = ConnectionLimits.keys()
    server: dict[str, Any] = {}
    limits: dict[str, str] = {}
    controller: dict[str, str] = {}
    for line, key, value in entries:
        if key in CONTROLLER_KEYS:
            controller[key] = value
        elif key == "enableControllerInNamesrv":
            if value.strip().lower() not in ("true", "false"):
                raise ValueError(f"{path} line {line}: key 'enableControllerInNamesrv': expected true or false, "
                                 f"got {value!r}")
            server[key] = value.strip().lower() == "true"
        elif key in limit_keys:
            limits[key] = value
        elif key == "aclEnable":
            if value.strip().lower() not in ("true", "false"):
                raise ValueError(f"{path} line {line}: aclEnable: expected true or false, got {value!r}")
            server[key] = value.strip().lower() == "true"
        elif key == "aclFile":
            server[key] = value.strip()
        elif key in _TLS_KEYS:
            pass  # read by load_namesrv_tls
        elif key in _SERVER_KEYS:
            try:
                server[key] = int(value.strip())
            except ValueError:
                raise ValueError(f"{path} line {line}: {key}: expected an integer, got {value!r}") from None
        else:
            log.warning("%s line %d: key %r is not used by this name server; ignored", path, line, key)
    folder = os.path.dirname(os.path.abspath(path))
    server["aclFile"] = os.path.join(folder, os.path.expanduser(server.get("aclFile") or "plain_acl.yml"))
    if server.get("enableControllerInNamesrv"):
        from broker.controller.config import ControllerConfig

        try:
            server["controller"] = ControllerConfig.from_properties(controller)
        except ConfigError as exc:
            raise ValueError(f"{path}: key '{exc.key}': {exc.detail}") from None
    try:
        return server, ConnectionLimits.from_properties(limits)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mqnamesrv", description="RocketMQ-compatible name server")
    parser.add_argument("-c", "--config", help="config file (Java properties): listenPort, connection limits, "
                        "aclEnable, aclFile")
    parser.add_argument("-p", "--port", type=int, default=None, help="listen port (default 9876)")
    parser.add_argument("-H", "--host", default="0.0.0.0", help="bind address (default 0.0.0.0)")
    parser.add_argument("-l", "--log-level", default="INFO", help="logging level (default INFO)")
    args = parser.parse_args(argv)
    if args.port is not None and not 0 <= args.port <= 65535:
        parser.error(f"port {args.port} out of range")
    return args


def _namesrv_acl(settings: dict[str, Any]) -> tuple["AclValidator | None", "AclFileWatcher | None"]:
    """With aclEnable=true: a validator over aclFile and its watcher; ValueError (one line) if the file is bad."""
    if not settings.get("aclEnable"):
        return None, None
    from broker.acl.accounts import AclFileError, load_acl_file
    from broker.acl.validator import AclValidator
    from broker.acl.watcher import AclFileWatcher

    path = settings["aclFile"]
    try:
        validator = AclValidator(load_acl_file(path))
    except AclFileError as exc:
        raise ValueError(f"key 'aclFile': {exc}") from None
    return validator, AclFileWatcher(path, validator.update)


async def _serve(args: argparse.Namespace, settings: dict[str, Any], limits: ConnectionLimits,
                 tls: "TlsSettings", ssl_context: "ssl.SSLContext | None",
                 acl: tuple["AclValidator | None", "AclFileWatcher | None"] = (None, None)) -> None:
    server = NameServer(args.host, args.port, settings.get("frameMaxLength", 16 * 1024 * 1024),
                        guard=ConnectionGuard(limits), acl_validator=acl[0], tls=tls, ssl_context=ssl_context,
                        controller_config=settings.get("controller"))
    server.acl_watcher = acl[1]
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    print(f"The Name Server boot success. serializeType=JSON, address {args.host}:{server.port}", flush=True)
    assert server.server is not None
    print(f"listening: namesrv {server.server.describe()}", flush=True)
    if server.controller is not None:
        print(f"controller: {server.controller.config.controller_type}, address "
              f"{server.controller.backend.self_address}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()
        log.info("name server stopped")


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings: dict[str, Any] = {}
    limits = ConnectionLimits()
    acl: tuple[Any, Any] = (None, None)
    if args.config:
        try:
            settings, limits = load_namesrv_config(args.config)
            acl = _namesrv_acl(settings)
        except ValueError as exc:
            print(f"mqnamesrv: {exc}", file=sys.stderr)
            return 2
    try:
        tls, ssl_context = load_namesrv_tls(args.config)
    except ValueError as exc:  # ConfigError
        print(f"mqnamesrv: {exc}", file=sys.stderr)
        return 2
    if args.port is None:
        args.port = settings.get("listenPort", 9876)
    if not 0 <= args.port <= 65535 or settings.get("frameMaxLength", 1) <= 0:
        print(f"mqnamesrv: listenPort {args.port} or frameMaxLength out of range", file=sys.stderr)
        return 2
    try:
        import uvloop  # type: ignore[import-not-found]

        loop_factory = uvloop.new_event_loop
    except ImportError:  # stay usable without uvloop
        loop_factory = None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(_serve(args, settings, limits, tls, ssl_context, acl))
    except ValueError as exc:  # ConfigError: the controller's store (enableControllerInNamesrv) is unusable
        print(f"mqnamesrv: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"mqnamesrv: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
