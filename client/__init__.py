"""asyncio RocketMQ client (remoting protocol): producer, push consumer and pull consumer.

    from client import Producer, PushConsumer, PullConsumer, Message, MessageSelector, ConsumeResult,
                        ConsumeOrderlyResult

Blocking variants for scripts: client.sync.Producer / PullConsumer / PushConsumer.
Brokers with plain ACL (aclEnable=true): pass ``credentials=Credentials(access_key, secret_key)`` to any of them.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name is imported on first use
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

# name -> module: `import client` stays cheap (a Spark worker or a CLI that needs one part does not import the
# producer, the consumers and their dependencies; PEP 562)
_EXPORTS = {
    "AllocateMessageQueueAveragely": "client.allocate",
    "AllocateMessageQueueAveragelyByCircle": "client.allocate",
    "AllocateMachineRoomNearby": "client.allocate",
    "AllocateMessageQueueByConfig": "client.allocate",
    "AllocateMessageQueueByMachineRoom": "client.allocate",
    "AllocateMessageQueueConsistentHash": "client.allocate",
    "AllocateStrategy": "client.allocate",
    "MachineRoomResolver": "client.allocate",
    "ConsumeConcurrentlyContext": "client.consume_context",
    "ConsumeOrderlyContext": "client.consume_context",
    "Credentials": "client.credentials",
    "MessageValidationError": "client.errors",
    "MQBrokerError": "client.errors",
    "MQClientError": "client.errors",
    "RemotingClosedError": "client.errors",
    "RemotingConnectError": "client.errors",
    "RemotingError": "client.errors",
    "RemotingTimeoutError": "client.errors",
    "SubscriptionCheckError": "client.errors",
    "ConsumeOrderlyResult": "client.message",
    "ConsumeResult": "client.message",
    "Message": "client.message",
    "MessageExt": "client.message",
    "MessageQueue": "client.message",
    "MessageSelector": "client.message",
    "PullResult": "client.message",
    "PullStatus": "client.message",
    "SendResult": "client.message",
    "SendStatus": "client.message",
    "Producer": "client.producer",
    "PullConsumer": "client.pull_consumer",
    "PushConsumer": "client.push_consumer",
    "LocalTransactionState": "client.transaction_producer",
    "TransactionProducer": "client.transaction_producer",
    "TransactionSendResult": "client.transaction_producer",
}

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
