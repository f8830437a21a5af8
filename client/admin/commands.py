"""The mqadmin sub-commands: ``async def name(admin, args) -> exit code``.

Each prints a table (or ``--json``) on stdout and raises client.admin.AdminError subclasses for
failures; cli.main turns those into a message on stderr and the exit code.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from client.admin import AdminClient, AdminError, NotFoundError, RequestFailedError, UnreachableError
from client.admin.format import (body_text, dump_json, format_time, key_values, message_json, numbers_as_numbers,
                                 print_message, table)
from protocol.config_bodies import SubscriptionGroupConfig, TopicConfig
from protocol.message import MessageRecord

PULL_BATCH = 32
DLQ_PREFIX = "%DLQ%"
# Topics never searched when looking a UNIQ_KEY up across "every topic".
_SKIPPED_SEARCH_TOPICS = ("SCHEDULE_TOPIC_XXXX", "TBW102", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "BenchmarkTest",
                          "RMQ_SYS_TRACE_TOPIC")


def _out(args: argparse.Namespace, obj: Any) -> None:
    dump_json(obj)


async def _targets(admin: AdminClient, args: argparse.Namespace) -> dict[str, str]:
    """Brokers a write command goes to: -b addr, -c cluster's masters, or every master."""
    if getattr(args, "broker_addr", None):
        return {args.broker_addr: args.broker_addr}
    masters = await admin.master_addrs(getattr(args, "cluster", None))
    if not masters:
        raise NotFoundError("no master broker is registered with the name server")
    return masters


# ---- topics ---------------------------------------------------------------------------------------
async def update_topic(admin: AdminClient, args: argparse.Namespace) -> int:
    config = TopicConfig(args.topic, args.read_queues, args.write_queues, args.perm, order=args.order)
    done = []
    for addr in (await _targets(admin, args)).values():
        await admin.create_topic(addr, config, args.attributes)
        done.append(addr)
        if not args.json:
            print(f"create topic to {addr} success.")
    if args.json:
        _out(args, {"brokers": done, "topicConfig": config.to_json(), "attributes": args.attributes or ""})
    else:
        print(f"TopicConfig [topicName={config.topic_name}, readQueueNums={config.read_queue_nums}, "
              f"writeQueueNums={config.write_queue_nums}, perm={config.perm}, order={str(config.order).lower()}, "
              f"attributes={args.attributes or ''}]")
    return 0


def _message_type(config: TopicConfig | None) -> str:
    """A topic's 5.x message type (its attribute message.type; none = NORMAL), "?" when the broker lacks it."""
    if config is None:
        return "?"
    return (config.attributes or {}).get("message.type") or "NORMAL"


async def _message_types(admin: AdminClient, topic: str, brokers: dict[str, str]) -> dict[str, str]:
    """broker name -> the topic's message type there (from its topic configs; "?" when it cannot be read)."""
    out = {}
    for name, addr in brokers.items():
        try:
            out[name] = _message_type((await admin.topic_configs(addr)).get(topic))
        except AdminError:
            out[name] = "?"
    return out


def _types_line(types: dict[str, str]) -> str:
    kinds = set(types.values())
    if len(kinds) == 1:
        return f"Message type: {kinds.pop()}"
    return "Message type: " + ", ".join(f"{name} {kind}" for name, kind in sorted(types.items()))


async def delete_topic(admin: AdminClient, args: argparse.Namespace) -> int:
    route = await admin.topic_route(args.topic)
    brokers = [b for b in route.broker_datas if args.cluster is None or b.cluster == args.cluster]
    if not brokers:
        raise NotFoundError(f"topic {args.topic!r} has no broker in cluster {args.cluster!r}")
    deleted = []
    for data in brokers:
        addr = data.master_addr()
        if addr:
            await admin.delete_topic_in_broker(addr, args.topic)
            deleted.append(addr)
    await admin.delete_topic_in_namesrv(args.topic, args.cluster)
    if args.json:
        _out(args, {"topic": args.topic, "brokers": deleted})
    else:
        print(f"delete topic [{args.topic}] from {', '.join(deleted)} and the name server success.")
    return 0


async def topic_list(admin: AdminClient, args: argparse.Namespace) -> int:
    topics = await admin.topic_list()
    if args.json:
        _out(args, {"topicList": topics})
    else:
        for topic in topics:
            print(topic)
    return 0


