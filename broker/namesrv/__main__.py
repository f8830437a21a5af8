"""Standalone name server: ``mqnamesrv [-p 9876] [-H 0.0.0.0] [-l INFO]`` or ``python -m broker.namesrv``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from broker.namesrv.processor import NamesrvProcessor
from broker.namesrv.route_info import RouteInfoManager

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
                 route_info: RouteInfoManager | None = None) -> None:
        self.route_info = route_info or RouteInfoManager()
        self.processor = NamesrvProcessor(self.route_info)
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self._server = None
        self._expiry_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        from broker.remoting_server import RemotingServer

        self._server = RemotingServer(
            self.processor.handlers(), self.host, self.port, max_frame_size=self.max_frame_size, name="namesrv"
        )
        await self._server.start()
        self.port = self._server.port
        self._expiry_task = asyncio.create_task(expire_brokers_forever(self.route_info), name="namesrv-expiry")

    async def close(self) -> None:
        task, self._expiry_task = self._expiry_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        server, self._server = self._server, None
        if server is not None:
            await server.close()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mqnamesrv", description="RocketMQ-compatible name server")
    parser.add_argument("-p", "--port", type=int, default=9876, help="listen port (default 9876)")
    parser.add_argument("-H", "--host", default="0.0.0.0", help="bind address (default 0.0.0.0)")
    parser.add_argument("-l", "--log-level", default="INFO", help="logging level (default INFO)")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"port {args.port} out of range")
    return args


async def _serve(args: argparse.Namespace) -> None:
    server = NameServer(args.host, args.port)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    print(f"The Name Server boot success. serializeType=JSON, address {args.host}:{server.port}", flush=True)
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
    try:
        import uvloop  # type: ignore[import-not-found]

        loop_factory = uvloop.new_event_loop
    except ImportError:  # stay usable without uvloop
        loop_factory = None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(_serve(args))
    except OSError as exc:
        print(f"mqnamesrv: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
