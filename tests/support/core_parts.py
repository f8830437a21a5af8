"""The messaging core's services over a real MessageStore and registries in a temporary directory, built as the Broker
builds them (no network, no HA master: a SYNC_MASTER has no slave), for unit tests of broker/core."""

from __future__ import annotations

from pathlib import Path

from broker.config import BrokerConfig
from broker.core.replication import ReplicationWaiter
from broker.core.send import SendService
from broker.core.send_back import SendBackService
from broker.core.transaction import EndTransactionService
from broker.managers.dlq_resends import DlqResendLog
from broker.managers.subscription_group import SubscriptionGroupManager
from broker.managers.topic_config import TopicConfigManager
from broker.store.message_store import MessageStore
from broker.transaction.service import TransactionService, TransactionSettings
from protocol.message import iter_records

__all__ = ["CoreParts"]


class _NoOffsets:
    """The transaction service's offsets of its half queue, kept nowhere (the tests read no progress)."""

    def commit_offset(self, *args, **kwargs) -> None:
        return None

    def query_offset(self, *args, **kwargs) -> int:
        return -1


class CoreParts:
    """``config`` (BrokerConfig with test defaults, ``**config`` overriding them), ``store``, ``topics``, ``groups``,
    and the core's ``send``, ``transactions`` / ``end`` and ``back`` (send-back and dead-letter resends, audited in
    ``resends``). Close with ``close()``."""

    def __init__(self, root: Path, **config) -> None:
        values = dict(broker_name="core", broker_ip1="127.0.0.1", listen_port=10911, namesrv_addr=None,
                      store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 20,
                      mapped_file_size_consume_queue=20_000, max_hash_slot_num=997, max_index_num=4000,
                      auto_create_topic_enable=True)
        values.update(config)
        self.config = BrokerConfig(**values)
        self.store = store = MessageStore(self.config.to_store_config())
        store.load()
        config_dir = str(root / "config")
        self.topics = TopicConfigManager(self.config, config_dir)
        self.groups = SubscriptionGroupManager(config_dir)
        self.transactions = TransactionService(store, _NoOffsets(), TransactionSettings(),
                                               store_host=store.config.store_host, broker_name=self.config.broker_name,
                                               producer_channel=lambda group: None,
                                               store_message=lambda message: self.send.store_written(message))
        self.send = SendService(self.config, store, self.topics, self.groups, sync_flush=bool(store.config.sync_flush),
                                replication=ReplicationWaiter(self.config, lambda: None,
                                                              lambda: store.commit_log_max_offset),
                                remember_half=self.transactions.remember_half, delay_max_level=lambda: 18)
        self.end = EndTransactionService(self.config, self.transactions)
        self.resends = DlqResendLog(config_dir)
        self.back = SendBackService(self.config, store, self.topics, self.groups, self.send, self.resends)

    def create(self, topic: str, queues: int = 4) -> None:
        self.topics.create_topic_if_absent(topic, queues)

    def read(self, topic: str, queue_id: int) -> list:
        result = self.store.get_messages(topic, queue_id, 0, 100)
        return list(iter_records(result.body())) if result.message_count else []

    def close(self) -> None:
        self.store.close()
