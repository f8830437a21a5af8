"""Reading a request once: request code -> its typed form (a header class, or the body of a body-only request).

``read_request(cmd)`` decodes ``cmd`` by the one table below and keeps the result on ``cmd.header``; every later
call returns that same object. The broker's authorizer and the request's handler both call it, so whatever a
client puts on the wire (long or short field names, str or bytes values, a JSON, ROCKETMQ or msgpack header, a
duplicated key), the fields the handler acts on are the fields the authorizer checked: there is no second reading
that could differ. Codes absent from the table carry nothing a handler reads (``read_request`` returns None).

A header or body that cannot be read raises ``RequestError`` (a ``HeaderError``, so the server answers
INVALID_PARAMETER with its text)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocol import headers as h
from protocol.bodies import CheckClientRequestBody, HeartbeatData, LockBatchRequestBody, UnlockBatchRequestBody
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.headers import HeaderError
from protocol.recall import RecallMessageRequestHeader

__all__ = ["INLINE_BODY_MAX", "READABLE_CODES", "RequestError", "read_request", "reads_body"]

# A body-only request with a larger body is best read off the event loop (decoding 16 MiB of JSON takes a while).
INLINE_BODY_MAX = 64 * 1024


class RequestError(HeaderError):
    """A request's header or body cannot be read; the text says which and why."""


Reader = Callable[[RemotingCommand], Any]


def _header(cls: type) -> Reader:
    decode = cls.decode

    def read(cmd: RemotingCommand) -> Any:
        return decode(cmd.ext_fields)
    return read


def _send_v1(cmd: RemotingCommand) -> h.SendMessageRequestHeader:
    """SEND_MESSAGE: the long names; a client that sends V2's short names (``b`` and no ``topic``) is read as V2."""
    ext = cmd.ext_fields
    if ext is not None and "topic" not in ext and "b" in ext:
        return h.SendMessageRequestHeader.decode_v2(ext)
    return h.SendMessageRequestHeader.decode(ext)


def _send_v2(cmd: RemotingCommand) -> h.SendMessageRequestHeader:
    """SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE: the short names a..n; long names when a client sends those."""
    ext = cmd.ext_fields
    if ext is not None and "b" in ext:
        return h.SendMessageRequestHeader.decode_v2(ext)
    return h.SendMessageRequestHeader.decode(ext)


def _body(cls: Any, what: str, empty: Callable[[], Any]) -> Reader:
    decode = cls.decode

    def read(cmd: RemotingCommand) -> Any:
        if not cmd.body:
            return empty()
        try:
            return decode(bytes(cmd.body))
        except ValueError as exc:
            raise RequestError(f"malformed {what} body: {exc}") from None
    return read


_READERS: dict[int, Reader] = {
    RequestCode.SEND_MESSAGE: _send_v1,
    RequestCode.SEND_REPLY_MESSAGE: _send_v1,
    RequestCode.SEND_MESSAGE_V2: _send_v2,
    RequestCode.SEND_REPLY_MESSAGE_V2: _send_v2,
    RequestCode.SEND_BATCH_MESSAGE: _send_v2,
    RequestCode.PULL_MESSAGE: _header(h.PullMessageRequestHeader),
    RequestCode.LITE_PULL_MESSAGE: _header(h.PullMessageRequestHeader),
    RequestCode.QUERY_MESSAGE: _header(h.QueryMessageRequestHeader),
    RequestCode.VIEW_MESSAGE_BY_ID: _header(h.ViewMessageRequestHeader),
    RequestCode.QUERY_CONSUMER_OFFSET: _header(h.QueryConsumerOffsetRequestHeader),
    RequestCode.UPDATE_CONSUMER_OFFSET: _header(h.UpdateConsumerOffsetRequestHeader),
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: _header(h.ResetOffsetRequestHeader),
    RequestCode.GET_MAX_OFFSET: _header(h.GetMaxOffsetRequestHeader),
    RequestCode.GET_MIN_OFFSET: _header(h.GetMinOffsetRequestHeader),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _header(h.SearchOffsetRequestHeader),
    RequestCode.GET_EARLIEST_MSG_STORETIME: _header(h.GetEarliestMsgStoretimeRequestHeader),
    RequestCode.UNREGISTER_CLIENT: _header(h.UnregisterClientRequestHeader),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _header(h.GetConsumerListByGroupRequestHeader),
    RequestCode.CONSUMER_SEND_MSG_BACK: _header(h.ConsumerSendMsgBackRequestHeader),
    RequestCode.RESEND_DLQ_MESSAGE: _header(h.ResendDlqMessageRequestHeader),
    RequestCode.END_TRANSACTION: _header(h.EndTransactionRequestHeader),
    RequestCode.RECALL_MESSAGE: _header(RecallMessageRequestHeader),
    RequestCode.UPDATE_AND_CREATE_TOPIC: _header(h.CreateTopicRequestHeader),
    RequestCode.DELETE_TOPIC_IN_BROKER: _header(h.DeleteTopicRequestHeader),
    RequestCode.GET_TOPIC_STATS_INFO: _header(h.GetTopicStatsInfoRequestHeader),
    RequestCode.GET_CONSUME_STATS: _header(h.GetConsumeStatsRequestHeader),
    RequestCode.GET_CONSUMER_CONNECTION_LIST: _header(h.GetConsumerConnectionListRequestHeader),
    RequestCode.GET_PRODUCER_CONNECTION_LIST: _header(h.GetProducerConnectionListRequestHeader),
    RequestCode.DELETE_SUBSCRIPTIONGROUP: _header(h.DeleteSubscriptionGroupRequestHeader),
    RequestCode.GET_CONSUMER_RUNNING_INFO: _header(h.GetConsumerRunningInfoRequestHeader),
    RequestCode.CONSUME_MESSAGE_DIRECTLY: _header(h.ConsumeMessageDirectlyRequestHeader),
    RequestCode.HEART_BEAT: _body(HeartbeatData, "heartbeat", HeartbeatData),
    RequestCode.LOCK_BATCH_MQ: _body(LockBatchRequestBody, "LOCK_BATCH_MQ", LockBatchRequestBody),
    RequestCode.UNLOCK_BATCH_MQ: _body(UnlockBatchRequestBody, "UNLOCK_BATCH_MQ", UnlockBatchRequestBody),
    RequestCode.CHECK_CLIENT_CONFIG: _body(CheckClientRequestBody, "check-client", CheckClientRequestBody),
}

READABLE_CODES: frozenset[int] = frozenset(int(code) for code in _READERS)
_BODY_CODES = frozenset({RequestCode.HEART_BEAT, RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ,
                         RequestCode.CHECK_CLIENT_CONFIG})


def reads_body(code: int) -> bool:
    """True when request ``code``'s typed form is its body (decoding may cost time for a large body)."""
    return code in _BODY_CODES


def read_request(cmd: RemotingCommand) -> Any:
    """``cmd``'s typed form, decoded on the first call and the same object on every later one; None for a code
    whose handler reads no fields. RequestError/HeaderError when the header or body cannot be read."""
    header = cmd.header
    if header is None:
        reader = _READERS.get(cmd.code)
        if reader is None:
            return None
        header = cmd.header = reader(cmd)
    return header

