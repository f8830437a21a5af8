"""The gRPC port under the broker's TLS keys: tlsMode=enforcing serves TLS only (client certificates as
tlsServerNeedClientAuth says); the remoting ports keep their own behaviour."""

from __future__ import annotations

import grpc
import pytest

from protocol.grpc import definition_pb2 as pb
from protocol.grpc import service_pb2 as spb
from protocol.grpc import service_pb2_grpc

from tests.support.tls_certs import Pki, make_pki

CLIENT = (("x-mq-client-id", "tls-test@1@1@abc"),)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def _heartbeat(channel: grpc.aio.Channel) -> int:
    stub = service_pb2_grpc.MessagingServiceStub(channel)
    answer = await stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=CLIENT, timeout=5)
    return answer.status.code


def _credentials(pki: Pki, *, client_cert: bool = False) -> grpc.ChannelCredentials:
    chain = {"private_key": pki.client_key.read_bytes(), "certificate_chain": pki.client_cert.read_bytes()} \
        if client_cert else {}
    return grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes(), **chain)


async def test_enforcing_serves_grpc_over_tls_only(grpc_broker_factory, pki):
    port = grpc_broker_factory(tlsMode="enforcing", tlsServerCertPath=pki.server_cert,
                             tlsServerKeyPath=pki.server_key).grpc_port
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", _credentials(pki)) as channel:
        assert await _heartbeat(channel) == pb.UNRECOGNIZED_CLIENT_TYPE  # an answer, over TLS (no Settings yet)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _heartbeat(channel)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_required_client_certificates_on_the_grpc_port(grpc_broker_factory, pki):
    port = grpc_broker_factory(tlsMode="enforcing", tlsServerCertPath=pki.server_cert,
                             tlsServerKeyPath=pki.server_key, tlsServerTrustCertPath=pki.ca,
                             tlsServerNeedClientAuth="require").grpc_port
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", _credentials(pki, client_cert=True)) as channel:
        assert await _heartbeat(channel) == pb.UNRECOGNIZED_CLIENT_TYPE
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", _credentials(pki)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _heartbeat(channel)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