async def topic_route(admin: AdminClient, args: argparse.Namespace) -> int:
    route = await admin.topic_route(args.topic)
    masters = {b.broker_name: b.master_addr() for b in route.broker_datas if b.master_addr()}
    types = await _message_types(admin, args.topic, masters)
    if args.json:
        out = route.to_json()
        for queue_data in out.get("queueDatas") or []:
            queue_data["messageType"] = types.get(queue_data.get("brokerName"), "?")
        _out(args, out)
        return 0
    table(["#Broker Name", "#Cluster", "#BID", "#Addr"],
          [(b.broker_name, b.cluster, bid, addr) for b in route.broker_datas for bid, addr in sorted(b.broker_addrs.items())])
    print()
    table(["#Broker Name", "#Read Queues", "#Write Queues", "#Perm", "#Message Type"],
          [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, types.get(q.broker_name, "?"))
           for q in route.queue_datas])
    return 0


async def topic_status(admin: AdminClient, args: argparse.Namespace) -> int:
    rows = []
    brokers = await admin.topic_brokers(args.topic)
    types = await _message_types(admin, args.topic, brokers)
    for name, addr in brokers.items():
        stats = await admin.topic_stats(addr, args.topic)
        for mq, offsets in sorted(stats.offset_table.items()):
            rows.append({"brokerName": mq.broker_name, "queueId": mq.queue_id, "minOffset": offsets.min_offset,
                         "maxOffset": offsets.max_offset, "lastUpdateTimestamp": offsets.last_update_timestamp})
    if args.json:
        kinds = set(types.values())
        _out(args, {"topic": args.topic, "messageType": kinds.pop() if len(kinds) == 1 else types,
                    "queues": rows})
        return 0
    print(_types_line(types))
    table(["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"],
          [(r["brokerName"], r["queueId"], r["minOffset"], r["maxOffset"], format_time(r["lastUpdateTimestamp"]))
           for r in rows])
    return 0


# ---- groups ---------------------------------------------------------------------------------------
async def update_sub_group(admin: AdminClient, args: argparse.Namespace) -> int:
    done = []
    final: SubscriptionGroupConfig | None = None
    for addr in (await _targets(admin, args)).values():
        existing = (await admin.subscription_groups(addr)).get(args.group)
        config = existing or SubscriptionGroupConfig(group_name=args.group)
        if args.retry_max is not None:
            config.retry_max_times = args.retry_max
        if args.retry_queues is not None:
            config.retry_queue_nums = args.retry_queues
        if args.consume_enable is not None:
            config.consume_enable = args.consume_enable
        if args.broadcast_enable is not None:
            config.consume_broadcast_enable = args.broadcast_enable
        if args.orderly is not None:
            config.consume_message_orderly = args.orderly
        await admin.update_subscription_group(addr, config)
        done.append(addr)
        final = config
        if not args.json:
            print(f"create subscription group to {addr} success.")
    assert final is not None
    if args.json:
        _out(args, {"brokers": done, "subscriptionGroupConfig": final.to_json()})
    else:
        print(f"SubscriptionGroupConfig [groupName={final.group_name}, consumeEnable={str(final.consume_enable).lower()}, "
              f"retryQueueNums={final.retry_queue_nums}, retryMaxTimes={final.retry_max_times}, "
              f"consumeMessageOrderly={str(final.consume_message_orderly).lower()}]")
    return 0


