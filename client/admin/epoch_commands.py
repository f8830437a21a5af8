"""mqadmin getBrokerEpoch (controller mode, controller.md §13): the epoch list of every replica of a broker group
(or of a cluster's groups), read with GET_BROKER_EPOCH_CACHE (1007) from each address the name server lists."""

from __future__ import annotations

import argparse

from client.admin import AdminClient, NotFoundError
from client.admin.format import dump_json
from protocol.codes import RequestCode
from protocol.controller import EpochEntryCache

__all__ = ["get_broker_epoch"]


async def get_broker_epoch(admin: AdminClient, args: argparse.Namespace) -> int:
    info = await admin.cluster_info()
    if args.broker_name:
        names = [args.broker_name]
    elif args.cluster:
        names = sorted(info.cluster_addr_table.get(args.cluster) or [])
        if not names:
            raise NotFoundError(f"cluster {args.cluster!r} has no broker registered with the name server")
    else:
        raise NotFoundError("name a broker group (-b brokerName) or a cluster (-c clusterName)")
    report = []
    for name in names:
        data = info.broker_addr_table.get(name)
        if data is None or not data.broker_addrs:
            raise NotFoundError(f"broker {name!r} is not registered with the name server")
        for broker_id, addr in sorted(data.broker_addrs.items()):
            response = admin.check(await admin.invoke(addr, RequestCode.GET_BROKER_EPOCH_CACHE),
                                   f"epochs of {name} at {addr}")
            cache = EpochEntryCache.decode(response.body) if response.body else EpochEntryCache()
            report.append({"clusterName": cache.cluster_name, "brokerName": cache.broker_name or name,
                           "brokerAddr": addr, "brokerId": cache.broker_id, "maxOffset": cache.max_offset,
                           "epochList": [{"epoch": e.epoch, "startOffset": e.start_offset, "endOffset": e.end_offset}
                                         for e in cache.epoch_list]})
    if args.json:
        dump_json({"brokers": report})
        return 0
    for r in report:
        print(f"\n#clusterName\t{r['clusterName']}\n#brokerName\t{r['brokerName']}\n#brokerAddr\t{r['brokerAddr']}\n"
              f"#brokerId\t{r['brokerId']}")
        for e in r["epochList"]:
            print(f"#Epoch: EpochEntry{{epoch={e['epoch']}, startOffset={e['startOffset']}, "
                  f"endOffset={e['endOffset']}}}")
    return 0
