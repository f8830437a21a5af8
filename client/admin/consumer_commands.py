"""mqadmin commands that reach a running consumer through a broker: consumerStatus, consumeMessage and
resetOffsetByTime."""

from __future__ import annotations

import argparse

from client.admin import AdminClient, AdminError, NotFoundError, RequestFailedError
from client.admin.format import dump_json, format_time, numbers_as_numbers, table
from protocol.consumer_info_bodies import ConsumerRunningInfo
from protocol.ids import decode_offset_msg_id

__all__ = ["consumer_status", "consume_message", "reset_offset_by_time"]


async def _group_clients(admin: AdminClient, group: str, broker_addr: str | None) -> tuple[str, list[str]]:
    """(broker address, client ids) of an online group: the given broker, or the first master that knows it."""
    addrs = [broker_addr] if broker_addr else list((await admin.master_addrs()).values())
    last: AdminError | None = None
    for addr in addrs:
        try:
            connection = await admin.consumer_connection(addr, group)
        except (NotFoundError, RequestFailedError) as exc:
            last = exc
            continue
        return addr, sorted(c.client_id for c in connection.connection_set)
    raise NotFoundError(f"consumer group {group!r} is not online" + (f" ({last})" if last else ""))


def _info_json(client_id: str, info: ConsumerRunningInfo) -> dict:
    return {
        "clientId": client_id,
        "properties": numbers_as_numbers(info.properties),
        "subscriptions": [{"topic": s.get("topic"), "subString": s.get("subString"),
                           "expressionType": s.get("expressionType")} for s in info.subscription_set],
        "queues": [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, **pq.to_json()}
                   for mq, pq in sorted(info.mq_table.items())],
    }


def _print_info(client_id: str, info: ConsumerRunningInfo) -> None:
    props = info.properties
    print(f"consumer {client_id}: {props.get('messageModel', '?')}, "
          f"{'orderly' if props.get('PROP_CONSUMEORDERLY') == 'true' else 'concurrently'}, "
          f"{props.get('consumeThreadMax', '?')} consume threads, started "
          f"{format_time(int(props.get('PROP_CONSUMER_START_TIMESTAMP') or 0))}")
    table(["#Topic", "#SubExpression", "#Type"],
          [(s.get("topic"), s.get("subString"), s.get("expressionType")) for s in info.subscription_set])
    print()
    table(["#Topic", "#Broker", "#QID", "#Commit Offset", "#Cached Msgs", "#Cached MiB", "#Locked",
           "#Last Pull"],
          [(mq.topic, mq.broker_name, mq.queue_id, pq.commit_offset, pq.cached_msg_count, pq.cached_msg_size_in_mib,
            "yes" if pq.locked else "no", format_time(pq.last_pull_timestamp) if pq.last_pull_timestamp else "-")
           for mq, pq in sorted(info.mq_table.items())])
    print()


async def consumer_status(admin: AdminClient, args: argparse.Namespace) -> int:
    addr, clients = await _group_clients(admin, args.group, args.broker_addr)
    if args.client_id:
        if args.client_id not in clients:
            raise NotFoundError(f"consumer {args.client_id!r} of group {args.group!r} is not online "
                                f"(online: {', '.join(clients) or 'none'})")
        clients = [args.client_id]
    infos = [(cid, await admin.consumer_running_info(addr, args.group, cid)) for cid in clients]
    if args.json:
        dump_json({"group": args.group, "consumers": [_info_json(cid, info) for cid, info in infos]})
        return 0
    for cid, info in infos:
        _print_info(cid, info)
    print(f"{len(infos)} consumer(s) of group {args.group} online")
    return 0


async def consume_message(admin: AdminClient, args: argparse.Namespace) -> int:
    try:
        host, port, _ = decode_offset_msg_id(args.msg_id)
    except ValueError:
        raise RequestFailedError(f"{args.msg_id!r} is not an offset message id (32 hex digits; queryMsgByKey and "
                                 f"printMsg show it as the offset message id)", 1, None) from None
    addr = args.broker_addr or f"{host}:{port}"
    result = await admin.consume_message_directly(addr, args.group, args.client_id, args.msg_id, args.topic)
    outcome = result.consume_result.value if result.consume_result else "UNKNOWN"
    if args.json:
        dump_json({"group": args.group, "clientId": args.client_id, "msgId": args.msg_id, "order": result.order,
                   "autoCommit": result.auto_commit, "consumeResult": outcome, "remark": result.remark,
                   "spentTimeMills": result.spent_time_mills})
    else:
        print(f"consumer {args.client_id} consumed {args.msg_id}: {outcome} in {result.spent_time_mills} ms"
              + (f" ({result.remark})" if result.remark else ""))
    return 0


async def reset_offset_by_time(admin: AdminClient, args: argparse.Namespace) -> int:
    """Every broker of the topic moves the group's offsets to the first message stored at or after the time (-1: the
    end) and tells the group's online consumers, which resume there."""
    rows = []
    told = 0
    for name, addr in (await admin.topic_brokers(args.topic)).items():
        table_, online = await admin.reset_offset(addr, args.group, args.topic, args.timestamp, args.force)
        told += online
        rows += [{"brokerName": name, "queueId": mq.queue_id, "offset": offset}
                 for mq, offset in sorted(table_.items())]
    if args.json:
        dump_json({"group": args.group, "topic": args.topic, "timestamp": args.timestamp, "consumersTold": told,
                   "offsets": rows})
        return 0
    table(["#brokerName", "#queueId", "#offset"], [(r["brokerName"], r["queueId"], r["offset"]) for r in rows])
    print(f"\n{told} online consumer(s) told." if told else "\nNo consumer of the group is online: the committed "
          "offsets were changed; the group starts there.")
    return 0
