"""The broker's gRPC server (grpc.aio, in the broker's own event loop): start/stop owned by the Broker."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import grpc

from broker.errors import ConfigError
from broker.grpc.service import MessagingService
from broker.tls import TlsSettings
from protocol.grpc import service_pb2_grpc

if TYPE_CHECKING:
    from broker.grpc.parts import GrpcParts

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 130 * 1024 * 1024  # a 4 MiB body and its headers fit; the reference accepts up to 130 MiB


def server_credentials(tls: TlsSettings) -> grpc.ServerCredentials | None:
    """TLS for the gRPC port from the broker's TLS keys: tlsMode=enforcing serves TLS only (with client certificates
    as tlsServerNeedClientAuth says); permissive serves plaintext, as one gRPC port cannot take both (logged);
    disabled is plaintext. Unreadable files are a ConfigError naming the key."""
    if tls.mode == "permissive":
        log.warning("tlsMode=permissive: the gRPC port serves plaintext only (it cannot accept TLS and plaintext on "
                    "one port); use tlsMode=enforcing for TLS on it")
    if tls.mode != "enforcing":
        return None
    key = _read(tls.key_path, "tlsServerKeyPath")
    cert = _read(tls.cert_path, "tlsServerCertPath")
    trust = _read(tls.trust_cert_path, "tlsServerTrustCertPath") if tls.trust_cert_path else None
    auth = tls.need_client_auth
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=trust if auth != "none" else None,
                                       require_client_auth=auth == "require")


def _read(path: str | None, key: str) -> bytes:
    try:
        with open(path or "", "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}", key) from None


class GrpcEndpoint:
    """The grpc.aio server and its MessagingService, built from ``parts`` (broker/grpc/parts.py)."""

    def __init__(self, parts: "GrpcParts", host: str, port: int) -> None:
        self.parts = parts
        self.host = host
        self.port = port
        self.bind_addr: str | None = None
        self._server: grpc.aio.Server | None = None
        self._service: MessagingService | None = None

    async def start(self) -> None:
        """Bind and serve; OSError when the port cannot be bound."""
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                          ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                                          ("grpc.so_reuseport", 0)])
        credentials = server_credentials(self.parts.tls)
        address = f"{self.host}:{self.port}"
        try:
            port = server.add_secure_port(address, credentials) if credentials is not None \
                else server.add_insecure_port(address)
        except RuntimeError as exc:  # grpcio reports a failed bind this way
            raise OSError(98, f"cannot bind {self.host}:{self.port}: {exc}") from None
        if port == 0:
            raise OSError(98, f"cannot bind {self.host}:{self.port}")
        self.port = port
        service = MessagingService(self.parts, port)
        service_pb2_grpc.add_MessagingServiceServicer_to_server(service, server)
        await server.start()
        self._server, self._service = server, service
        # transaction checks of producers connected over gRPC go out on their Telemetry streams; the POP service
        # renews a client's deliveries while the client is alive (heard from lately on this endpoint)
        self.parts.transactions.add_check_recipient(service.transactions)
        self.parts.pop.client_alive = service.client_alive
        self.bind_addr = f"{self.host}:{port}" + (" (tls)" if credentials is not None else "")

    async def stop(self) -> None:
        server, self._server = self._server, None
        service, self._service = self._service, None
        if service is not None:
            self.parts.transactions.remove_check_recipient(service.transactions)
        if server is not None:
            await server.stop(grace=1.0)
