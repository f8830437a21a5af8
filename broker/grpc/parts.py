"""What the gRPC endpoint is built with: the narrow parts of the broker its RPCs use, never the Broker itself.

The Broker fills it when it starts the endpoint; the endpoint (server.py) and the MessagingService
(service.py) read only these. Small Protocols name what is used of the registries and services, so this package does
not reach up to the objects that own them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from broker.acl.authorizer import Authorizer
    from broker.config import BrokerConfig
    from broker.core.pop import PopCore
    from broker.core.recall import RecallService
    from broker.core.send import SendService
    from broker.core.transaction import EndTransactionService
    from broker.tls import TlsSettings
    from protocol.config_bodies import TopicConfig


class TopicLookup(Protocol):
    """The topic registry, as QueryRoute reads it."""

    def get(self, topic: str) -> "TopicConfig | None": ...


class PopClients(Protocol):
    """The POP service, as the gRPC clients' sessions reach it: which clients are alive (auto-renewal of their
    deliveries) and the end of a client's session."""

    client_alive: Callable[[str], bool]

    def release_client(self, client_id: str) -> None: ...


class CheckRecipients(Protocol):
    """The transaction service, as the endpoint registers where checks of gRPC producers go."""

    def add_check_recipient(self, recipient: Any) -> None: ...
    def remove_check_recipient(self, recipient: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class GrpcParts:
    """``config``: read live (limits, route facts: broker name and address, retry delays); ``sender`` / ``ender`` /
    ``pop_core`` / ``recaller``: the messaging core's send, end-transaction, POP and recall services; ``authorizer``:
    the broker's one Authorizer (None when ACL is off); ``tls``: the TLS mode and files of every port."""

    config: "BrokerConfig"
    sender: "SendService"
    ender: "EndTransactionService"
    pop_core: "PopCore"
    pop: PopClients
    topics: TopicLookup
    recaller: "RecallService"
    transactions: CheckRecipients
    authorizer: "Authorizer | None"
    tls: "TlsSettings"
