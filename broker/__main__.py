"""Command line entry: ``mqbroker -c conf/broker.conf`` / ``python -m broker -c ...``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from broker.config import ConfigError, load_broker_config

log = logging.getLogger("broker")

EXIT_CONFIG_ERROR = 2
EXIT_STORE_LOCKED = 3
EXIT_STORE_FILE_ERROR = 4


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mqbroker", description="RocketMQ-compatible broker")
    parser.add_argument("-c", "--config", dest="config", help="broker.conf (Java properties)")
    parser.add_argument("-p", "--print-config", dest="print_config", action="store_true",
                        help="print the effective configuration and exit")
    parser.add_argument("-n", "--namesrv-addr", dest="namesrv_addr",
                        help="name server address list 'ip:port;ip:port' (overrides namesrvAddr)")
    parser.add_argument("-l", "--log-level", dest="log_level", default=os.environ.get("BROKER_LOG_LEVEL", "INFO"),
                        help="logging level (DEBUG, INFO, WARNING, ...)")
    return parser.parse_args(argv)


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency, but stay usable without it
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


async def _serve(config) -> int:
    from broker.broker import Broker
    from broker.store.lock import StoreLockedError
    from broker.store.mapped_file import StoreFileError

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals_seen = 0

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            print(f"second signal {signal.Signals(signum).name}: exiting now", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        log.info("signal %s: shutting down", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - non-POSIX
            pass

    try:
        broker = Broker(config)
    except ConfigError as exc:  # e.g. an unreadable aclFile or a missing TLS certificate: one line naming key and file
        print(f"mqbroker: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG_ERROR
    try:
        await broker.start()
    except ConfigError as exc:  # a port in use, an unusable store directory: one line naming the key
        print(f"mqbroker: {exc}", file=sys.stderr, flush=True)
        await broker.shutdown()
        return EXIT_CONFIG_ERROR
    except StoreLockedError as exc:
        print(f"mqbroker: {exc}", file=sys.stderr, flush=True)
        await broker.shutdown()
        return EXIT_STORE_LOCKED
    except StoreFileError as exc:  # a damaged or mis-sized store file: say which and what to do
        print(f"mqbroker: {exc}", file=sys.stderr, flush=True)
        await broker.shutdown()
        return EXIT_STORE_FILE_ERROR
    except Exception as exc:  # unexpected: one line for the operator, the traceback at DEBUG for a bug report
        print(f"mqbroker: failed to start: {exc.__class__.__name__}: {exc} (run with -l DEBUG for the traceback)",
              file=sys.stderr, flush=True)
        log.debug("start-up failure", exc_info=True)
        await broker.shutdown()
        return 1
    # Tests and operators wait for this exact line; print it so it appears even when logging is quiet.
    print(f"The broker[{config.broker_name}, {config.broker_addr}] boot success.", flush=True)
    print(f"listening: {broker.listening()}", flush=True)  # the real bind address of every port
    try:
        await stop.wait()
    finally:
        await broker.shutdown()
        print(f"The broker[{config.broker_name}, {config.broker_addr}] shutdown.", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s - %(message)s",
        stream=sys.stderr,
    )
    overrides = {"namesrvAddr": args.namesrv_addr} if args.namesrv_addr else None
    try:
        config = load_broker_config(args.config, overrides)
    except ConfigError as exc:
        print(f"mqbroker: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG_ERROR
    if args.print_config:
        for key, value in sorted(config.to_properties().items()):
            print(f"{key}={value}")
        return 0
    print(f"config file: {os.path.abspath(args.config) if args.config else '(defaults)'}", flush=True)
    print(f"store root: {config.store_path_root_dir} (commit log: {config.commit_log_dir}, "
          f"config: {config.config_dir})", flush=True)
    with asyncio.Runner(loop_factory=_new_event_loop) as runner:
        return runner.run(_serve(config))


if __name__ == "__main__":
    sys.exit(main())
