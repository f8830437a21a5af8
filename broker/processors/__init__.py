"""Request processors, one module per request family, the single dispatch table and its run table.

The run table maps a request code to a handler that takes a *run* of consecutive requests read together from one
connection (``handler(channel, cmds) -> results``, one per request): pipelined sends are stored as one batch per
queue while each request keeps its own checks and answer."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from broker.processors.admin import AdminProcessor
from broker.processors.client_call import ClientCallProcessor
from broker.processors.client_manage import ClientManageProcessor
from broker.processors.consumer_offset import ConsumerOffsetProcessor
from broker.processors.lock import LockProcessor
from broker.processors.query import QueryProcessor
from broker.processors.replicas import ReplicasProcessor
from broker.processors.retry import RetryProcessor


@dataclass(frozen=True)
class Processors:
    """Every request processor of one broker, each built by the Broker with the parts it uses."""

    send: Any  # SendProcessor (send.py)
    pull: Any  # PullProcessor (pull.py)
    transaction: Any  # TransactionProcessor (transaction.py)
    client_manage: ClientManageProcessor
    consumer_offset: ConsumerOffsetProcessor
    query: QueryProcessor
    retry: RetryProcessor
    lock: LockProcessor
    admin: AdminProcessor
    client_call: ClientCallProcessor
    replicas: ReplicasProcessor

    def items(self) -> list[tuple[str, Any]]:
        """(name, processor) pairs, for building the tables."""
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


def build_dispatch_table(processors: Processors) -> dict[int, Any]:
    """{request code: handler} from every processor; a code claimed twice is a bug."""
    table: dict[int, Any] = {}
    for name, processor in processors.items():
        for code, handler in processor.handlers().items():
            if int(code) in table:
                raise ValueError(f"request code {int(code)} handled by two processors (second: {name})")
            table[int(code)] = handler
    return table


def build_run_table(processors: Processors) -> dict[int, Any]:
    """{request code: run handler} from the processors that offer ``run_handlers()``."""
    table: dict[int, Any] = {}
    for name, processor in processors.items():
        offer = getattr(processor, "run_handlers", None)
        if offer is None:
            continue
        for code, handler in offer().items():
            if int(code) in table:
                raise ValueError(f"request code {int(code)} has two run handlers (second: {name})")
            table[int(code)] = handler
    return table
