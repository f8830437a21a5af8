"""mqadmin transactionStatus: open (undecided) transactional messages per topic and producer group, per broker."""

from __future__ import annotations

import argparse
import time

from client.admin import AdminClient, NotFoundError
from client.admin.format import dump_json, format_time, table

__all__ = ["transaction_status"]


async def transaction_status(admin: AdminClient, args: argparse.Namespace) -> int:
    if args.broker_addr:
        brokers = {args.broker_addr: args.broker_addr}
    else:
        brokers = await admin.master_addrs(getattr(args, "cluster", None))
        if not brokers:
            raise NotFoundError("no master broker is registered with the name server")
    report = []
    for name, addr in sorted(brokers.items()):
        data = await admin.pending_transactions(addr)
        rows = [r for r in data.get("pending", []) if not args.topic or r.get("topic") == args.topic]
        report.append({"brokerName": data.get("brokerName", name), "brokerAddr": addr, "pending": rows,
                       "counters": data.get("counters", {})})
    if args.json:
        dump_json({"brokers": report})
        return 0
    now_ms = time.time() * 1000
    table(["#Broker", "#Topic", "#Producer Group", "#Open", "#Oldest Born", "#Age (s)"],
          [(b["brokerName"], r.get("topic"), r.get("producerGroup"), r.get("count"),
            format_time(int(r.get("oldestBornTimestamp") or 0)),
            f"{max(0.0, now_ms - int(r.get('oldestBornTimestamp') or 0)) / 1000:.0f}")
           for b in report for r in b["pending"]])
    print()
    for b in report:
        c = b["counters"]
        print(f"{b['brokerName']}: since start {c.get('commits', 0)} committed, {c.get('rollbacks', 0)} rolled back, "
              f"{c.get('checks', 0)} checks sent, {c.get('discards', 0)} given up")
    return 0
