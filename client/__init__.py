"""asyncio RocketMQ client (remoting protocol): producer, push consumer and pull consumer.

    from client import Producer, PushConsumer, PullConsumer, Message, MessageSelector, ConsumeResult,
                        ConsumeOrderlyResult

Blocking variants for scripts: client.sync.Producer / PullConsumer / PushConsumer.
Brokers with plain ACL (aclEnable=true): pass ``credentials=Credentials(access_key, secret_key)`` to any of them.
"""

from client.allocate import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMachineRoomNearby,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateStrategy,
    MachineRoomResolver,
)
from client.consume_context import ConsumeConcurrentlyContext, ConsumeOrderlyContext
from client.credentials import Credentials
from client.errors import (
    MessageValidationError,
    MQBrokerError,
    MQClientError,
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
    SubscriptionCheckError,
)
from client.message import (
    ConsumeOrderlyResult,
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
from client.push_consumer import PushConsumer
from client.transaction_producer import LocalTransactionState, TransactionProducer, TransactionSendResult

__all__ = [
    "Credentials",
    "Producer",
    "TransactionProducer",
    "TransactionSendResult",
    "LocalTransactionState",
    "PullConsumer",
    "PushConsumer",
    "Message",
    "MessageExt",
    "MessageQueue",
    "MessageSelector",
    "ConsumeResult",
    "ConsumeOrderlyResult",
    "ConsumeConcurrentlyContext",
    "ConsumeOrderlyContext",
    "SendResult",
    "SendStatus",
    "PullResult",
    "PullStatus",
    "AllocateStrategy",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMachineRoomNearby",
    "MachineRoomResolver",
    "MQClientError",
    "MQBrokerError",
    "MessageValidationError",
    "RemotingError",
    "RemotingClosedError",
    "RemotingConnectError",
    "RemotingTimeoutError",
    "SubscriptionCheckError",
]
