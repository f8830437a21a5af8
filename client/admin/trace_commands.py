"""mqadmin queryMsgTraceById (alias queryTraceByMsgId): a message's trace, read from the trace topic.

Trace messages carry the traced msgIds in their KEYS, so QUERY_MESSAGE by key on each broker of the trace topic finds
them; their bodies are decoded with protocol/trace.py (the reference clients' format) and the records of this msgId
are printed: the send (producer group, client host, time, cost, status, store host), then each consumer group's
consumptions (time, cost, status)."""

from __future__ import annotations

import argparse
import zlib

from client.admin import AdminClient, NotFoundError
from client.admin.format import dump_json, format_time, table
from protocol.trace import TRACE_TOPIC, decode_records, message_trace

__all__ = ["query_msg_trace_by_id", "add_parsers"]


async def query_msg_trace_by_id(admin: AdminClient, args: argparse.Namespace) -> int:
    trace_topic = args.trace_topic or TRACE_TOPIC
    try:
        brokers = await admin.topic_brokers(trace_topic)
    except NotFoundError:
        raise NotFoundError(f"the trace topic {trace_topic} does not exist (set traceTopicEnable=true on the broker, "
                            "or name the topic with -t)") from None
    found = []
    for _name, addr in sorted(brokers.items()):
        for record in await admin.query_message(addr, trace_topic, args.msg_id, args.max_num, args.begin, args.end):
            host = "%s:%d" % record.born_host
            body = record.body
            if record.sys_flag & 0x1:  # a Java trace producer compresses bodies over 4 KiB
                try:
                    body = zlib.decompressobj().decompress(body, 4 * 1024 * 1024)
                except zlib.error:
                    continue
            found.extend((r, host) for r in decode_records(body))
    trace = message_trace(found, args.msg_id)
    if not trace["sends"] and not trace["consumers"] and not trace["transactions"]:
        raise NotFoundError(f"no trace of message {args.msg_id} in {trace_topic}")
    if args.json:
        dump_json(dict(trace, traceTopic=trace_topic))
        return 0
    if trace["sends"]:
        table(["#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status", "#StoreHost", "#Topic"],
              [("Pub", s["producerGroup"], s["clientHost"], format_time(s["time"]), f"{s['costMs']}ms", s["status"],
                s["storeHost"], s["topic"]) for s in trace["sends"]])
        print()
    for end in trace["transactions"]:
        print(f"EndTransaction {end['producerGroup']} {format_time(end['time'])} {end['state']}"
              + (" (from a check)" if end["fromCheck"] else ""))
    for group in trace["consumers"]:
        table(["#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status", "#Retry"],
              [("Sub", c["consumerGroup"], c["clientHost"], format_time(c["time"]),
                "-" if c["costMs"] is None else f"{c['costMs']}ms", c["status"], c["retryTimes"])
               for c in group["consumptions"]])
        print()
    return 0


def add_parsers(add, parse_time_ms, positive) -> None:  # noqa: ANN001 (cli.py's helpers)
    for name in ("queryMsgTraceById", "queryTraceByMsgId"):
        p = add(name, query_msg_trace_by_id,
                "Show a message's trace: who sent it when and where it was stored, which groups consumed it")
        p.add_argument("-i", "--msgId", dest="msg_id", required=True, help="the message id (UNIQ_KEY)")
        p.add_argument("-t", "--traceTopic", dest="trace_topic", help="the trace topic (default RMQ_SYS_TRACE_TOPIC)")
        p.add_argument("-b", "--beginTimestamp", dest="begin", type=parse_time_ms, default=0)
        p.add_argument("-e", "--endTimestamp", dest="end", type=parse_time_ms)
        p.add_argument("-c", "--maxNum", dest="max_num", type=positive, default=64)