async def consumer_progress(admin: AdminClient, args: argparse.Namespace) -> int:
    rows = []
    tps = 0.0
    masters = await admin.master_addrs()
    unreachable: list[UnreachableError] = []
    for name, addr in masters.items():
        try:
            stats = await admin.consume_stats(addr, args.group, args.topic)
        except UnreachableError as exc:  # report the others; say which broker is missing
            unreachable.append(exc)
            print(f"warning: {exc}", file=sys.stderr)
            continue
        tps += stats.consume_tps
        for mq, wrapper in stats.offset_table.items():
            rows.append({"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
                         "brokerOffset": wrapper.broker_offset, "consumerOffset": wrapper.consumer_offset,
                         "diff": wrapper.broker_offset - wrapper.consumer_offset,
                         "lastTimestamp": wrapper.last_timestamp})
    if unreachable and len(unreachable) == len(masters):
        raise unreachable[-1]
    if not rows:
        raise NotFoundError(f"consumer group {args.group!r} has no consume progress"
                            + (f" on topic {args.topic!r}" if args.topic else "")
                            + " (no committed offsets and not online)")
    rows.sort(key=lambda r: (r["topic"], r["brokerName"], r["queueId"]))
    total = sum(r["diff"] for r in rows)
    if args.json:
        _out(args, {"group": args.group, "consumeTps": tps, "diffTotal": total, "queues": rows})
        return 0
    table(["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff", "#LastTime"],
          [(r["topic"], r["brokerName"], r["queueId"], r["brokerOffset"], r["consumerOffset"], r["diff"],
            format_time(r["lastTimestamp"])) for r in rows])
    print()
    print(f"Consume TPS: {tps:.2f}")
    print(f"Consume Diff Total: {total}")
    return 0


async def consumer_connection(admin: AdminClient, args: argparse.Namespace) -> int:
    connection = None
    last_error: AdminError | None = None
    for name, addr in (await admin.master_addrs()).items():
        try:
            connection = await admin.consumer_connection(addr, args.group)
            break
        except (NotFoundError, RequestFailedError) as exc:
            last_error = exc
    if connection is None:
        raise NotFoundError(f"consumer group {args.group!r} is not online"
                            + (f" ({last_error})" if last_error and "not online" not in str(last_error) else ""))
    if args.json:
        _out(args, connection.to_json())
        return 0
    table(["#", "#ClientId", "#ClientAddr", "#Language", "#Version"],
          [(i, c.client_id, c.client_addr, c.language, c.version)
           for i, c in enumerate(sorted(connection.connection_set, key=lambda c: c.client_id), 1)])
    print()
    print("Below is subscription:")
    table(["#", "#Topic", "#SubExpression"],
          [(i, topic, sub.sub_string) for i, (topic, sub) in enumerate(sorted(connection.subscription_table.items()), 1)])
    print()
    key_values([("ConsumeType", connection.consume_type), ("MessageModel", connection.message_model),
                ("ConsumeFromWhere", connection.consume_from_where)])
    return 0


async def producer_connection(admin: AdminClient, args: argparse.Namespace) -> int:
    """The producers of a group connected to the brokers (of the topic's route when -t is given), one row per client:
    a producer connects to every broker it sends to, so the same client is listed once."""
    addrs = await admin.topic_brokers(args.topic) if args.topic else await admin.master_addrs()
    clients: dict[str, Any] = {}
    for _name, addr in sorted(addrs.items()):
        try:
            connection = await admin.producer_connection(addr, args.group)
        except NotFoundError:
            continue
        for c in connection.connection_set:
            clients.setdefault(c.client_id, c)
    if not clients:
        where = f"the brokers of topic {args.topic!r}" if args.topic else "any broker"
        raise NotFoundError(f"producer group {args.group!r} is not connected to {where}")
    rows = [clients[k] for k in sorted(clients)]
    if args.json:
        _out(args, {"connectionSet": [c.to_json() for c in rows]})
        return 0
    table(["#", "#ClientId", "#ClientAddr", "#Language", "#Version"],
          [(i, c.client_id, c.client_addr, c.language, c.version) for i, c in enumerate(rows, 1)])
    return 0


# ---- messages -------------------------------------------------------------------------------------
def _show_messages(args: argparse.Namespace, records: list[tuple[str, MessageRecord]], single: bool = False) -> None:
    if args.json:
        items = [dict(message_json(r), brokerName=name) for name, r in records]
        _out(args, items[0] if single and items else items)
        return
    if single and records:
        print_message(records[0][1])
        return
    table(["#Broker Name", "#QID", "#Offset", "#Message ID", "#Tags", "#Keys", "#Store Time", "#Body"],
          [(name, r.queue_id, r.queue_offset, r.uniq_key or r.offset_msg_id, r.tags, " ".join(r.keys) or None,
            format_time(r.store_timestamp), body_text(r.body, 60)) for name, r in records])


