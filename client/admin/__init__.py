"""Admin client: the requests behind ``mqadmin`` (name server and broker admin codes) over client.remoting.

Every method raises an `AdminError` subclass with an operator-readable message:
`UnreachableError` (cannot connect / no answer), `NotFoundError` (unknown topic, group, message) or
`RequestFailedError` (the server refused, with its response code and remark).
"""

from __future__ import annotations

import json
import ssl
import time
from dataclasses import dataclass
from typing import Any

from client.credentials import Credentials
from client.errors import RemotingClosedError, RemotingConnectError, RemotingError, RemotingTimeoutError
from client.remoting import RemotingClient
from protocol.admin_bodies import (ConsumeStats, ConsumerConnection, KVTable, ProducerConnection, ResetOffsetBody,
                                   TopicStatsTable)
from protocol.bodies import ClusterInfo, TopicList, TopicRouteData
from protocol.consumer_info_bodies import ConsumeMessageDirectlyResult, ConsumerRunningInfo
from protocol.config_bodies import SubscriptionGroupConfig, TopicConfig
from protocol.codes import PULL_FLAG_SUBSCRIPTION, RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.ids import decode_offset_msg_id
from protocol.jsonlenient import loads_lenient
from protocol.message import MessageRecord, RecordError, decode_record, iter_records

__all__ = ["AdminClient", "AdminError", "UnreachableError", "NotFoundError", "RequestFailedError", "PullResult"]

DEFAULT_TIMEOUT_S = 5.0
TOOLS_GROUP = "TOOLS_CONSUMER"
_NOT_FOUND_CODES = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.QUERY_NOT_FOUND,
                    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, ResponseCode.CONSUMER_NOT_ONLINE}


class AdminError(Exception):
    """Base of every error mqadmin reports (message = what to print)."""

    exit_code = 1


class UnreachableError(AdminError):
    exit_code = 3


class NotFoundError(AdminError):
    exit_code = 4


