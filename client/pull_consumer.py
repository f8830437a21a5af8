"""PullConsumer: the application chooses queues and offsets; the client does the wire work."""

from __future__ import annotations

import ssl
from client.consumer_ops import ConsumerOps
from client.credentials import Credentials
from client.errors import MQClientError
from client.instance import ClientLifecycle, ClientInstance
from client.message import MessageExt, MessageQueue, MessageSelector, PullResult

__all__ = ["PullConsumer"]


class PullConsumer(ClientLifecycle):
    """`await pull.start(); qs = await pull.fetch_message_queues(t); r = await pull.pull(qs[0], "*", offset=0)`."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str = "127.0.0.1:9876",
        *,
        instance_name: str | None = None,
        pull_timeout: float = 10.0,
        broker_suspend_max_time: float = 20.0,
        consumer_timeout_when_suspend: float = 30.0,
        allow_msgpack: bool = True,
        rpc_timeout: float = 3.0,
        credentials: Credentials | None = None,
        tls: "bool | ssl.SSLContext" = False,
        tls_ca_path: str | None = None,
    ) -> None:
        if not group:
            raise ValueError("consumer group must not be empty")
        self.group = group
        self.namesrv_addr = namesrv_addr
        self.pull_timeout = pull_timeout
        self.broker_suspend_max_time = broker_suspend_max_time
        self.consumer_timeout_when_suspend = consumer_timeout_when_suspend
        self._topics: set[str] = set()
        self._instance = ClientInstance(
            namesrv_addr,
            instance_name=instance_name,
            heartbeat_data=self._heartbeat_data,
            allow_msgpack=allow_msgpack,
            rpc_timeout=rpc_timeout,
            credentials=credentials,
            tls=tls,
            tls_ca_path=tls_ca_path,
        )
        self._ops = ConsumerOps(self._instance, group)
        self._selectors: dict[str, MessageSelector] = {}
        self._started = False

    # ------------------------------------------------------------------ lifecycle
    def _unregister_entry(self) -> dict[str, str]:
        return {"consumerGroup": self.group}

    def _heartbeat_data(self) -> dict:
        subscriptions = [
            {
                "topic": topic,
                "subString": "*",
                "tagsSet": [],
                "codeSet": [],
                "subVersion": self._ops._sub_version(topic, "*"),
                "expressionType": "TAG",
                "classFilterMode": False,
            }
            for topic in sorted(self._topics)
        ]
        return {
            "consumerDataSet": [
                {
                    "groupName": self.group,
                    "consumeType": "CONSUME_ACTIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": subscriptions,
                    "unitMode": False,
                }
            ]
        }

    def _check_started(self) -> None:
        if not self._started:
            raise MQClientError("pull consumer is not started; call await consumer.start()")

    # ------------------------------------------------------------------ API
    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues of topic, from the name server."""
        self._check_started()
        self._topics.add(topic)
        return await self._ops.fetch_subscribe_queues(topic)

    def _selector(self, sub_expression: MessageSelector | str | None) -> MessageSelector:
        if isinstance(sub_expression, MessageSelector):
            return sub_expression
        key = sub_expression or "*"
        selector = self._selectors.get(key)
        if selector is None:
            selector = self._selectors[key] = MessageSelector.tag(key)
        return selector

    async def pull(
        self,
        mq: MessageQueue,
        sub_expression: MessageSelector | str | None = "*",
        offset: int = 0,
        max_nums: int = 32,
        *,
        timeout: float | None = None,
        block: bool = False,
        suspend_timeout: float | None = None,
    ) -> PullResult:
        """Pull up to max_nums messages from offset.

        block=True long-polls: when nothing is new the broker holds the request up to `suspend_timeout` seconds
        (default broker_suspend_max_time) and answers as soon as a matching message arrives.
        """
        self._check_started()
        if max_nums <= 0:
            raise ValueError("max_nums must be positive")
        if offset < 0:
            raise ValueError("offset must be >= 0")
        selector = self._selector(sub_expression)
        if block:
            suspend = self.broker_suspend_max_time if suspend_timeout is None else suspend_timeout
            rpc_timeout = timeout if timeout is not None else max(self.consumer_timeout_when_suspend, suspend + 5.0)
            return await self._ops.pull(
                mq, selector, offset, max_nums, timeout=rpc_timeout, suspend_timeout_ms=int(suspend * 1000)
            )
        return await self._ops.pull(
            mq, selector, offset, max_nums, timeout=self.pull_timeout if timeout is None else timeout
        )

    async def pull_block_if_not_found(
        self, mq: MessageQueue, sub_expression: MessageSelector | str | None, offset: int, max_nums: int = 32
    ) -> PullResult:
        return await self.pull(mq, sub_expression, offset, max_nums, block=True)

    async def send_message_back(self, msg: MessageExt, delay_level: int = 0, broker_name: str | None = None, *,
                                max_reconsume_times: int = -1) -> None:
        """Give a message this application failed to process back to the broker for redelivery to this group
        through %RETRY%<group>, as the reference pull consumer's sendMessageBack: delay_level 0 lets the broker choose
        (3 + reconsume times), -1 sends it straight to %DLQ%<group>, > 0 is that delay level. Subscribe to (pull)
        %RETRY%<group> to receive it again. When the broker refuses, the message is sent to %RETRY%<group> as a new
        message; raises only when both fail."""
        self._check_started()
        await self._ops.send_message_back(msg, delay_level, broker_name=broker_name,
                                          max_reconsume_times=max_reconsume_times)

    async def update_offset(self, mq: MessageQueue, offset: int, *, oneway: bool = False) -> None:
        """Store the group's consume offset for mq on the broker (UPDATE_CONSUMER_OFFSET)."""
        self._check_started()
        await self._ops.update_consumer_offset(mq, offset, oneway=oneway)

    async def fetch_consume_offset(self, mq: MessageQueue) -> int:
        """The group's stored offset for mq, or -1 when the broker has none."""
        self._check_started()
        return await self._ops.query_consumer_offset(mq)

    async def max_offset(self, mq: MessageQueue) -> int:
        self._check_started()
        return await self._ops.max_offset(mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        self._check_started()
        return await self._ops.min_offset(mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int, boundary: str = "LOWER") -> int:
        self._check_started()
        return await self._ops.search_offset(mq, timestamp_ms, boundary)

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        self._check_started()
        return await self._ops.earliest_msg_store_time(mq)