async def query_msg_by_id(admin: AdminClient, args: argparse.Namespace) -> int:
    msg_id = args.msg_id.strip()
    try:
        record = await admin.view_message_by_offset_id(msg_id)
        _show_messages(args, [("", record)], single=True)
        return 0
    except (NotFoundError, UnreachableError):
        pass  # not an offset id (or its broker is gone): try it as a UNIQ_KEY
    masters = await admin.master_addrs()
    for name, addr in masters.items():
        topics = [args.topic] if args.topic else [
            t for t in await admin.topic_configs(addr) if t not in _SKIPPED_SEARCH_TOPICS]
        for topic in topics:
            found = await admin.query_message(addr, topic, msg_id, max_num=32, unique=True)
            if found:
                newest = max(found, key=lambda r: r.physical_offset)
                _show_messages(args, [(name, newest)], single=True)
                return 0
    raise NotFoundError(f"no message with id {msg_id!r}" + (f" in topic {args.topic!r}" if args.topic else ""))


async def query_msg_by_key(admin: AdminClient, args: argparse.Namespace) -> int:
    found: list[tuple[str, MessageRecord]] = []
    for name, addr in (await admin.topic_brokers(args.topic)).items():
        for record in await admin.query_message(addr, args.topic, args.key, args.max_num, args.begin, args.end):
            found.append((name, record))
    if not found:
        raise NotFoundError(f"no message with key {args.key!r} in topic {args.topic!r}")
    found.sort(key=lambda item: (item[1].store_timestamp, item[1].physical_offset))
    _show_messages(args, found[: args.max_num])
    return 0


async def query_msg_by_offset(admin: AdminClient, args: argparse.Namespace) -> int:
    brokers = await admin.topic_brokers(args.topic)
    addr = brokers.get(args.broker_name)
    if addr is None:
        raise NotFoundError(f"broker {args.broker_name!r} does not host topic {args.topic!r} "
                            f"(brokers: {', '.join(brokers)})")
    result = await admin.pull(addr, args.topic, args.queue_id, args.offset, 1)
    records = [r for r in result.records if r.queue_offset == args.offset]
    if not records:
        raise NotFoundError(f"no message at {args.topic}:{args.broker_name}:{args.queue_id} offset {args.offset} "
                            f"(queue holds offsets {result.min_offset}..{max(result.max_offset - 1, result.min_offset)})")
    _show_messages(args, [(args.broker_name, records[0])], single=True)
    return 0


async def _read_queue(admin: AdminClient, addr: str, topic: str, queue_id: int, begin: int, end: int,
                      limit: int) -> list[MessageRecord]:
    """Messages with queue offsets in [begin, end), at most `limit`; bounded by the queue's progress."""
    out: list[MessageRecord] = []
    offset = begin
    while offset < end and len(out) < limit:
        result = await admin.pull(addr, topic, queue_id, offset, min(PULL_BATCH, limit - len(out)))
        if result.code != 0 or result.next_begin_offset <= offset:
            if result.next_begin_offset > offset:  # filtered / moved: skip ahead
                offset = result.next_begin_offset
                continue
            break
        out.extend(r for r in result.records if begin <= r.queue_offset < end)
        offset = result.next_begin_offset
    return out[:limit]


async def _topic_messages(admin: AdminClient, topic: str, begin_ms: int | None, end_ms: int | None,
                          limit: int) -> list[tuple[str, str, MessageRecord]]:
    """(broker name, broker addr, record) for every queue of `topic`, in queue order."""
    route = await admin.topic_route(topic)
    addrs = {b.broker_name: b.master_addr() for b in route.broker_datas if b.master_addr()}
    out: list[tuple[str, str, MessageRecord]] = []
    for data in sorted(route.queue_datas, key=lambda q: q.broker_name):
        addr = addrs.get(data.broker_name)
        if addr is None:
            continue
        for queue_id in range(data.read_queue_nums):
            if len(out) >= limit:
                return out
            low, high = await admin.offsets(addr, topic, queue_id)
            begin = await admin.search_offset(addr, topic, queue_id, begin_ms) if begin_ms is not None else low
            end = await admin.search_offset(addr, topic, queue_id, end_ms) if end_ms is not None else high
            for record in await _read_queue(admin, addr, topic, queue_id, max(begin, low), min(end, high),
                                            limit - len(out)):
                out.append((data.broker_name, addr, record))
    return out


