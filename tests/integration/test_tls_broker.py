"""TLS on the broker, VIP and embedded name-server ports (tlsMode), mutual TLS, mqadmin --tls, start-up errors
and the listening line, against the real broker subprocess."""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import subprocess
import sys

import pytest

from client import Message, Producer, PullConsumer, PullStatus, SendStatus
from client.remoting import tls_context
from protocol.codes import RequestCode as RC

from tests.support.broker_process import PROJECT_ROOT, NamesrvProcess, free_port
from tests.support.tls_certs import Pki, make_pki
from tests.support.wire import WireClient, send_v2_fields


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _tls_keys(pki: Pki, mode: str, **more: object) -> dict[str, object]:
    return {"tlsMode": mode, "tlsServerCertPath": pki.server_cert, "tlsServerKeyPath": pki.server_key, **more}


def _vip(addr: str) -> str:
    host, port = addr.rsplit(":", 1)
    return f"{host}:{int(port) - 2}"


async def _send_ok(client: WireClient, topic: str) -> None:
    resp = await asyncio.wait_for(client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic), b"tls body"), 10)
    assert resp.code == 0, resp.remark


async def _refused_silently(addr: str, ctx: ssl.SSLContext | None = None) -> bool:
    """True when the connection ends without any answer (handshake failure or close)."""
    try:
        client = await WireClient.connect(addr, ctx)
    except (ssl.SSLError, OSError, asyncio.TimeoutError):
        return True
    try:
        await asyncio.wait_for(client.request(RC.SEND_MESSAGE_V2, send_v2_fields("TlsRefused"), b"x"), 10)
    except (ConnectionError, ssl.SSLError, OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        return True
    finally:
        await client.close()
    return False


async def test_enforcing_serves_tls_clients_and_closes_plaintext(broker_factory, pki):
    broker = broker_factory(extra=_tls_keys(pki, "enforcing"))
    ctx = tls_context(True, str(pki.ca))
    for addr in (broker.addr, _vip(broker.addr)):
        async with await WireClient.connect(addr, ctx) as client:
            await _send_ok(client, "TlsEnforced")
        assert await _refused_silently(addr), f"plaintext was served on {addr} in enforcing mode"
    # Our client: name server (embedded, TLS) and broker over TLS.
    async with Producer("tls-pg", broker.namesrv_addr, tls=True, tls_ca_path=str(pki.ca)) as producer, \
            PullConsumer("tls-cg", broker.namesrv_addr, tls=True, tls_ca_path=str(pki.ca)) as consumer:
        sent = await producer.send(Message("TlsClientTopic", b"over tls"))
        assert sent.status is SendStatus.SEND_OK
        result = await consumer.pull(sent.message_queue, "*", sent.queue_offset)
        assert result.status is PullStatus.FOUND and result.messages[0].body == b"over tls"
    # A plaintext client cannot reach the embedded name server either.
    assert await _refused_silently(broker.namesrv_addr)
    lines = [ln for ln in broker.log_text().splitlines() if ln.startswith("listening:")]
    assert lines and f"broker 0.0.0.0:{broker.port} (tls enforcing)" in lines[0], broker.log_text()
    assert f"namesrv 0.0.0.0:{broker.namesrv_port} (tls enforcing)" in lines[0]


async def test_client_with_an_unknown_ca_is_refused(broker_factory, pki):
    broker = broker_factory(extra=_tls_keys(pki, "enforcing"))
    with pytest.raises(ssl.SSLCertVerificationError):
        await WireClient.connect(broker.addr, tls_context(True, str(pki.other_ca)))


async def test_permissive_serves_tls_and_plaintext_on_one_port(broker_factory, pki):
    broker = broker_factory(extra=_tls_keys(pki, "permissive"))
    ctx = tls_context(True, str(pki.ca))
    async with await WireClient.connect(broker.addr, ctx) as secure, await WireClient.connect(broker.addr) as plain:
        await _send_ok(secure, "TlsPermissive")
        await _send_ok(plain, "TlsPermissive")
        assert secure.writer.get_extra_info("ssl_object") is not None
    async with Producer("perm-pg", broker.namesrv_addr) as producer:  # plaintext client, name server included
        assert (await producer.send(Message("TlsPermissive", b"plain"))).status is SendStatus.SEND_OK


async def test_client_auth_require_needs_a_client_certificate(broker_factory, pki):
    broker = broker_factory(extra=_tls_keys(pki, "enforcing", tlsServerTrustCertPath=pki.ca,
                                            tlsServerNeedClientAuth="require"))
    assert await _refused_silently(broker.addr, tls_context(True, str(pki.ca)))
    mutual = tls_context(True, str(pki.ca), str(pki.client_cert), str(pki.client_key))
    async with await WireClient.connect(broker.addr, mutual) as client:
        await _send_ok(client, "TlsMutual")
    # A rejected handshake does not leak a connection slot: the broker keeps serving.
    for _ in range(3):
        assert await _refused_silently(broker.addr, tls_context(True, str(pki.ca)))
    async with await WireClient.connect(broker.addr, mutual) as client:
        await _send_ok(client, "TlsMutual")


def _mqadmin(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT))
    return subprocess.run([sys.executable, "-m", "client.admin.cli", *args], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_mqadmin_tls(broker_factory, pki):
    broker = broker_factory(extra=_tls_keys(pki, "enforcing"))
    done = _mqadmin("updateTopic", "-n", broker.namesrv_addr, "-c", "DefaultCluster", "-t", "TlsAdminTopic",
                    "--tls", "--tls-ca", str(pki.ca))
    assert done.returncode == 0, done.stderr
    listed = _mqadmin("topicList", "-n", broker.namesrv_addr, "--tls", "--tls-ca", str(pki.ca))
    assert listed.returncode == 0 and "TlsAdminTopic" in listed.stdout, listed.stderr
    plain = _mqadmin("topicList", "-n", broker.namesrv_addr, "--timeout", "2")
    assert plain.returncode != 0


@pytest.mark.parametrize("key", ["tlsServerCertPath", "tlsServerKeyPath"])
def test_missing_certificate_file_stops_start_up_with_one_line(broker_factory, pki, tmp_path, key):
    missing = tmp_path / "nowhere" / "missing.pem"
    broker = broker_factory(start=False, extra=_tls_keys(pki, "enforcing", **{key: missing}))
    with pytest.raises(RuntimeError):
        broker.start(timeout=20)
    assert broker.proc is not None and broker.proc.returncode == 2
    errors = [ln for ln in broker.log_text().splitlines() if ln.startswith("mqbroker:")]
    assert len(errors) == 1, broker.log_text()
    assert key in errors[0] and str(missing) in errors[0]
    assert "Traceback" not in broker.log_text()


def test_bad_mode_value_stops_start_up(broker_factory, pki):
    broker = broker_factory(start=False, extra=_tls_keys(pki, "strict"))
    with pytest.raises(RuntimeError):
        broker.start(timeout=20)
    assert broker.proc.returncode == 2
    assert re.search(r"mqbroker: .*tlsMode.*strict", broker.log_text()), broker.log_text()


async def test_listening_line_states_real_bind_addresses(broker_factory):
    metrics_port = free_port()
    broker = broker_factory(extra={"listenHost": "127.0.0.1", "metricsPort": metrics_port})
    line = ""
    for _ in range(100):  # printed right after the boot line, which is what the fixture waited for
        line = next((ln for ln in broker.log_text().splitlines() if ln.startswith("listening:")), "")
        if line:
            break
        await asyncio.sleep(0.05)
    assert line == (f"listening: broker 127.0.0.1:{broker.port}, vip 127.0.0.1:{broker.port - 2}, "
                    f"ha 127.0.0.1:{broker.port + 1}, namesrv 127.0.0.1:{broker.namesrv_port}, "
                    f"metrics 127.0.0.1:{metrics_port}")


async def test_standalone_name_server_and_broker_registration_over_tls(broker_factory, pki, tmp_path):
    """mqnamesrv -c with tlsMode=enforcing; the broker (enforcing, so tlsEnable defaults on) registers over TLS,
    verifying the name server against tlsServerTrustCertPath."""
    ns = NamesrvProcess(workdir=tmp_path, conf={"tlsMode": "enforcing", "tlsServerCertPath": pki.server_cert,
                                                "tlsServerKeyPath": pki.server_key})
    try:
        listening = f"listening: namesrv 127.0.0.1:{ns.port} (tls enforcing)"
        assert listening in ns.wait_for_log(listening), ns.log_text()
        namesrv = ns.addr
        broker_factory(embedded_namesrv=False, namesrv_addr=namesrv,
                       extra=_tls_keys(pki, "enforcing", tlsServerTrustCertPath=pki.ca))
        async with Producer("tls-remote-pg", namesrv, tls=True, tls_ca_path=str(pki.ca)) as producer:
            result = None
            for _ in range(50):  # the first registration may still be on its way
                try:
                    result = await producer.send(Message("TlsRemoteNs", b"x"))
                    break
                except Exception:
                    await asyncio.sleep(0.2)
            assert result is not None and result.status is SendStatus.SEND_OK
    finally:
        ns.stop()
