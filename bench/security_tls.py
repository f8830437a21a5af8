"""TLS cost on the send path: pipelined and batch sends to a broker with tlsMode=disabled (plaintext) and
tlsMode=enforcing (TLS 1.3 from the first byte, certificate made at start with `cryptography`), ratio printed.

    PYTHONPATH=. python bench/security_tls.py [--count 20000] [--window 64] [--batch 32] [--limit 15]

Each mode runs in a fresh broker subprocess (uvloop) with its embedded name server; the client is our Producer
(tls=True, tls_ca_path=CA for the TLS run). Figures are messages/s (128-byte bodies) on loopback; on the shared
2-core box they move by +-15 % between runs, so only the ratio is worth quoting.

Measured (defaults, shared 2-core box, uvloop broker):
    phase       plaintext msg/s    TLS msg/s  TLS/plain
    pipelined            17,201       15,648       0.91
    batch                71,010       66,915       0.94
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [BENCH_DIR, os.path.dirname(BENCH_DIR)]

from tests.support.broker_process import prepare_broker  # noqa: E402
from client import Producer  # noqa: E402
from phases import phase_batch, phase_pipelined  # noqa: E402
from tests.support.tls_certs import make_pki  # noqa: E402


async def measure(namesrv: str, args: argparse.Namespace, ca: str | None) -> dict[str, float]:
    tls = {"tls": True, "tls_ca_path": ca} if ca else {}
    async with Producer("bench-tls-pg", namesrv, **tls) as producer:
        pipelined = await phase_pipelined(producer, "BenchTls", args.count, args.limit, args.window)
        batch, _ = await phase_batch(producer, "BenchTlsBatch", args.count * 2, args.limit, args.batch, 4)
    return {"pipelined": pipelined.rate, "batch": batch.rate}


def run_mode(workdir: str, mode: str, pki, args: argparse.Namespace) -> dict[str, float]:
    os.makedirs(os.path.join(workdir, mode))
    broker, namesrv_port = prepare_broker(os.path.join(workdir, mode), 64 * 1024 * 1024, None)
    if mode != "disabled":
        with open(broker.conf_path, "a", encoding="utf-8") as conf:
            conf.write(f"tlsMode={mode}\ntlsServerCertPath={pki.server_cert}\ntlsServerKeyPath={pki.server_key}\n")
    broker.start()
    try:
        ca = str(pki.ca) if mode != "disabled" else None
        return asyncio.run(measure(f"127.0.0.1:{namesrv_port}", args, ca))
    finally:
        broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000, help="pipelined sends (batch phase: twice as many)")
    parser.add_argument("--window", type=int, default=64, help="pipelined sends in flight")
    parser.add_argument("--batch", type=int, default=32, help="messages per batch (4 batches in flight)")
    parser.add_argument("--limit", type=float, default=15.0, help="seconds per phase at most")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as workdir:
        pki = make_pki(Path(workdir) / "pki")
        plain = run_mode(workdir, "disabled", pki, args)
        secure = run_mode(workdir, "enforcing", pki, args)
    print(f"{'phase':<10} {'plaintext msg/s':>16} {'TLS msg/s':>12} {'TLS/plain':>10}")
    for phase in ("pipelined", "batch"):
        ratio = secure[phase] / plain[phase] if plain[phase] else 0.0
        print(f"{phase:<10} {plain[phase]:>16,.0f} {secure[phase]:>12,.0f} {ratio:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
