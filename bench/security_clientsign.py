"""Issue 12, client side of plain ACL: what signing costs our client, and that the unsigned path is unchanged.

    python bench/security_clientsign.py [--seconds 3] [--rounds 2] [--window 64] [--size 128]

1. micro: client-side cost of one SEND_MESSAGE_V2 (13 ext fields, --size B body) from fields to frame bytes:
   the unsigned header template (client/wire.py), the signed template the producer uses (HMAC state over the fixed
   leading values computed once), and the general path every other request takes (RemotingCommand,
   Credentials.sign, encode_command), JSON and msgpack headers -> microseconds per send;
2. end to end: our Producer, --window sends in flight for --seconds, against a real broker of this checkout:
   unsigned and signed to a broker with ACL off (the broker ignores the extra fields: the client's cost alone),
   signed to a broker with ACL on -> sends/s (best of --rounds, alternating).

Figures (2-core machine shared with 5 other jobs; noise +-10%), `python bench/security_clientsign.py`:
  micro  JSON     unsigned template 1.2 us/send   signed template 4.1 us/send   signed general command 18.3 us/send
  micro  MSGPACK  unsigned template 1.2 us/send   signed template 4.4 us/send   signed general command 14.8 us/send
  e2e    unsigned, ACL off  20,069 sends/s
  e2e    signed,   ACL off  18,154 sends/s   /unsigned 0.90   (the client's signing alone; 0.67 with the general
                                                               command path before the signed template)
  e2e    signed,   ACL on   11,853 sends/s   /unsigned 0.59   (signing + the broker's check)
The unsigned path is unchanged (same template; one `credentials is None` test per send).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.broker_process import BrokerProcess

from client import Credentials, Message, Producer
from client.wire import frame, make_send_header_builder, make_signed_send_header_builder
from protocol.codes import RequestCode, SerializeType
from protocol.command import RemotingCommand, encode_command

CREDENTIALS = Credentials("bench_producer", "bench-secret-not-for-production")
TOPIC = "ClientSignBench"
ACL_YAML = f"""accounts:
  - accessKey: ops_admin_01
    secretKey: "0p5-s3cret"
    admin: true
  - accessKey: {CREDENTIALS.access_key}
    secretKey: {CREDENTIALS.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {TOPIC}=PUB|SUB
"""
PROPS = "UNIQ_KEY\x017F0000010000000000000000000001\x02WAIT\x01true\x02"


def micro(serialize_type: int, size: int, n: int = 20000) -> tuple[float, float, float]:
    """us per send: unsigned template, signed template (the producer's path), general signed command path."""
    body = b"x" * size
    options = {"serialize_type": serialize_type, "producer_group": "pg", "topic": TOPIC, "broker_name": "broker-a"}
    build = make_send_header_builder(**options)
    start = time.perf_counter()
    for i in range(n):
        frame(serialize_type, build(i & 3, 0, 1700000000000 + i, 0, PROPS, i, 0), body)
    unsigned = (time.perf_counter() - start) / n * 1e6
    signed_build = make_signed_send_header_builder(access_key=CREDENTIALS.access_key,
                                                   secret_key=CREDENTIALS.secret_key, **options)
    start = time.perf_counter()
    for i in range(n):
        frame(serialize_type, signed_build(i & 3, 0, 1700000000000 + i, 0, PROPS, i, 0, body), body)
    signed = (time.perf_counter() - start) / n * 1e6
    start = time.perf_counter()
    for i in range(n):
        ext = {"a": "pg", "b": TOPIC, "c": "TBW102", "d": 4, "e": i & 3, "f": 0, "g": 1700000000000 + i, "h": 0,
               "i": PROPS, "j": 0, "k": False, "m": False, "n": "broker-a"}
        cmd = RemotingCommand(int(RequestCode.SEND_MESSAGE_V2), opaque=i, ext_fields=ext, body=body,
                              serialize_type=serialize_type)
        encode_command(CREDENTIALS.sign(cmd))
    general = (time.perf_counter() - start) / n * 1e6
    return unsigned, signed, general


async def sends_per_second(ns: str, credentials: Credentials | None, seconds: float, window: int, size: int) -> float:
    body = b"x" * size
    async with Producer("clientsign_bench_pg", ns, credentials=credentials) as producer:
        await producer.send(Message(TOPIC, body))  # route, connection, handshake
        done = 0
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await producer.send(Message(TOPIC, body))
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(window)))
        return done / (time.perf_counter() - start)


def create_topic(ns: str, credentials: Credentials | None) -> None:
    from client.admin.cli import main

    argv = ["updateTopic", "-n", ns, "-t", TOPIC, "-w", "4", "-r", "4"]
    if credentials is not None:
        argv += ["--access-key", credentials.access_key, "--secret-key", credentials.secret_key]
    if main(argv) != 0:
        raise SystemExit(f"could not create {TOPIC} on {ns}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args()

    for serialize_type in (SerializeType.JSON, SerializeType.MSGPACK):
        unsigned, signed, general = micro(serialize_type, args.size)
        print(f"micro  {serialize_type.name:8} unsigned template {unsigned:5.1f} us/send   signed template "
              f"{signed:5.1f} us/send   signed general command {general:5.1f} us/send")

    with tempfile.TemporaryDirectory(prefix="clientsign-bench-") as tmp:
        off_dir, on_dir = Path(tmp, "off"), Path(tmp, "on")
        off_dir.mkdir()
        on_dir.mkdir()
        (on_dir / "plain_acl.yml").write_text(ACL_YAML)
        off = BrokerProcess(off_dir, "acl-off").start()
        on = BrokerProcess(on_dir, "acl-on", extra={"aclEnable": "true"}).start()
        try:
            create_topic(off.namesrv_addr, None)  # prints mqadmin's lines
            create_topic(on.namesrv_addr, Credentials("ops_admin_01", "0p5-s3cret"))
            best_off = best_signed_off = best_on = 0.0
            for _ in range(max(1, args.rounds)):
                best_off = max(best_off, asyncio.run(
                    sends_per_second(off.namesrv_addr, None, args.seconds, args.window, args.size)))
                best_signed_off = max(best_signed_off, asyncio.run(
                    sends_per_second(off.namesrv_addr, CREDENTIALS, args.seconds, args.window, args.size)))
                best_on = max(best_on, asyncio.run(
                    sends_per_second(on.namesrv_addr, CREDENTIALS, args.seconds, args.window, args.size)))
        finally:
            off.stop()
            on.stop()
    print(f"e2e    unsigned, ACL off {best_off:8,.0f} sends/s")
    print(f"e2e    signed,   ACL off {best_signed_off:8,.0f} sends/s   /unsigned {best_signed_off / best_off:.2f}"
          "   (the client's signing alone)")
    print(f"e2e    signed,   ACL on  {best_on:8,.0f} sends/s   /unsigned {best_on / best_off:.2f}"
          "   (signing + the broker's check)")


if __name__ == "__main__":
    main()