class RequestFailedError(AdminError):
    exit_code = 1

    def __init__(self, message: str, code: int | None = None, remark: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.remark = remark


@dataclass
class PullResult:
    code: int
    records: list[MessageRecord]
    next_begin_offset: int
    min_offset: int
    max_offset: int


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


def _request_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


class AdminClient:
    """Async admin operations; use as ``async with AdminClient("127.0.0.1:9876") as admin: ...``."""

    def __init__(self, namesrv_addr: str, timeout: float = DEFAULT_TIMEOUT_S,
                 credentials: Credentials | None = None, ssl_context: "ssl.SSLContext | None" = None) -> None:
        """credentials: sign every request (name server and brokers) for a broker with plain ACL on;
        ssl_context: TLS to name servers and brokers."""
        self.namesrv_addrs = [a.strip() for a in namesrv_addr.replace(",", ";").split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise AdminError("no name server address given (use -n host:port or NAMESRV_ADDR)")
        self.timeout = timeout
        self.remoting = RemotingClient(allow_msgpack=False, connect_timeout=min(timeout, 3.0),
                                       credentials=credentials, ssl_context=ssl_context)

    async def __aenter__(self) -> "AdminClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self.remoting.close()

    # ---- transport ------------------------------------------------------------------------------
    async def invoke(self, addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"",
                     role: str = "broker") -> RemotingCommand:
        fields = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (ext or {}).items() if v is not None}
        cmd = RemotingCommand.request(code, fields, body, opaque=self.remoting.next_opaque())
        try:
            return await self.remoting.invoke(addr, cmd, self.timeout)
        except RemotingConnectError as exc:
            raise UnreachableError(f"cannot connect to {role} {addr}: {exc}") from None
        except RemotingTimeoutError:
            raise UnreachableError(f"{role} {addr} did not answer {_request_name(code)} within "
                                   f"{self.timeout:g}s") from None
        except (RemotingClosedError, RemotingError, OSError) as exc:
            raise UnreachableError(f"connection to {role} {addr} failed: {exc}") from None
        except (ValueError, OverflowError) as exc:  # malformed host:port
            raise UnreachableError(f"invalid {role} address {addr!r}: {exc}") from None

    async def invoke_namesrv(self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
        """First name server that answers."""
        last: UnreachableError | None = None
        for addr in self.namesrv_addrs:
            try:
                return await self.invoke(addr, code, ext, body, role="name server")
            except UnreachableError as exc:
                last = exc
        assert last is not None
        raise last

    @staticmethod
    def check(response: RemotingCommand, what: str) -> RemotingCommand:
        if response.code == ResponseCode.SUCCESS:
            return response
        detail = f"{what}: {_code_name(response.code)} ({response.code})"
        if response.remark:
            detail += f": {response.remark.strip()}"
        if response.code in _NOT_FOUND_CODES:
            raise NotFoundError(detail)
        raise RequestFailedError(detail, response.code, response.remark)

    # ---- name server ----------------------------------------------------------------------------
    async def cluster_info(self) -> ClusterInfo:
        resp = self.check(await self.invoke_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO), "get cluster info")
        return ClusterInfo.decode(resp.body) if resp.body else ClusterInfo()

    async def topic_list(self) -> list[str]:
        resp = self.check(await self.invoke_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), "list topics")
        return sorted(TopicList.decode(resp.body).topic_list) if resp.body else []

    async def topic_route(self, topic: str) -> TopicRouteData:
        resp = await self.invoke_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise NotFoundError(f"topic {topic!r} does not exist (no route on the name server)")
        self.check(resp, f"route of topic {topic}")
        return TopicRouteData.decode(resp.body)

    async def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        for addr in self.namesrv_addrs:
            resp = await self.invoke(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                     {"topic": topic, "clusterName": cluster}, role="name server")
            self.check(resp, f"delete topic {topic} on name server {addr}")

    async def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """broker name -> master address (of one cluster, or all)."""
        info = await self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            known = ", ".join(sorted(info.cluster_addr_table)) or "none"
            raise NotFoundError(f"cluster {cluster!r} not found (known clusters: {known})")
        names = info.cluster_addr_table[cluster] if cluster is not None else list(info.broker_addr_table)
        out = {}
        for name in sorted(names):
            data = info.broker_addr_table.get(name)
            if data is not None and data.master_addr():
                out[name] = data.master_addr()
        return out

    async def topic_brokers(self, topic: str) -> dict[str, str]:
        """broker name -> master address of every broker hosting ``topic`` (NotFoundError if none)."""
        route = await self.topic_route(topic)
        out = {b.broker_name: b.master_addr() for b in route.broker_datas if b.master_addr()}
        if not out:
            raise NotFoundError(f"topic {topic!r} has no master broker online")
        return dict(sorted(out.items()))

    # ---- broker: topics -------------------------------------------------------------------------
    async def create_topic(self, addr: str, config: TopicConfig, attributes: str | None = None) -> None:
        """UPDATE_AND_CREATE_TOPIC; ``attributes`` is the change list, e.g. ``+message.type=FIFO``."""
        ext = {"topic": config.topic_name, "defaultTopic": "TBW102", "readQueueNums": config.read_queue_nums,
               "writeQueueNums": config.write_queue_nums, "perm": config.perm,
               "topicFilterType": config.topic_filter_type, "topicSysFlag": config.topic_sys_flag,
               "order": config.order}
        if attributes:
            ext["attributes"] = attributes
        self.check(await self.invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext),
                   f"create topic {config.topic_name} on {addr}")

    async def delete_topic_in_broker(self, addr: str, topic: str) -> None:
        self.check(await self.invoke(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}),
                   f"delete topic {topic} on {addr}")

    async def topic_configs(self, addr: str) -> dict[str, TopicConfig]:
        resp = self.check(await self.invoke(addr, RequestCode.GET_ALL_TOPIC_CONFIG), f"topic configs of {addr}")
        table = (loads_lenient(resp.body) or {}).get("topicConfigTable") or {}
        return {name: TopicConfig.from_json(tc) for name, tc in table.items() if isinstance(tc, dict)}

    async def topic_stats(self, addr: str, topic: str) -> TopicStatsTable:
        resp = self.check(await self.invoke(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}),
                          f"stats of topic {topic} on {addr}")
        return TopicStatsTable.decode(resp.body)

    # ---- broker: groups -------------------------------------------------------------------------
    async def consume_stats(self, addr: str, group: str, topic: str | None = None) -> ConsumeStats:
        resp = self.check(await self.invoke(addr, RequestCode.GET_CONSUME_STATS,
                                            {"consumerGroup": group, "topic": topic}),
                          f"consume stats of group {group} on {addr}")
        return ConsumeStats.decode(resp.body)

    async def consumer_connection(self, addr: str, group: str) -> ConsumerConnection:
        resp = self.check(await self.invoke(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}),
                          f"connections of group {group} on {addr}")
        return ConsumerConnection.decode(resp.body)

    async def producer_connection(self, addr: str, group: str) -> ProducerConnection:
        """GET_PRODUCER_CONNECTION_LIST: the producers of `group` connected to the broker at addr (NotFoundError when
        none is)."""
        resp = await self.invoke(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})
        if resp.code == ResponseCode.SYSTEM_ERROR and "not exist" in (resp.remark or ""):
            raise NotFoundError(f"producer group {group!r} is not connected to {addr}")
        self.check(resp, f"connections of producer group {group} on {addr}")
        return ProducerConnection.decode(resp.body)

    async def consumer_running_info(self, addr: str, group: str, client_id: str) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO, relayed by the broker at addr to the client."""
        resp = self.check(await self.invoke(addr, RequestCode.GET_CONSUMER_RUNNING_INFO,
                                            {"consumerGroup": group, "clientId": client_id, "jstackEnable": False}),
                          f"running info of consumer {client_id} of group {group} via {addr}")
        return ConsumerRunningInfo.decode(resp.body)

    async def consume_message_directly(self, addr: str, group: str, client_id: str, msg_id: str,
                                       topic: str | None = None) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY: the broker at addr (which stores the message) hands the message with offset
        message id msg_id to the client, whose listener consumes it; returns what the listener did."""
        resp = self.check(await self.invoke(addr, RequestCode.CONSUME_MESSAGE_DIRECTLY,
                                            {"consumerGroup": group, "clientId": client_id, "msgId": msg_id,
                                             "topic": topic}),
                          f"direct consumption of {msg_id} by consumer {client_id} of group {group} via {addr}")
        return ConsumeMessageDirectlyResult.decode(resp.body)

    async def pending_transactions(self, addr: str) -> dict[str, Any]:
        """GET_PENDING_TRANSACTIONS (project extension 9002): open half messages per topic and producer group
        ({"pending": [{"topic", "producerGroup", "count", "oldestBornTimestamp"}], "counters": {...}})."""
        resp = self.check(await self.invoke(addr, RequestCode.GET_PENDING_TRANSACTIONS),
                          f"pending transactions on {addr}")
        data = json.loads(resp.body or b"{}")
        return data if isinstance(data, dict) else {}

    async def subscription_groups(self, addr: str) -> dict[str, SubscriptionGroupConfig]:
        resp = self.check(await self.invoke(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG),
                          f"subscription groups of {addr}")
        table = (loads_lenient(resp.body) or {}).get("subscriptionGroupTable") or {}
        return {name: SubscriptionGroupConfig.from_json(c) for name, c in table.items() if isinstance(c, dict)}

    async def update_subscription_group(self, addr: str, config: SubscriptionGroupConfig) -> None:
        self.check(await self.invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode()),
                   f"update subscription group {config.group_name} on {addr}")

    # ---- broker: status -------------------------------------------------------------------------
    async def runtime_info(self, addr: str) -> dict[str, str]:
        resp = self.check(await self.invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO), f"runtime info of {addr}")
        return KVTable.decode(resp.body).table

    # ---- broker: messages -----------------------------------------------------------------------
    async def offsets(self, addr: str, topic: str, queue_id: int) -> tuple[int, int]:
        ext = {"topic": topic, "queueId": queue_id}
        low = self.check(await self.invoke(addr, RequestCode.GET_MIN_OFFSET, ext), f"min offset of {topic}:{queue_id}")
        high = self.check(await self.invoke(addr, RequestCode.GET_MAX_OFFSET, ext), f"max offset of {topic}:{queue_id}")
        return int((low.ext_fields or {}).get("offset", 0)), int((high.ext_fields or {}).get("offset", 0))

    async def search_offset(self, addr: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        resp = self.check(await self.invoke(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                            {"topic": topic, "queueId": queue_id, "timestamp": timestamp_ms}),
                          f"search offset of {topic}:{queue_id}")
        return int((resp.ext_fields or {}).get("offset", 0))

    async def pull(self, addr: str, topic: str, queue_id: int, offset: int, max_nums: int = 32,
                   group: str = TOOLS_GROUP) -> PullResult:
        """One non-committing, non-suspending pull (tools read messages without moving any consumer)."""
        ext = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
               "maxMsgNums": max_nums, "sysFlag": PULL_FLAG_SUBSCRIPTION, "commitOffset": 0,
               "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0, "expressionType": "TAG"}
        resp = await self.invoke(addr, RequestCode.PULL_MESSAGE, ext)
        if resp.code not in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                             ResponseCode.PULL_OFFSET_MOVED):
            self.check(resp, f"pull {topic}:{queue_id}@{offset} from {addr}")
        ext_in = resp.ext_fields or {}
        records = list(iter_records(resp.body)) if resp.code == ResponseCode.SUCCESS and resp.body else []
        return PullResult(resp.code, records, int(ext_in.get("nextBeginOffset", offset)),
                          int(ext_in.get("minOffset", 0)), int(ext_in.get("maxOffset", 0)))

    async def view_message(self, addr: str, phys_offset: int) -> MessageRecord:
        resp = await self.invoke(addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys_offset})
        if resp.code != ResponseCode.SUCCESS:
            raise NotFoundError(f"no message at commit log offset {phys_offset} on {addr}"
                                + (f": {resp.remark}" if resp.remark else ""))
        try:
            return decode_record(resp.body)
        except (RecordError, ValueError) as exc:
            raise RequestFailedError(f"undecodable message from {addr}: {exc}") from None

    async def view_message_by_offset_id(self, msg_id: str) -> MessageRecord:
        """An offset message id names its broker (ip:port) and commit-log offset."""
        try:
            host, port, phys = decode_offset_msg_id(msg_id)
        except ValueError:
            raise NotFoundError(f"{msg_id!r} is not an offset message id") from None
        if not 0 < port < 65536 or phys < 0:
            raise NotFoundError(f"{msg_id!r} is not an offset message id (port {port}, offset {phys})")
        return await self.view_message(f"{host}:{port}", phys)

    async def query_message(self, addr: str, topic: str, key: str, max_num: int = 64, begin_ms: int = 0,
                            end_ms: int | None = None, unique: bool = False) -> list[MessageRecord]:
        ext = {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin_ms,
               "endTimestamp": end_ms if end_ms is not None else int(time.time() * 1000) + 60_000}
        if unique:
            ext["_UNIQUE_KEY_QUERY"] = True
        resp = await self.invoke(addr, RequestCode.QUERY_MESSAGE, ext)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        self.check(resp, f"query {topic} by key {key} on {addr}")
        out = []
        for record in iter_records(resp.body):
            if record.topic != topic:
                continue
            if unique and record.uniq_key != key:
                continue
            if not unique and key not in record.keys and record.uniq_key != key:
                continue
            out.append(record)
        return out

    async def reset_offset(self, addr: str, group: str, topic: str, timestamp_ms: int, force: bool = True
                           ) -> tuple[dict[Any, int], int]:
        """INVOKE_BROKER_TO_RESET_OFFSET: (new offset per queue, consumers told) of `group` on `topic` at addr."""
        resp = self.check(await self.invoke(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                                            {"topic": topic, "group": group, "timestamp": timestamp_ms,
                                             "isForce": force}),
                          f"reset offsets of group {group} on topic {topic} at {addr}")
        told = int((resp.ext_fields or {}).get("online") or 0)
        return ResetOffsetBody.decode(resp.body).offset_table, told

    async def resend_dlq_message(self, addr: str, group: str, *, offset: int | None = None,
                                 msg_id: str | None = None, topic: str | None = None,
                                 to_original_topic: bool = False, force: bool = False) -> dict[str, str]:
        """Re-send one dead message: to %RETRY%<group> by default (only that group), to `topic`, or to the topic it
        was first sent to (to_original_topic: every group of that topic gets it again)."""
        ext = {"group": group, "offset": offset, "msgId": msg_id, "topic": topic}
        if to_original_topic:
            ext["toOriginalTopic"] = "true"
        if force:  # a letter resent before is refused without it (the broker audits resends)
            ext["force"] = "true"
        resp = await self.invoke(addr, RequestCode.RESEND_DLQ_MESSAGE, ext)
        what = f"re-send dead message {msg_id if msg_id else offset} of group {group} on {addr}"
        self.check(resp, what)
        return {str(k): str(v) for k, v in (resp.ext_fields or {}).items()}
