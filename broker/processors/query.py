"""Offset and message look-ups — reference §4.7 and §4.10.

GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), SEARCH_OFFSET_BY_TIMESTAMP (29) and GET_EARLIEST_MSG_STORETIME (32):
header -> the core's QueueOffsetQuery (broker/core/offsets.py) -> Outcome -> response. VIEW_MESSAGE_BY_ID (33) and
QUERY_MESSAGE (12) read the store's records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.core.offsets import (QUEUE_EARLIEST_STORE_TIME, QUEUE_MAX, QUEUE_MIN, QUEUE_OFFSET_BY_TIME,
                                 OffsetService, QueueOffsetQuery)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.requests import read_request

if TYPE_CHECKING:
    from broker.store.message_store import MessageStore

DEFAULT_QUERY_MAX_NUM = 32


def _join(records: list) -> bytes:
    if len(records) == 1 and type(records[0]) is bytes:
        return records[0]
    return b"".join(records)


class QueryProcessor:
    """Queue offsets through the core; message look-ups from the store."""

    def __init__(self, offsets: OffsetService, store: "MessageStore") -> None:
        self.offsets = offsets
        self.store = store

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.GET_MAX_OFFSET: self.get_max_offset,
            RequestCode.GET_MIN_OFFSET: self.get_min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset_by_timestamp,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.get_earliest_msg_storetime,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message_by_id,
            RequestCode.QUERY_MESSAGE: self.query_message,
        }

    def _queue_offset(self, cmd: RemotingCommand, query: QueueOffsetQuery, key: str = "offset") -> RemotingCommand:
        outcome = self.offsets.queue_offset(query)
        if not outcome.ok:
            return cmd.make_response(outcome.code, outcome.remark)
        return cmd.make_response(ResponseCode.SUCCESS, None, {key: str(outcome.value)})

    def get_max_offset(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        return self._queue_offset(cmd, QueueOffsetQuery(header.topic, header.queue_id, QUEUE_MAX))

    def get_min_offset(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        return self._queue_offset(cmd, QueueOffsetQuery(header.topic, header.queue_id, QUEUE_MIN))

    def search_offset_by_timestamp(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        return self._queue_offset(cmd, QueueOffsetQuery(header.topic, header.queue_id, QUEUE_OFFSET_BY_TIME,
                                                        header.timestamp, header.boundary_type))

    def get_earliest_msg_storetime(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        return self._queue_offset(cmd, QueueOffsetQuery(header.topic, header.queue_id, QUEUE_EARLIEST_STORE_TIME),
                                  "timestamp")

    def view_message_by_id(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        record = self.store.look_message_by_offset(header.offset) if header.offset >= 0 else None
        if not record:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"can not find message by the offset, {header.offset}")
        return cmd.make_response(ResponseCode.SUCCESS, None, None, bytes(record))

    def query_message(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        header = read_request(cmd)
        max_num = DEFAULT_QUERY_MAX_NUM if header.unique_key_query else header.max_num
        if max_num is None or max_num <= 0:
            max_num = DEFAULT_QUERY_MAX_NUM
        result = self.store.query_message(header.topic, header.key, max_num,
                                          header.begin_timestamp, header.end_timestamp)
        ext = {
            "indexLastUpdateTimestamp": str(result.index_last_update_timestamp),
            "indexLastUpdatePhyoffset": str(result.index_last_update_phyoffset),
        }
        if not result.records:
            return cmd.make_response(ResponseCode.QUERY_NOT_FOUND,
                                     "can not find message, maybe time range not correct", ext)
        return cmd.make_response(ResponseCode.SUCCESS, None, ext, _join(result.records))
