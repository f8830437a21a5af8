"""TLS settings checks and the first-byte acceptor of RemotingServer, in process (plain asyncio and uvloop)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time

import pytest

from broker.config import ConfigError, load_broker_config
from broker.connection_guard import ConnectionGuard, ConnectionLimits
from broker.namesrv.__main__ import load_namesrv_tls
from broker.remoting_server import RemotingServer
from broker.tls import TlsSettings
from client.remoting import tls_context
from protocol.command import RemotingCommand, encode_command
from protocol.frame import FrameDecoder
from tests.support.tls_certs import make_pki

ECHO = 4242


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _echo(channel, cmd):
    return cmd.make_response(0, channel.remote_addr, None, cmd.body)


async def _roundtrip(port: int, ctx: ssl.SSLContext | None, opaque: int = 7) -> RemotingCommand:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname="" if ctx else None), 5)
    try:
        writer.write(encode_command(RemotingCommand.request(ECHO, {}, b"ping", opaque=opaque)))
        decoder = FrameDecoder()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            data = await asyncio.wait_for(reader.read(65536), 5)
            assert data, "closed by the server"
            got = decoder.feed(data)
            if got:
                return got[0]
        raise AssertionError("no response")
    finally:
        writer.close()


def _settings(pki, mode: str, **more) -> TlsSettings:
    return TlsSettings(mode, str(pki.server_cert), str(pki.server_key), **more)


# ---- settings ---------------------------------------------------------------------------------------
def test_mode_and_client_auth_values_are_checked():
    with pytest.raises(ConfigError) as bad:
        TlsSettings("strict")
    assert bad.value.key == "tlsMode"
    with pytest.raises(ConfigError) as bad:
        TlsSettings("disabled", need_client_auth="always")
    assert bad.value.key == "tlsServerNeedClientAuth"
    assert TlsSettings(" Disabled ").mode == "disabled"


def test_a_tls_mode_without_certificate_or_trust_is_a_config_error(pki):
    with pytest.raises(ConfigError) as bad:
        TlsSettings("permissive", key_path=str(pki.server_key))
    assert bad.value.key == "tlsServerCertPath"
    with pytest.raises(ConfigError) as bad:
        _settings(pki, "enforcing", need_client_auth="require")
    assert bad.value.key == "tlsServerTrustCertPath"


def test_missing_file_names_key_and_file(pki, tmp_path):
    missing = tmp_path / "gone.key"
    with pytest.raises(ConfigError) as bad:
        TlsSettings("enforcing", str(pki.server_cert), str(missing)).server_context()
    assert bad.value.key == "tlsServerKeyPath" and str(missing) in str(bad.value)
    wrong = TlsSettings("enforcing", str(pki.server_cert), str(pki.client_key))  # key of another certificate
    with pytest.raises(ConfigError) as bad:
        wrong.server_context()
    assert "tlsServerCertPath" in str(bad.value) and "\n" not in str(bad.value)


def test_broker_conf_keys_load(pki, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"tlsMode=permissive\ntlsServerCertPath={pki.server_cert}\ntlsServerKeyPath={pki.server_key}\n"
                    f"tlsServerTrustCertPath={pki.ca}\ntlsServerNeedClientAuth=optional\nmetricsHost=0.0.0.0\n")
    cfg = load_broker_config(conf)
    settings = TlsSettings.from_config(cfg)
    assert settings.mode == "permissive" and settings.need_client_auth == "optional"
    assert settings.server_context().verify_mode == ssl.CERT_OPTIONAL
    assert cfg.metrics_host == "0.0.0.0" and load_broker_config(None).metrics_host == "127.0.0.1"
    conf.write_text("tlsMode=enforcing\n")
    with pytest.raises(ConfigError) as bad:
        load_broker_config(conf)
    assert "broker.conf" in str(bad.value) and "tlsServerCertPath" in str(bad.value)


def test_standalone_name_server_reads_the_same_keys(pki, tmp_path):
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"listenPort=9877\ntlsMode=enforcing\ntlsServerCertPath={pki.server_cert}\n"
                    f"tlsServerKeyPath={pki.server_key}\n")
    settings, ctx = load_namesrv_tls(str(conf))
    assert settings.mode == "enforcing" and isinstance(ctx, ssl.SSLContext)
    conf.write_text(f"tlsMode=enforcing\ntlsServerCertPath={tmp_path / 'none.crt'}\ntlsServerKeyPath=x\n")
    with pytest.raises(ConfigError) as bad:
        load_namesrv_tls(str(conf))
    assert "tlsServerCertPath" in str(bad.value) and "none.crt" in str(bad.value)


# ---- acceptor ---------------------------------------------------------------------------------------
async def _permissive_round(pki) -> None:
    guard = ConnectionGuard(ConnectionLimits(server_channel_max_idle_time_seconds=1))
    server = RemotingServer({ECHO: _echo}, "127.0.0.1", 0, name="t", guard=guard, tls=_settings(pki, "permissive"))
    await server.start()
    try:
        assert server.describe() == f"127.0.0.1:{server.port} (tls permissive)"
        secure = await _roundtrip(server.port, tls_context(True, str(pki.ca)))
        plain = await _roundtrip(server.port, None)
        assert secure.body == plain.body == b"ping"
        assert secure.remark.startswith("127.0.0.1:") and secure.remark != "127.0.0.1:0"  # the real peer
        # A silent connection counts against the limit and is closed after the idle timeout.
        silent = socket.create_connection(("127.0.0.1", server.port))
        try:
            deadline = time.monotonic() + 5
            while guard.connections != 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert guard.connections == 1
            silent.settimeout(0.05)
            closed = False
            while not closed and time.monotonic() < deadline + 5:
                try:
                    closed = silent.recv(1) == b""
                except (socket.timeout, BlockingIOError):
                    await asyncio.sleep(0.05)
                except ConnectionError:
                    closed = True
            assert closed, "a silent connection was kept past the idle timeout"
            assert guard.connections == 0
        finally:
            silent.close()
    finally:
        await server.close()


async def test_permissive_acceptor_plain_asyncio(pki):
    await _permissive_round(pki)


def test_permissive_acceptor_uvloop(pki):
    uvloop = pytest.importorskip("uvloop")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_permissive_round(pki))


async def test_enforcing_closes_plaintext_and_failed_handshakes_free_their_slot(pki):
    guard = ConnectionGuard(ConnectionLimits(server_max_connections=2))
    tls = _settings(pki, "enforcing", trust_cert_path=str(pki.ca), need_client_auth="require")
    server = RemotingServer({ECHO: _echo}, "127.0.0.1", 0, name="t", guard=guard, tls=tls)
    await server.start()
    try:
        with pytest.raises((AssertionError, ConnectionError, asyncio.IncompleteReadError)):
            await _roundtrip(server.port, None)
        for _ in range(4):  # more failed handshakes than the limit: none may leak a slot
            with pytest.raises((ssl.SSLError, ConnectionError, AssertionError)):
                await _roundtrip(server.port, tls_context(True, str(pki.ca)))
        mutual = tls_context(True, str(pki.ca), str(pki.client_cert), str(pki.client_key))
        assert (await _roundtrip(server.port, mutual)).body == b"ping"
        deadline = time.monotonic() + 5
        while guard.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert guard.connections == 0
    finally:
        await server.close()
