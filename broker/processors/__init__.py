"""Request processors, one module per request family, the single dispatch table and its run table.

The run table maps a request code to a handler that takes a *run* of consecutive requests read together from one
connection (``handler(channel, cmds) -> results``, one per request): pipelined sends are stored as one batch per
queue while each request keeps its own checks and answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.broker import Broker


def build_processors(broker: "Broker") -> dict[str, Any]:
    """Instantiate every processor for `broker` (name -> processor)."""
    from broker.processors.admin import AdminProcessor
    from broker.processors.client_call import ClientCallProcessor
    from broker.processors.client_manage import ClientManageProcessor
    from broker.processors.consumer_offset import ConsumerOffsetProcessor
    from broker.processors.lock import LockProcessor
    from broker.processors.pull import PullProcessor
    from broker.processors.query import QueryProcessor
    from broker.processors.replicas import ReplicasProcessor
    from broker.processors.retry import RetryProcessor
    from broker.processors.send import SendProcessor
    from broker.processors.transaction import TransactionProcessor

    return {
        "send": SendProcessor(broker.send_service),
        "pull": PullProcessor(broker),
        "client_manage": ClientManageProcessor(broker),
        "consumer_offset": ConsumerOffsetProcessor(broker),
        "query": QueryProcessor(broker),
        "retry": RetryProcessor(broker),
        "lock": LockProcessor(broker),
        "admin": AdminProcessor(broker),
        "client_call": ClientCallProcessor(broker),
        "transaction": TransactionProcessor(broker.end_transaction_service, broker.transaction_service,
                                            broker.config.broker_name),
        "replicas": ReplicasProcessor(broker),
    }


def build_dispatch_table(processors: dict[str, Any]) -> dict[int, Any]:
    """{request code: handler} from every processor; a code claimed twice is a bug."""
    table: dict[int, Any] = {}
    for name, processor in processors.items():
        for code, handler in processor.handlers().items():
            if int(code) in table:
                raise ValueError(f"request code {int(code)} handled by two processors (second: {name})")
            table[int(code)] = handler
    return table


def build_run_table(processors: dict[str, Any]) -> dict[int, Any]:
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
