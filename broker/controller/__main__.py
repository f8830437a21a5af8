"""Standalone controller: ``mqcontroller -c controller.conf [-p 9878] [-H 0.0.0.0] [-l INFO]`` or
``python -m broker.controller``.

The config file is Java properties: ``listenPort`` (default 9878), the controller keys (controllerType,
controllerStorePath, controllerEtcdEndpoints, scanNotActiveBrokerInterval, scanInactiveMasterInterval,
electMasterMaxRetryCount, enableElectUncleanMaster, notifyBrokerRoleChanged), and the name server's
connection-limit, ACL and TLS keys. A bad value stops start-up with one line naming the key.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import Any

from broker.connection_guard import ConnectionGuard, ConnectionLimits
from broker.controller.build import advertised_address, make_controller
from broker.controller.backend import BackendError
from broker.controller.config import CONTROLLER_KEYS, DEFAULT_LISTEN_PORT, ControllerConfig
from broker.errors import ConfigError

log = logging.getLogger("broker.controller")

_TLS_KEYS = ("tlsMode", "tlsServerCertPath", "tlsServerKeyPath", "tlsServerTrustCertPath", "tlsServerNeedClientAuth")


def load_controller_config(path: str | None) -> tuple[ControllerConfig, dict[str, Any], ConnectionLimits]:
    """(controller settings, server settings: listenPort/frameMaxLength/aclEnable/aclFile, connection limits).
    Raises ConfigError whose message names the key."""
    from broker.config import parse_properties

    entries: list[tuple[int, str, str]] = []
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                entries = parse_properties(handle.read(), path)
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    where = path or "defaults"
    controller: dict[str, str] = {}
    limits: dict[str, str] = {}
    server: dict[str, Any] = {}
    limit_keys = ConnectionLimits.keys()
    for line, key, value in entries:
        if key in CONTROLLER_KEYS:
            controller[key] = value
        elif key in limit_keys:
            limits[key] = value
        elif key == "aclEnable":
            if value.strip().lower() not in ("true", "false"):
                raise ConfigError(f"{where} line {line}: key 'aclEnable': expected true or false, got {value!r}",
                                  key)
            server[key] = value.strip().lower() == "true"
        elif key == "aclFile":
            server[key] = value.strip()
        elif key in ("listenPort", "frameMaxLength"):
            try:
                server[key] = int(value.strip())
            except ValueError:
                raise ConfigError(f"{where} line {line}: key '{key}': expected an integer, got {value!r}",
                                  key) from None
        elif key in _TLS_KEYS or key == "enableControllerInNamesrv":
            pass
        else:
            log.warning("%s line %d: key %r is not used by the controller; ignored", where, line, key)
    port = server.get("listenPort", DEFAULT_LISTEN_PORT)
    if not 0 <= port <= 65535:
        raise ConfigError(f"{where}: key 'listenPort': out of range: {port}", "listenPort")
    if server.get("frameMaxLength", 1) <= 0:
        raise ConfigError(f"{where}: key 'frameMaxLength': must be greater than 0", "frameMaxLength")
    try:
        cfg = ControllerConfig.from_properties(controller)
    except ConfigError as exc:
        raise ConfigError(f"{where}: key '{exc.key}': {exc.detail}", exc.key) from None
    folder = os.path.dirname(os.path.abspath(path)) if path else os.getcwd()
    server["aclFile"] = os.path.join(folder, os.path.expanduser(server.get("aclFile") or "plain_acl.yml"))
    try:
        return cfg, server, ConnectionLimits.from_properties(limits)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mqcontroller", description="RocketMQ-compatible controller "
                                     "(controller mode: broker ids, master elections)")
    parser.add_argument("-c", "--config", help="config file (Java properties)")
    parser.add_argument("-p", "--port", type=int, default=None, help=f"listen port (default {DEFAULT_LISTEN_PORT})")
    parser.add_argument("-H", "--host", default="0.0.0.0", help="bind address (default 0.0.0.0)")
    parser.add_argument("-l", "--log-level", default="INFO", help="logging level (default INFO)")
    args = parser.parse_args(argv)
    if args.port is not None and not 0 <= args.port <= 65535:
        parser.error(f"port {args.port} out of range")
    return args


async def _serve(args: argparse.Namespace, cfg: ControllerConfig, server_settings: dict[str, Any],
                 limits: ConnectionLimits, tls: Any, ssl_context: Any, acl: tuple[Any, Any]) -> None:
    from broker.remoting_server import RemotingServer

    validator, watcher = acl
    # the port is known before binding unless it is 0 (tests): bind first, then name ourselves
    server = RemotingServer({}, args.host, args.port, max_frame_size=server_settings.get("frameMaxLength",
                                                                                        16 * 1024 * 1024),
                            name="controller", guard=ConnectionGuard(limits), tls=tls, ssl_context=ssl_context,
                            request_guard=validator.request_guard(namesrv=True) if validator is not None else None)
    await server.start()
    controller = make_controller(cfg, advertised_address(args.host, server.port))
    try:
        await controller.start()
    except BaseException:
        await server.close()
        raise
    server.handlers.update(controller.handlers())
    if watcher is not None:
        watcher.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    print(f"The Controller boot success. controllerType={cfg.controller_type}, address "
          f"{controller.backend.self_address}", flush=True)
    print(f"listening: controller {server.describe()}", flush=True)
    try:
        await stop.wait()
    finally:
        if watcher is not None:
            await watcher.stop()
        await server.close()
        await controller.close()
        log.info("controller stopped")


def main(argv: list[str] | None = None) -> int:
    from broker.namesrv.__main__ import _namesrv_acl, load_namesrv_tls

    args = _parse_args(argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg, settings, limits = load_controller_config(args.config)
        acl = _namesrv_acl(settings)
        tls, ssl_context = load_namesrv_tls(args.config)
    except (ConfigError, ValueError) as exc:
        print(f"mqcontroller: {exc}", file=sys.stderr)
        return 2
    if args.port is None:
        args.port = settings.get("listenPort", DEFAULT_LISTEN_PORT)
    try:
        import uvloop  # type: ignore[import-not-found]

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(_serve(args, cfg, settings, limits, tls, ssl_context, acl))
    except BackendError as exc:  # the store cannot be used: name the key that points at it
        key = "controllerEtcdEndpoints" if cfg.controller_type == "etcd" else "controllerStorePath"
        print(f"mqcontroller: key '{key}': {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"mqcontroller: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
