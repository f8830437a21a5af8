"""Request handlers of the name server (standalone or embedded in the broker).

Handlers follow the remoting server contract: ``handler(channel, cmd) -> RemotingCommand | None``.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from typing import Any, Callable

from broker.namesrv.route_info import RouteInfoManager
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    DeleteTopicFromNamesrvRequestHeader,
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
)
from protocol.jsonlenient import dumps_compact, loads_lenient

log = logging.getLogger(__name__)

_EMPTY_KV_TABLE = dumps_compact({"table": {}})
# REGISTER_BROKER bodies larger than this (thousands of topics) are parsed in a worker thread, so an
# embedded name server's broker keeps serving while another broker registers a big table.
INLINE_REGISTER_BODY_MAX = 256 * 1024


def body_crc32(body: bytes) -> int:
    """Masked CRC32 used by REGISTER_BROKER's ``bodyCrc32`` (same as the commit-log BODYCRC)."""
    return zlib.crc32(body) & 0x7FFFFFFF


class NamesrvProcessor:
    """Answers route lookups and broker (un)registrations from a RouteInfoManager."""

    def __init__(self, route_info: RouteInfoManager) -> None:
        self.route_info = route_info
        self._watched: set[int] = set()

    def handlers(self) -> dict[int, Callable[[Any, RemotingCommand], RemotingCommand | None]]:
        """The request-code table for ``RemotingServer``."""
        return {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
        }

    # -- 105 ---------------------------------------------------------------------------------------
    def get_route_info_by_topic(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.decode(cmd.ext_fields)
        route = self.route_info.pick_topic_route_json(header.topic)
        if route is None:
            return cmd.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}",
            )
        return cmd.make_response(ResponseCode.SUCCESS, body=dumps_compact(route))

    # -- 103 ---------------------------------------------------------------------------------------
    def register_broker(self, channel: Any, cmd: RemotingCommand) -> Any:
        header = RegisterBrokerRequestHeader.decode(cmd.ext_fields)
        body = bytes(cmd.body or b"")
        if len(body) > INLINE_REGISTER_BODY_MAX:
            return self._register_large(channel, cmd, header, body)
        if header.body_crc32 and body_crc32(body) != header.body_crc32:
            log.warning("REGISTER_BROKER from %s: body CRC mismatch", header.broker_addr)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            parsed = loads_lenient(body) if body and not header.compressed else None
        except ValueError as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"bad RegisterBrokerBody: {exc}")
        return self._register_parsed(channel, cmd, header, parsed)

    async def _register_large(
        self, channel: Any, cmd: RemotingCommand, header: Any, body: bytes
    ) -> RemotingCommand | None:
        def check_and_parse() -> tuple[bool, Any]:
            if header.body_crc32 and body_crc32(body) != header.body_crc32:
                return False, None
            return True, None if header.compressed else loads_lenient(body)

        try:
            crc_ok, parsed = await asyncio.to_thread(check_and_parse)
        except ValueError as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"bad RegisterBrokerBody: {exc}")
        if not crc_ok:
            log.warning("REGISTER_BROKER from %s: body CRC mismatch", header.broker_addr)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if getattr(channel, "closed", False):
            return None  # its close already unregistered the broker: do not resurrect it
        return self._register_parsed(channel, cmd, header, parsed)

    def _register_parsed(self, channel: Any, cmd: RemotingCommand, header: Any, parsed: Any) -> RemotingCommand:
        if header.compressed:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, "compressed REGISTER_BROKER bodies are not supported; set compressedRegister=false"
            )
        topic_table: dict[str, Any] = {}
        data_version: Any = None
        if parsed is not None:
            wrapper = parsed.get("topicConfigSerializeWrapper") if isinstance(parsed, dict) else None
            wrapper = wrapper if isinstance(wrapper, dict) else {}
            topic_table = wrapper.get("topicConfigTable") or {}
            data_version = wrapper.get("dataVersion")
        result = self.route_info.register_broker(
            header.cluster_name,
            header.broker_name,
            header.broker_addr,
            header.broker_id,
            header.ha_server_addr,
            topic_table,
            data_version,
            channel=channel,
            timeout_ms=header.heartbeat_timeout_millis,
        )
        if channel is not None and hasattr(channel, "add_close_listener"):
            self._watch_channel(channel)
        response_header = RegisterBrokerResponseHeader(
            ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
        )
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=response_header.encode(), body=_EMPTY_KV_TABLE)

    def _watch_channel(self, channel: Any) -> None:
        """Forget brokers as soon as their registration connection closes (like RocketMQ)."""
        key = id(channel)
        if key in self._watched:
            return
        self._watched.add(key)

        def closed(ch: Any) -> None:
            self._watched.discard(key)
            self.route_info.on_channel_closed(ch)

        channel.add_close_listener(closed)

    # -- 104 ---------------------------------------------------------------------------------------
    def unregister_broker(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = UnregisterBrokerRequestHeader.decode(cmd.ext_fields)
        self.route_info.unregister_broker(header.cluster_name, header.broker_addr, header.broker_name, header.broker_id)
        return cmd.make_response(ResponseCode.SUCCESS)

    # -- 106 / 206 / 101 ---------------------------------------------------------------------------
    def get_broker_cluster_info(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=dumps_compact(self.route_info.get_cluster_info()))

    def get_all_topic_list(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        body = dumps_compact({"topicList": self.route_info.get_all_topic_list()})
        return cmd.make_response(ResponseCode.SUCCESS, body=body)

    def delete_topic_in_namesrv(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        """216: drop a topic's routes (mqadmin deleteTopic, after deleting it on the brokers)."""
        header = DeleteTopicFromNamesrvRequestHeader.decode(cmd.ext_fields)
        if self.route_info.delete_topic(header.topic, header.cluster_name):
            log.info("topic %s deleted from the name server (cluster %s)", header.topic, header.cluster_name or "*")
        return cmd.make_response(ResponseCode.SUCCESS)

    def get_kv_config(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        """No KV store (order-topic config): answer "not found" like an empty Java name server."""
        ext = cmd.ext_fields or {}
        return cmd.make_response(
            ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ext.get('namespace')} Key: {ext.get('key')}"
        )
