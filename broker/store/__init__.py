"""RocketMQ-format message store (commit log, consume queues, index, checkpoint)."""

from .config_file import JsonConfigFile
from .mapped_file import StoreDiskFullError, StoreFileError
from .message_store import MessageStore
from .types import (
    GetResult,
    GetStatus,
    MessageToStore,
    PutResult,
    PutStatus,
    QueryResult,
    StoreConfig,
)

__all__ = [
    "GetResult", "GetStatus", "JsonConfigFile", "MessageStore", "MessageToStore", "PutResult", "PutStatus",
    "QueryResult", "StoreConfig", "StoreDiskFullError", "StoreFileError",
]