async def print_msg(admin: AdminClient, args: argparse.Namespace) -> int:
    found = await _topic_messages(admin, args.topic, args.begin, args.end, args.max_messages)
    _show_messages(args, [(name, record) for name, _addr, record in found])
    if not args.json:
        print(f"\n{len(found)} message(s)" + (" (limit reached; use -m to raise it)"
                                            if len(found) >= args.max_messages else ""))
    return 0


# ---- brokers --------------------------------------------------------------------------------------
LAG_KEY = "haReplicationLagBytes"


def _lag_applies(info: dict[str, Any], has_slave: bool | None) -> bool:
    """Replication lag means something only where a slave exists: on a slave, or on a master with a slave
    registered (``has_slave``; None when the name server was not asked: then the master's own slave count)."""
    if info.get("brokerRole") == "SLAVE":
        return True
    if has_slave is not None:
        return has_slave
    return str(info.get("haSlaveCount", "0")) not in ("", "0")


def _runtime_view(info: dict[str, Any], has_slave: bool | None) -> dict[str, Any]:
    """A broker's runtime table with numbers as numbers and no replication lag where no slave exists."""
    view = numbers_as_numbers(info)
    if LAG_KEY in view and not _lag_applies(view, has_slave):
        view[LAG_KEY] = None
    return view


async def cluster_list(admin: AdminClient, args: argparse.Namespace) -> int:
    info = await admin.cluster_info()
    rows = []
    for cluster, names in sorted(info.cluster_addr_table.items()):
        for name in sorted(names):
            data = info.broker_addr_table.get(name)
            if data is None:
                continue
            has_slave = any(bid != 0 for bid in data.broker_addrs)
            for bid, addr in sorted(data.broker_addrs.items()):
                try:
                    runtime = _runtime_view(await admin.runtime_info(addr), has_slave)
                except AdminError as exc:
                    runtime = {"error": str(exc)}
                rows.append({"cluster": cluster, "brokerName": name, "brokerId": bid, "addr": addr,
                             "version": runtime.get("brokerVersionDesc"), "putTps": runtime.get("putTps"),
                             "getTps": runtime.get("getTransferedTps"),
                             "msgPutTotal": runtime.get("msgPutTotalTodayNow"),
                             "msgGetTotal": runtime.get("msgGetTotalTodayNow"),
                             "role": runtime.get("brokerRole"),
                             "replicationLag": runtime.get(LAG_KEY),
                             "runtime": runtime.get("runtime", runtime.get("error"))})
    if args.json:
        _out(args, {"brokers": rows, "clusterAddrTable": {c: sorted(n) for c, n in info.cluster_addr_table.items()}})
        return 0
    table(["#Cluster Name", "#Broker Name", "#BID", "#Role", "#Addr", "#Version", "#InTPS", "#OutTPS", "#PutTotal",
           "#GetTotal", "#Repl Lag (B)", "#Runtime"],
          [(r["cluster"], r["brokerName"], r["brokerId"], r["role"], r["addr"], r["version"], r["putTps"],
            r["getTps"], r["msgPutTotal"], r["msgGetTotal"], r["replicationLag"], r["runtime"]) for r in rows])
    return 0


async def _slave_registered(admin: AdminClient) -> dict[str, bool] | None:
    """Broker address -> whether its broker group has a slave, from the name server (None when it cannot say)."""
    try:
        info = await admin.cluster_info()
    except AdminError:
        return None
    out: dict[str, bool] = {}
    for data in info.broker_addr_table.values():
        has_slave = any(bid != 0 for bid in data.broker_addrs)
        for addr in data.broker_addrs.values():
            out[addr] = has_slave
    return out


async def broker_status(admin: AdminClient, args: argparse.Namespace) -> int:
    results: dict[str, dict[str, Any]] = {}
    targets = await _targets(admin, args)
    slaves = await _slave_registered(admin)
    for name, addr in targets.items():
        results[addr] = _runtime_view(await admin.runtime_info(addr), (slaves or {}).get(addr))
    if args.json:
        _out(args, results)
        return 0
    for i, (addr, info) in enumerate(results.items()):
        if len(results) > 1:
            print(("\n" if i else "") + f"== {info.get('brokerName', addr)} ({addr}) ==")
        key_values(sorted(info.items()))
    return 0


