"""asyncio RocketMQ client (remoting protocol): producer and pull consumer.

    from client import Producer, PullConsumer, Message, MessageSelector, ConsumeResult
"""

from client.errors import (
    MessageValidationError,
    MQBrokerError,
    MQClientError,
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
)
from client.message import (
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    MessageSelector,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
)
from client.producer import Producer
from client.pull_consumer import PullConsumer

__all__ = [
    "Producer",
    "PullConsumer",
    "Message",
    "MessageExt",
    "MessageQueue",
    "MessageSelector",
    "ConsumeResult",
    "SendResult",
    "SendStatus",
    "PullResult",
    "PullStatus",
    "MQClientError",
    "MQBrokerError",
    "MessageValidationError",
    "RemotingError",
    "RemotingClosedError",
    "RemotingConnectError",
    "RemotingTimeoutError",
]
