"""Consumer-side broker calls shared by PullConsumer and PushConsumer: pull, offsets, queue look-ups.

Pull responses are decoded lazily (records split, properties decoded on demand) because pulling is a hot path; tag
subscriptions are re-checked exactly on the client, since the broker filters by tag hash only.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

from client.errors import MQBrokerError, MQClientError, RemotingError, SubscriptionCheckError
from client.instance import ClientInstance, _int
from client.message import PULL_STATUS_BY_CODE, MessageExt, MessageQueue, MessageSelector, PullResult, PullStatus
from protocol.codes import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    RequestCode,
    ResponseCode,
)
from protocol.command import RemotingCommand
from protocol.jsonlenient import dumps_compact
from protocol.message import RecordError, iter_records
from protocol.properties import encode_properties

log = logging.getLogger(__name__)

RETRY_PREFIX = "%RETRY%"
_STORED = (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
           ResponseCode.SLAVE_NOT_AVAILABLE)
# Properties the reference client drops when it re-sends a failed message itself (they describe the old copy).
_RESEND_DROPPED = ("TRAN_MSG", "DELAY", "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "CLUSTER", "MIN_OFFSET",
                   "MAX_OFFSET", "REAL_TOPIC", "REAL_QID")


def decode_messages(body: bytes, broker_name: str | None, selector: MessageSelector | None) -> list[MessageExt]:
    """Pull body (concatenated commit-log records) -> messages, keeping only exact tag matches."""
    if not body:
        return []
    try:
        messages = [MessageExt(rec, broker_name) for rec in iter_records(body, decode_properties=False)]
    except RecordError as exc:
        raise MQClientError(f"malformed message records in pull response: {exc}") from exc
    if selector is not None and selector.expression_type == "TAG" and selector.tags_set:
        wanted = selector.tags_set
        messages = [m for m in messages if m.tags in wanted]
    return messages


class ConsumerOps:
    """RPCs a consumer group makes against brokers, resolved through the instance's route cache."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        # Broker id the broker suggested for the next pull of a queue (0 = master).
        self.pull_from_broker: dict[MessageQueue, int] = {}
        self.sub_versions: dict[tuple[str, str], int] = {}

    # ------------------------------------------------------------------ addressing
    async def broker_addr(self, mq: MessageQueue, for_pull: bool = False) -> str:
        instance = self.instance
        if for_pull:
            broker_id = self.pull_from_broker.get(mq, 0)
            if broker_id:
                addrs = instance.broker_addrs.get(mq.broker_name) or {}
                addr = addrs.get(broker_id)
                if addr:
                    return addr
        addr = instance.master_addr(mq.broker_name)
        if addr is None:
            # No master in the route (it is down): read from and commit to a slave, as the reference client does.
            addrs = instance.broker_addrs.get(mq.broker_name) or {}
            if addrs:
                return addrs[min(addrs)]
            addr = await instance.find_master_addr(mq.broker_name, mq.topic)
        return addr

    async def _call(self, mq: MessageQueue, code: int, ext: dict, timeout: float | None = None) -> RemotingCommand:
        addr = await self.broker_addr(mq)
        return await self.instance.invoke_broker(addr, RemotingCommand(code=code, ext_fields=ext), timeout)

    async def fetch_subscribe_queues(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.update_route(topic)
        self.instance.tracked_topics.add(topic)
        queues = route.subscribe_queues(topic)
        if not queues:
            raise MQClientError(f"topic {topic!r} has no readable queue")
        return queues

    def subscription_data(self, topic: str, selector: MessageSelector) -> dict:
        """SubscriptionData JSON (heartbeats, CHECK_CLIENT_CONFIG)."""
        return {
            "topic": topic,
            "subString": selector.expression,
            "tagsSet": sorted(selector.tags_set),
            "codeSet": list(selector.code_set),
            "subVersion": self._sub_version(topic, selector.expression),
            "expressionType": selector.expression_type,
            "classFilterMode": False,
        }

    async def check_client_config(self, topic: str, selector: MessageSelector, timeout: float | None = None) -> None:
        """CHECK_CLIENT_CONFIG (46) to every broker serving topic, for a non-TAG (SQL92) subscription; the broker's
        decision is final (no local syntax check). Raises SubscriptionCheckError with the broker's code and remark
        when one refuses (1: enablePropertyFilter=false, 23: the selector does not compile). A topic without a route
        yet is not checked (its brokers will refuse the pulls with the same remark)."""
        if selector.expression_type == "TAG":
            return
        route = self.instance.routes.get(topic)
        if route is None:
            return
        body = dumps_compact({"clientId": self.instance.client_id, "group": self.group,
                              "subscriptionData": self.subscription_data(topic, selector)})
        for broker in route.brokers:
            addr = broker.master_addr or next(iter(broker.addrs.values()), None)
            if not addr:
                continue
            cmd = RemotingCommand(code=RequestCode.CHECK_CLIENT_CONFIG, ext_fields={}, body=body)
            try:
                reply = await self.instance.invoke_broker(addr, cmd, timeout)
            except RemotingError as exc:
                raise MQClientError(f"cannot check the {selector.expression_type} subscription of group "
                                    f"{self.group!r} to topic {topic!r} with broker {addr}: {exc}") from exc
            if reply.code != ResponseCode.SUCCESS:
                raise SubscriptionCheckError(reply.code, reply.remark, addr, self.group, topic, selector.expression)

    # ------------------------------------------------------------------ pull
    def _sub_version(self, topic: str, expression: str) -> int:
        key = (topic, expression)
        version = self.sub_versions.get(key)
        if version is None:
            version = self.sub_versions[key] = int(time.time() * 1000)
        return version

    async def pull(
        self,
        mq: MessageQueue,
        selector: MessageSelector,
        offset: int,
        max_nums: int,
        *,
        timeout: float,
        suspend_timeout_ms: int = 0,
        commit_offset: int | None = None,
        send_subscription: bool = True,
    ) -> PullResult:
        """One PULL_MESSAGE. suspend_timeout_ms > 0 asks the broker to long-poll (hold) when nothing is new."""
        sys_flag = 0
        if send_subscription:
            sys_flag |= PULL_FLAG_SUBSCRIPTION
        if suspend_timeout_ms > 0:
            sys_flag |= PULL_FLAG_SUSPEND
        if commit_offset is not None and commit_offset > 0:
            sys_flag |= PULL_FLAG_COMMIT_OFFSET
        ext = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": mq.queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_nums,
            "sysFlag": sys_flag,
            "commitOffset": commit_offset if commit_offset is not None and commit_offset > 0 else 0,
            "suspendTimeoutMillis": suspend_timeout_ms,
            "subVersion": self._sub_version(mq.topic, selector.expression),
            "expressionType": selector.expression_type,
        }
        if send_subscription:
            ext["subscription"] = selector.expression
        addr = await self.broker_addr(mq, for_pull=True)
        reply = await self.instance.invoke_broker(
            addr, RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=ext), timeout
        )
        status = PULL_STATUS_BY_CODE.get(reply.code)
        if status is None:
            raise MQBrokerError(reply.code, reply.remark, addr)
        hdr = reply.ext_fields or {}
        suggested = _int(hdr.get("suggestWhichBrokerId"), 0)
        if suggested or mq in self.pull_from_broker:
            self.pull_from_broker[mq] = suggested
        messages = decode_messages(reply.body, mq.broker_name, selector) if status is PullStatus.FOUND else []
        return PullResult(
            status,
            messages,
            _int(hdr.get("nextBeginOffset"), offset),
            _int(hdr.get("minOffset"), 0),
            _int(hdr.get("maxOffset"), 0),
        )

    # ------------------------------------------------------------------ retries
    async def send_message_back(
        self, msg: MessageExt, delay_level: int = 0, *, broker_name: str | None = None,
        max_reconsume_times: int = -1, timeout: float | None = None,
    ) -> None:
        """Hand a failed message back for redelivery through %RETRY%<group> (or %DLQ%<group>: delay_level -1, or
        once it was reconsumed max_reconsume_times times; -1 = the group's retryMaxTimes).

        First CONSUMER_SEND_MSG_BACK to the broker that holds it (the broker copies it from its commit log); when
        that fails, the message is sent to %RETRY%<group> as a new message, as the reference client does, with
        RETRY_TOPIC, ORIGIN_MESSAGE_ID, reconsume times + 1 and delay level 3 + reconsume times. Raises only when
        both fail."""
        broker = broker_name or msg.broker_name
        ext = {
            "offset": msg.commit_log_offset,
            "group": self.group,
            "delayLevel": delay_level,
            "originMsgId": msg.msg_id,
            "originTopic": msg.topic,
            "unitMode": False,
            "maxReconsumeTimes": max_reconsume_times,
        }
        try:
            if not broker:
                raise MQClientError(f"message {msg.msg_id} names no broker; give broker_name")
            addr = self.instance.master_addr(broker) or await self.instance.find_master_addr(broker, msg.topic)
            reply = await self.instance.invoke_broker(
                addr, RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=ext), timeout)
            if reply.code == ResponseCode.SUCCESS:
                return
            problem: Exception = MQBrokerError(reply.code, reply.remark, addr)
        except (RemotingError, MQBrokerError, MQClientError) as exc:
            problem = exc
        log.warning("send-back of %s failed (%s); re-sending it to %s%s as a new message", msg.msg_id, problem,
                    RETRY_PREFIX, self.group)
        await self.resend_to_retry_topic(msg, max_reconsume_times, timeout, prefer_broker=broker)

    async def resend_to_retry_topic(self, msg: MessageExt, max_reconsume_times: int = -1,
                                    timeout: float | None = None, prefer_broker: str | None = None) -> None:
        """The reference client's fallback when CONSUMER_SEND_MSG_BACK fails: SEND_MESSAGE_V2 of a copy to
        %RETRY%<group> (same body, flag, user properties, keys, tags, UNIQ_KEY)."""
        retry_topic = RETRY_PREFIX + self.group
        props = {k: v for k, v in msg.properties.items() if k not in _RESEND_DROPPED}
        props.setdefault("RETRY_TOPIC", msg.topic)
        props.setdefault("ORIGIN_MESSAGE_ID", msg.msg_id)
        reconsume = msg.reconsume_times + 1
        props["DELAY"] = str(3 + msg.reconsume_times)
        props.setdefault("WAIT", "true")
        body = bytes(msg.body)
        properties = encode_properties(props)
        tried: set[str] = set()
        problem: Exception | None = None
        route = self.instance.routes.get(retry_topic)
        for _ in range(2):  # the cached route, then a fresh one: the broker that failed may be all the cache knows
            if route is None:
                try:
                    route = await self.instance.update_route(retry_topic)
                except MQBrokerError as exc:
                    raise problem or exc
            by_broker: dict[str, list[MessageQueue]] = {}
            for mq in route.publish_queues(retry_topic):
                if mq.broker_name not in tried:
                    by_broker.setdefault(mq.broker_name, []).append(mq)
            # the message's own broker first, then the others: it may be the one that failed
            for broker in sorted(by_broker, key=lambda name: (name != prefer_broker, random.random())):
                tried.add(broker)
                try:
                    await self._send_retry_copy(random.choice(by_broker[broker]), body, properties, msg.flag,
                                                reconsume, max_reconsume_times, timeout)
                    return
                except (RemotingError, MQBrokerError) as exc:
                    problem = exc
            route = None
        raise problem or MQClientError(f"{retry_topic} has no writable queue")

    async def _send_retry_copy(self, mq: MessageQueue, body: bytes, properties: str, flag: int, reconsume: int,
                               max_reconsume_times: int, timeout: float | None) -> None:
        header = {
            "a": self.group, "b": mq.topic, "c": "TBW102", "d": 4, "e": mq.queue_id, "f": 0,
            "g": int(time.time() * 1000), "h": flag, "i": properties, "j": reconsume,
            "k": False, "l": max_reconsume_times, "m": False, "n": mq.broker_name,
        }
        addr = self.instance.master_addr(mq.broker_name) or await self.instance.find_master_addr(
            mq.broker_name, mq.topic)
        reply = await self.instance.invoke_broker(
            addr, RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=header, body=body), timeout)
        if reply.code not in _STORED:
            raise MQBrokerError(reply.code, reply.remark, addr)

    # ------------------------------------------------------------------ offsets
    async def query_consumer_offset(
        self, mq: MessageQueue, timeout: float | None = None, zero_if_not_found: bool = True
    ) -> int:
        """The group's stored offset for mq, or -1 if the broker has none (QUERY_NOT_FOUND).

        zero_if_not_found=False asks the broker not to answer 0 for a group without an offset on a "young" queue
        (one whose first message is still stored); brokers that predate the field ignore it.
        """
        ext = {"consumerGroup": self.group, "topic": mq.topic, "queueId": mq.queue_id}
        if not zero_if_not_found:
            ext["setZeroIfNotFound"] = False
        reply = await self._call(mq, RequestCode.QUERY_CONSUMER_OFFSET, ext, timeout)
        if reply.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        if reply.code != ResponseCode.SUCCESS:
            raise MQBrokerError(reply.code, reply.remark)
        return _int((reply.ext_fields or {}).get("offset"), -1)

    async def update_consumer_offset(
        self, mq: MessageQueue, offset: int, *, oneway: bool = False, timeout: float | None = None
    ) -> None:
        ext = {"consumerGroup": self.group, "topic": mq.topic, "queueId": mq.queue_id, "commitOffset": offset}
        cmd = RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=ext)
        addr = await self.broker_addr(mq)
        if oneway:
            await self.instance.brokers.invoke_oneway(addr, cmd)
            return
        reply = await self.instance.invoke_broker(addr, cmd, timeout)
        if reply.code != ResponseCode.SUCCESS:
            raise MQBrokerError(reply.code, reply.remark, addr)

    async def _offset_call(self, mq: MessageQueue, code: int, ext: dict, key: str = "offset") -> int:
        reply = await self._call(mq, code, ext)
        if reply.code != ResponseCode.SUCCESS:
            raise MQBrokerError(reply.code, reply.remark)
        return _int((reply.ext_fields or {}).get(key), 0)

    async def max_offset(self, mq: MessageQueue) -> int:
        """Next offset to be written in mq (exclusive upper bound)."""
        return await self._offset_call(
            mq, RequestCode.GET_MAX_OFFSET, {"topic": mq.topic, "queueId": mq.queue_id, "committed": True}
        )

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self._offset_call(mq, RequestCode.GET_MIN_OFFSET, {"topic": mq.topic, "queueId": mq.queue_id})

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int, boundary: str = "LOWER") -> int:
        boundary = boundary.upper()
        if boundary not in ("LOWER", "UPPER"):
            raise ValueError("boundary must be 'LOWER' or 'UPPER'")
        return await self._offset_call(
            mq,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            {"topic": mq.topic, "queueId": mq.queue_id, "timestamp": int(timestamp_ms), "boundaryType": boundary},
        )

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        return await self._offset_call(
            mq, RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": mq.topic, "queueId": mq.queue_id}, "timestamp"
        )

    async def consumer_ids(self, topic: str, timeout: float | None = None,
                           answers: dict[str, list[str] | BaseException] | None = None) -> list[str]:
        """Client ids of the group: the union of what every broker serving topic (masters and slaves) knows
        (GET_CONSUMER_LIST_BY_GROUP to each, concurrently).

        The reference asks one broker; a master that has just (re)started or been promoted knows only the clients
        that reached it first, and every other client would then take all queues or none. Clients heartbeat every
        broker, so the union is the group as the longest-running brokers see it. Addresses that fail are skipped;
        MQBrokerError / the first failure when none answers (the caller then keeps its queues). ``answers`` caches
        the replies per address across the topics of one rebalance (the list is per group, not per topic)."""
        route = self.instance.routes.get(topic) or await self.instance.update_route(topic)
        addrs = sorted({addr for broker in route.brokers for addr in broker.addrs.values() if addr})
        if not addrs:
            return []
        answers = {} if answers is None else answers
        missing = [addr for addr in addrs if addr not in answers]
        if missing:
            replies = await asyncio.gather(*(self._consumer_list(addr, timeout) for addr in missing),
                                           return_exceptions=True)
            answers.update(zip(missing, replies))
        ids: set[str] = set()
        failures = []
        for addr in addrs:
            reply = answers[addr]
            if isinstance(reply, BaseException):
                failures.append(reply)
                log.debug("consumer list of %s from %s unavailable: %s", self.group, addr, reply)
            else:
                ids.update(reply)
        if failures and len(failures) == len(addrs):
            raise failures[0]
        return sorted(ids)

    async def _consumer_list(self, addr: str, timeout: float | None) -> list[str]:
        reply = await self.instance.invoke_broker(
            addr,
            RemotingCommand(code=RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields={"consumerGroup": self.group}),
            timeout,
        )
        if reply.code != ResponseCode.SUCCESS:
            raise MQBrokerError(reply.code, reply.remark, addr)
        from protocol.jsonlenient import loads_lenient

        data = loads_lenient(reply.body) if reply.body else {}
        ids = data.get("consumerIdList") if isinstance(data, dict) else None
        return [str(i) for i in ids or []]
