"""What idle or non-reading connections to a master's HA port cost it (issue 27): the broker's RSS before, while
N connections are open, and after they closed.

Each connection sends one offset report of 0 (the reference's protocol: "send me the newest file") and then never
reads, so a master that streams to anyone fills its send buffers; with ``--acl`` the master has aclEnable=true and
such a peer is refused at its first bytes. ``--root`` picks the checkout whose broker runs (to compare a version
before the change with this one). Prints one JSON line.

    python bench/ha_connections.py --connections 5000 [--acl] [--root /path/to/checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.broker_process import BrokerProcess, free_port, prepare_broker  # noqa: E402
from protocol.ha import encode_report  # noqa: E402

ACL = """accounts:
  - accessKey: bench_admin
    secretKey: bench-admin-secret
    admin: true
"""


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return -1.0


async def fill_log(port: int, messages: int, acl: bool) -> None:
    """Some MB of log for the master to stream (signed when ACL is on)."""
    from protocol.acl_signature import sign
    from protocol.codes import RequestCode
    from protocol.command import RemotingCommand, encode_command

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b"x" * 4000
    for i in range(messages):
        fields = {"a": "bench-pg", "b": "HaBench", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0",
                  "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
        if acl:
            fields["AccessKey"] = "bench_admin"
            fields["Signature"] = sign("bench-admin-secret", fields, body)
        writer.write(encode_command(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, opaque=i + 1,
                                                            body=body)))
        if i % 64 == 63:
            await writer.drain()
    await writer.drain()
    await asyncio.sleep(1.0)
    writer.close()


async def open_many(port: int, count: int) -> list:
    conns = []
    for _ in range(count):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            break
        writer.write(encode_report(0))
        conns.append((reader, writer))
    return conns


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--messages", type=int, default=2000, help="4 KB messages written first")
    parser.add_argument("--acl", action="store_true")
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--hold", type=float, default=10.0, help="seconds the connections stay open")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ha-bench-") as work:
        acl_path = os.path.join(work, "plain_acl.yml")
        with open(acl_path, "w", encoding="utf-8") as f:
            f.write(ACL)
        ha_port = free_port()
        broker, _ = prepare_broker(work, 64 * 1024 * 1024, None, broker_name="ha-bench", embedded_namesrv=False,
                                   root=args.root, extra={"haListenPort": ha_port, "enableVipChannel": "false",
                                                          "aclEnable": "true" if args.acl else "false",
                                                          "aclFile": acl_path})
        broker.start()
        try:
            print(json.dumps(await measure(args, broker, ha_port)))
        finally:
            broker.stop()


async def measure(args: argparse.Namespace, broker: BrokerProcess, ha_port: int) -> dict[str, object]:
    """Fill the log, then the broker's RSS before, while N HA connections are open, and after they closed."""
    pid = broker.pid
    assert pid is not None
    await fill_log(broker.port, args.messages, args.acl)
    before = rss_mb(pid)
    started = time.monotonic()
    conns = await open_many(ha_port, args.connections)
    await asyncio.sleep(args.hold)
    during = rss_mb(pid)
    # the master closed it: EOF or a reset seen by the stream (even if nothing was read)
    closed = sum(1 for reader, _ in conns if reader._eof or reader.exception() is not None)
    for _, writer in conns:
        writer.close()
    await asyncio.sleep(3.0)
    after = rss_mb(pid)
    return {"root": args.root, "acl": args.acl, "connections": len(conns), "closed_by_master": closed,
            "rss_mb_before": round(before, 1), "rss_mb_with_connections": round(during, 1),
            "rss_mb_after_close": round(after, 1), "seconds": round(time.monotonic() - started, 1)}

if __name__ == "__main__":
    asyncio.run(main())