# ---- dead letters ---------------------------------------------------------------------------------
async def _dead_messages(admin: AdminClient, group: str, limit: int) -> list[tuple[str, str, MessageRecord]]:
    topic = DLQ_PREFIX + group
    try:
        return await _topic_messages(admin, topic, None, None, limit)
    except NotFoundError:
        raise NotFoundError(f"consumer group {group!r} has no dead-letter queue ({topic} does not exist)") from None


def _dead_row(name: str, record: MessageRecord) -> dict[str, Any]:
    return dict(message_json(record, full_body=False), brokerName=name,
                originalTopic=record.properties.get("RETRY_TOPIC") or record.properties.get("REAL_TOPIC"),
                originMsgId=record.properties.get("ORIGIN_MESSAGE_ID"))


async def dlq_list(admin: AdminClient, args: argparse.Namespace) -> int:
    found = await _dead_messages(admin, args.group, args.max_messages)
    rows = [_dead_row(name, record) for name, _addr, record in found]
    if args.json:
        _out(args, {"group": args.group, "messages": rows})
        return 0
    table(["#Broker Name", "#Offset", "#Message ID", "#Original Topic", "#Reconsume", "#Store Time", "#Keys", "#Body"],
          [(r["brokerName"], r["queueOffset"], r["msgId"], r["originalTopic"], r["reconsumeTimes"],
            format_time(r["storeTimestamp"]), " ".join(r["keys"]) or None, body_text(r["body"].encode(), 50))
           for r in rows])
    print(f"\n{len(rows)} dead message(s) in {DLQ_PREFIX}{args.group}")
    return 0


async def resend_dlq(admin: AdminClient, args: argparse.Namespace) -> int:
    sent: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    if args.msg_id:
        try:
            brokers = await admin.topic_brokers(DLQ_PREFIX + args.group)
        except NotFoundError:
            raise NotFoundError(f"consumer group {args.group!r} has no dead-letter queue") from None
        last: AdminError | None = None
        for name, addr in brokers.items():
            try:
                result = await admin.resend_dlq_message(addr, args.group, msg_id=args.msg_id, topic=args.topic,
                                                        to_original_topic=args.to_original, force=args.force)
            except NotFoundError as exc:
                last = exc
                continue
            except RequestFailedError as exc:
                if "already resent" in str(exc):
                    raise RequestFailedError(f"{exc} (mqadmin: add --force)", exc.code, exc.remark) from None
                raise
            sent.append(dict(result, deadMsgId=args.msg_id, brokerName=name))
            break
        if not sent:
            raise NotFoundError(f"no message {args.msg_id!r} in {DLQ_PREFIX}{args.group}"
                                + (f" ({last})" if last else ""))
    else:
        for name, addr, record in await _dead_messages(admin, args.group, args.max_messages):
            dead_id = record.uniq_key or record.offset_msg_id
            try:
                result = await admin.resend_dlq_message(addr, args.group, offset=record.physical_offset,
                                                        topic=args.topic, to_original_topic=args.to_original,
                                                        force=args.force)
            except (NotFoundError, RequestFailedError) as exc:
                failed.append({"deadMsgId": dead_id, "brokerName": name, "error": str(exc)})
                continue
            sent.append(dict(result, deadMsgId=dead_id, brokerName=name))
    if args.json:
        _out(args, {"group": args.group, "resent": sent, "failed": failed})
    else:
        table(["#Dead Message ID", "#Sent To Topic", "#Broker", "#QID", "#Queue Offset", "#New Offset Message ID"],
              [(s["deadMsgId"], s.get("topic"), s.get("brokerName"), s.get("queueId"), s.get("queueOffset"),
                s.get("msgId")) for s in sent])
        targets = sorted({str(s.get("topic")) for s in sent})
        print(f"\nre-sent {len(sent)} message(s) from {DLQ_PREFIX}{args.group}"
              + (f" to {', '.join(targets)}" if targets else "")
              + (" (only this group consumes them again)" if targets == [f"%RETRY%{args.group}"] else "")
              + (f"; {len(failed)} failed" if failed else ""))
        for f in failed:
            print(f"failed: {f['deadMsgId']} on {f['brokerName']}: {f['error']}", file=sys.stderr)
        if any("already resent" in f["error"] for f in failed):
            print("letters resent before were left alone: add --force to resend them again", file=sys.stderr)
    return 1 if failed else 0

