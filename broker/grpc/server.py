"""The broker's gRPC server (grpc.aio, in the broker's own event loop): start/stop owned by the Broker."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import grpc

from broker.grpc.service import MessagingService
from protocol.grpc import service_pb2_grpc

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 130 * 1024 * 1024  # a 4 MiB body and its headers fit; the reference accepts up to 130 MiB


class GrpcEndpoint:
    def __init__(self, broker: "Broker", host: str, port: int) -> None:
        self.broker = broker
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
        try:
            port = server.add_insecure_port(f"{self.host}:{self.port}")
        except RuntimeError as exc:  # grpcio reports a failed bind this way
            raise OSError(98, f"cannot bind {self.host}:{self.port}: {exc}") from None
        if port == 0:
            raise OSError(98, f"cannot bind {self.host}:{self.port}")
        self.port = port
        service = MessagingService(self.broker, port)
        service_pb2_grpc.add_MessagingServiceServicer_to_server(service, server)
        await server.start()
        self._server, self._service = server, service
        # transaction checks of producers connected over gRPC go out on their Telemetry streams
        self.broker.transaction_service.add_check_recipient(service.transactions)
        self.bind_addr = f"{self.host}:{port}"

    async def stop(self) -> None:
        server, self._server = self._server, None
        service, self._service = self._service, None
        if service is not None:
            self.broker.transaction_service.remove_check_recipient(service.transactions)
        if server is not None:
            await server.stop(grace=1.0)
