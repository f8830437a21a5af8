"""Client side TLS: tls_context() and RemotingClient over TLS against an in-process enforcing server."""

from __future__ import annotations

import ssl

import pytest

from broker.remoting_server import RemotingServer
from broker.tls import TlsSettings
from client.errors import RemotingConnectError
from client.remoting import RemotingClient, tls_context
from protocol.command import RemotingCommand
from tests.support.tls_certs import make_pki

ECHO = 4243


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls_context_options(pki):
    assert tls_context(False) is None and tls_context(None) is None
    own = ssl.create_default_context()
    assert tls_context(own) is own
    ctx = tls_context(True, str(pki.ca))
    assert ctx.verify_mode == ssl.CERT_REQUIRED and not ctx.check_hostname
    assert tls_context(True, str(pki.ca), verify_hostname=True).check_hostname
    with pytest.raises(OSError):
        tls_context(True, str(pki.ca), str(pki.client_cert) + ".missing", str(pki.client_key))


@pytest.mark.parametrize("verify_hostname", [False, True])
async def test_remoting_client_over_tls(pki, verify_hostname):
    tls = TlsSettings("enforcing", str(pki.server_cert), str(pki.server_key))
    server = RemotingServer({ECHO: lambda ch, cmd: cmd.make_response(0, "ok", None, b"pong")}, "127.0.0.1", 0,
                            name="t", tls=tls)
    await server.start()
    client = RemotingClient(ssl_context=tls_context(True, str(pki.ca), verify_hostname=verify_hostname))
    wrong = RemotingClient(ssl_context=tls_context(True, str(pki.other_ca)))
    try:
        addr = f"127.0.0.1:{server.port}"  # the certificate lists 127.0.0.1 as IP SAN
        reply = await client.invoke(addr, RemotingCommand.request(ECHO, {}, b"ping", opaque=client.next_opaque()), 5)
        assert reply.body == b"pong"
        with pytest.raises(RemotingConnectError):
            await wrong.invoke(addr, RemotingCommand.request(ECHO, {}, b"ping", opaque=client.next_opaque()), 5)
    finally:
        await client.close()
        await wrong.close()
        await server.close()
