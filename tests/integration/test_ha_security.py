"""The HA (master/slave) link as an attacker sees it, with real broker processes (issue 27): who may read the log or
acknowledge SYNC_MASTER writes, TLS, the connection cap, and records whose topic would become a path outside the
store (a slave applying a master's stream, recovery reading a tampered log). Peers that are not brokers are raw
sockets or a small asyncio server speaking protocol/ha.py."""

from __future__ import annotations

import asyncio
import os
import ssl
import struct
from pathlib import Path

import pytest
from tests.support.broker_process import BrokerProcess, free_port

from protocol.codes import RequestCode as RC
from protocol.codes import ResponseCode as R
from protocol.ha import (
    HANDSHAKE_MAGIC,
    NONCE_SIZE,
    HandshakeError,
    SlaveHandshake,
    encode_frame_header,
    encode_report,
)
from protocol.ids import pack_host
from protocol.message import encode_record

from tests.support.acl import signed
from tests.support.tls_certs import make_pki
from tests.support.wire import WireClient, props, pull_records, send_v2_fields, wait_until

FILE_SIZE = 256 * 1024
ACL_YAML = """
accounts:
  - accessKey: ha_admin01
    secretKey: ha-admin-secret-1
    admin: true
  - accessKey: app_key01
    secretKey: app_secret01
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""
ADMIN = ("ha_admin01", "ha-admin-secret-1")
APP = ("app_key01", "app_secret01")
SECRET = b"top-secret-body-"


def master_and_slave(tmp_path: Path, broker_factory, *, master_extra: dict | None = None,
                     slave_extra: dict | None = None, start_slave: bool = False):
    """A master and a slave wired by haMasterAddress (no name server)."""
    ha_port = free_port()
    common = {"mappedFileSizeCommitLog": FILE_SIZE, "brokerClusterName": "HaSec"}
    master = broker_factory("broker-h", embedded_namesrv=False,
                            extra={**common, "haListenPort": ha_port, **(master_extra or {})})
    slave_dir = tmp_path / "slave"
    slave_dir.mkdir(exist_ok=True)
    slave = BrokerProcess(slave_dir, "broker-h", embedded_namesrv=False,
                          extra={**common, "brokerRole": "SLAVE", "brokerId": 1,
                                 "haMasterAddress": f"127.0.0.1:{ha_port}", **(slave_extra or {})})
    if start_slave:
        slave.start()
    return master, slave, ha_port


def log_bytes(store_dir: Path) -> bytes:
    directory = store_dir / "commitlog"
    if not directory.exists():
        return b""
    return b"".join(f.read_bytes() for f in sorted(directory.iterdir()))


async def same_logs(master: BrokerProcess, slave: BrokerProcess) -> bool:
    return log_bytes(master.store_dir) == log_bytes(slave.store_dir) != b""


async def read_all(reader: asyncio.StreamReader, seconds: float) -> tuple[bytes, bool]:
    """What the peer sent within `seconds`, and whether it closed the connection."""
    data = b""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        left = deadline - loop.time()
        if left <= 0:
            return data, False
        try:
            chunk = await asyncio.wait_for(reader.read(65536), left)
        except asyncio.TimeoutError:
            return data, False
        except ConnectionError:
            return data, True
        if not chunk:
            return data, True
        data += chunk


def refusal(data: bytes) -> str:
    """The reason of a REFUSE message (the only thing a refused peer is sent)."""
    assert data.startswith(HANDSHAKE_MAGIC) and data[4] == 5, data[:64]
    size = struct.unpack_from(">H", data, 5)[0]
    assert len(data) == 7 + size, "bytes after the REFUSE"
    return data[7:].decode()


@pytest.fixture
def acl_file(tmp_path):
    (tmp_path / "plain_acl.yml").write_text(ACL_YAML)
    slave_dir = tmp_path / "slave"
    slave_dir.mkdir(exist_ok=True)
    (slave_dir / "plain_acl.yml").write_text(ACL_YAML)


async def test_under_acl_only_an_admin_account_reads_the_log_or_acknowledges(tmp_path, broker_factory, acl_file):
    master, slave, ha_port = master_and_slave(
        tmp_path, broker_factory,
        master_extra={"aclEnable": "true", "brokerRole": "SYNC_MASTER", "slaveTimeout": 1500},
        slave_extra={"aclEnable": "true", "accessKey": ADMIN[0], "secretKey": ADMIN[1]})
    assert f"ha 0.0.0.0:{ha_port} (acl)" in master.wait_for_log("listening:")  # the boot line lists the HA port
    async with await WireClient.connect(master.addr) as client:
        for i in range(5):
            resp = await signed(client, RC.SEND_MESSAGE_V2, send_v2_fields("Secrets", 0, props(UNIQ_KEY=f"K{i}")),
                                SECRET + b"%d" % i, creds=ADMIN)
            assert resp.code == R.SLAVE_NOT_AVAILABLE  # stored, no slave yet

        # 1. an anonymous peer speaking the reference's protocol: asks for the log from 0, acknowledges far ahead
        reader, writer = await asyncio.open_connection("127.0.0.1", ha_port)
        writer.write(encode_report(0) + encode_report(1 << 20))
        await writer.drain()
        # 2. a fake slave naming the admin account without its secret, also acknowledging
        fake_r, fake_w = await asyncio.open_connection("127.0.0.1", ha_port)
        wrong = SlaveHandshake(ADMIN[0], "not-the-secret")
        fake_w.write(wrong.hello())
        challenge = await fake_r.read(4096)
        with pytest.raises(HandshakeError, match="could not prove"):  # and the master's proof is checked too
            wrong.feed(challenge)
        fake_w.write(HANDSHAKE_MAGIC + bytes([3]) + struct.pack(">H", 32) + os.urandom(32) + encode_report(1 << 20))
        # 3. a non-admin account with its right secret
        app_r, app_w = await asyncio.open_connection("127.0.0.1", ha_port)
        app = SlaveHandshake(*APP)
        app_w.write(app.hello())
        # meanwhile a SYNC_MASTER send: nobody above may count as a slave or acknowledge it
        resp = await signed(client, RC.SEND_MESSAGE_V2, send_v2_fields("Secrets", 0, props(UNIQ_KEY="K5")),
                            SECRET + b"5", creds=ADMIN)
        assert resp.code == R.SLAVE_NOT_AVAILABLE, resp.remark
        for name, (r, w) in {"anonymous": (reader, writer), "wrong secret": (fake_r, fake_w),
                             "non-admin": (app_r, app_w)}.items():
            data, closed = await read_all(r, 3.0)
            assert closed, name
            assert SECRET not in data, name
            reason = refusal(data)
            assert {"anonymous": "authentication required", "wrong secret": "wrong proof",
                    "non-admin": "no admin account"}[name] in reason, (name, reason)
            w.close()

        # control: the real slave, with the admin account, replicates and acknowledges
        slave.start()
        try:
            async def acknowledged():
                answer = await signed(client, RC.SEND_MESSAGE_V2,
                                      send_v2_fields("Secrets", 0, props(UNIQ_KEY="K6")), SECRET + b"6", creds=ADMIN)
                return answer if answer.code == R.SUCCESS else None
            await wait_until(acknowledged, "a SEND_OK acknowledged by the authenticated slave", timeout=20,
                             interval=0.3)
            await wait_until(lambda: same_logs(master, slave), "the slave's log byte-identical", timeout=20)
            assert SECRET + b"0" in log_bytes(slave.store_dir)
        finally:
            master.stop()  # SIGTERM with the slave connected: a clean shutdown
            slave.stop()
    assert "CancelledError" not in master.log_text() and "ERROR" not in master.log_text(), master.log_text()[-3000:]
    assert "could not prove" not in slave.log_text()


async def fake_master(handler) -> tuple[asyncio.AbstractServer, int]:
    port = free_port()
    server = await asyncio.start_server(handler, "127.0.0.1", port)
    return server, port


def slave_only(tmp_path: Path, ha_port: int, **extra) -> BrokerProcess:
    slave_dir = tmp_path / "slave"
    slave_dir.mkdir(exist_ok=True)
    return BrokerProcess(slave_dir, "broker-h", embedded_namesrv=False,
                         extra={"mappedFileSizeCommitLog": FILE_SIZE, "brokerRole": "SLAVE", "brokerId": 1,
                                "haMasterAddress": f"127.0.0.1:{ha_port}", **extra})


def record(topic: bytes, offset: int, body: bytes = b"from-a-fake-master", queue_id: int = 0) -> bytes:
    host = pack_host("127.0.0.1", 10911)
    return encode_record(queue_id=queue_id, flag=0, queue_offset=0, physical_offset=offset, sys_flag=0,
                         born_timestamp=1, born_host=host, store_timestamp=1, store_host=host, reconsume_times=0,
                         prepared_transaction_offset=0, body=body, topic=topic, properties=b"")


async def test_a_slave_under_acl_refuses_a_master_that_cannot_prove_itself(tmp_path, acl_file):
    seen: list[bytes] = []

    async def impostor(reader, writer):  # answers the HELLO with a made-up proof, then offers a frame
        seen.append(await reader.read(4096))
        payload = os.urandom(NONCE_SIZE + 32)
        writer.write(HANDSHAKE_MAGIC + bytes([2]) + struct.pack(">H", len(payload)) + payload)
        writer.write(encode_frame_header(0, 0))
        await writer.drain()
        seen.append(await reader.read(4096))
        writer.close()

    server, port = await fake_master(impostor)
    slave = slave_only(tmp_path, port, aclEnable="true", accessKey=ADMIN[0], secretKey=ADMIN[1])
    slave.start()
    try:
        async with server:
            await asyncio.to_thread(slave.wait_for_log, "could not prove it knows accessKey", 15)
        assert seen[0].startswith(HANDSHAKE_MAGIC) and seen[1] == b""  # no PROOF, no report: nothing to replay
        assert log_bytes(slave.store_dir) == b"" or not log_bytes(slave.store_dir).strip(b"\0")
    finally:
        slave.stop()


async def test_a_slave_refuses_a_record_whose_topic_would_leave_its_store(tmp_path):
    """No ACL here (the reference's plain protocol): the record check holds whoever the master is."""
    sent: dict[str, int] = {}

    async def master(reader, writer):
        first = await reader.read(8)
        start = struct.unpack(">q", first)[0]
        good = record(b"LegalTopic", start, body=b"a-legal-record")
        bad = record(b"../../escaped-ha", start + len(good))
        frame = good + bad
        writer.write(encode_frame_header(start, len(frame)) + frame)
        await writer.drain()
        sent["good_end"] = start + len(good)
        await reader.read(4096)
        writer.close()

    server, port = await fake_master(master)
    slave = slave_only(tmp_path, port)
    slave.start()
    try:
        async with server:
            await asyncio.to_thread(slave.wait_for_log, "illegal topic name b'../../escaped-ha'", 15)
        line = next(line for line in slave.log_text().splitlines() if "escaped-ha" in line)
        assert "ERROR" in line and "refused" in line and "connection dropped" in line, line
        for where in (tmp_path, tmp_path / "slave", slave.store_dir):
            assert not (where / "escaped-ha").exists()
        assert not any("escaped" in str(p) for p in tmp_path.rglob("*"))
        assert (slave.store_dir / "consumequeue" / "LegalTopic" / "0").is_dir()  # the legal record was applied
        stored = log_bytes(slave.store_dir)
        assert b"a-legal-record" in stored and b"escaped-ha" not in stored  # the refused bytes were cut again
    finally:
        slave.stop()
    slave.start()  # and a restart's recovery finds a clean log ending after the legal record
    try:
        async with await WireClient.connect(slave.addr) as client:
            assert [r.body for r in await pull_records(client, "LegalTopic", 0)] == [b"a-legal-record"]
    finally:
        slave.stop()


async def test_recovery_reports_a_tampered_topic_and_creates_nothing_outside_the_store(tmp_path, broker_factory):
    broker = broker_factory("broker-t", embedded_namesrv=False)
    async with await WireClient.connect(broker.addr) as client:
        for i in range(3):
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("TamperAbcd", 0, props(UNIQ_KEY=f"T{i}")),
                                        b"tamper-%d" % i)
            assert resp.code == R.SUCCESS
    broker.stop()
    log_file = sorted((broker.store_dir / "commitlog").iterdir())[0]
    data = bytearray(log_file.read_bytes())
    first = data.find(b"\x0aTamperAbcd")
    second = data.find(b"\x0aTamperAbcd", first + 1)
    data[second + 1:second + 11] = b"../../tamp"  # same length: sizes still add up, and the topic has no CRC
    log_file.write_bytes(bytes(data))
    for cq in (broker.store_dir / "consumequeue").iterdir():  # recovery re-builds the queues from the log
        for path in sorted(cq.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        cq.rmdir()
    broker.start()
    line = broker.wait_for_log("illegal topic name b'../../tamp'", timeout=10)
    assert "commit log damaged" in line
    assert not (tmp_path / "tamp").exists() and not any("tamp" == p.name for p in tmp_path.rglob("*"))
    async with await WireClient.connect(broker.addr) as client:  # control: the records around it are kept
        assert [r.body for r in await pull_records(client, "TamperAbcd", 0)] == [b"tamper-0", b"tamper-2"]


async def test_tls_enforcing_replicates_over_tls_and_refuses_plaintext(tmp_path, broker_factory):
    pki = make_pki(tmp_path / "pki")
    tls = {"tlsMode": "enforcing", "tlsServerCertPath": pki.server_cert, "tlsServerKeyPath": pki.server_key,
           "tlsServerTrustCertPath": pki.ca}
    master, slave, ha_port = master_and_slave(tmp_path, broker_factory, master_extra=tls, slave_extra=tls)
    assert f"ha 0.0.0.0:{ha_port} (tls enforcing)" in master.wait_for_log("listening:")
    reader, writer = await asyncio.open_connection("127.0.0.1", ha_port)
    writer.write(encode_report(0))
    await writer.drain()
    data, closed = await read_all(reader, 5.0)
    assert closed and data == b""  # a plaintext peer gets nothing
    writer.close()
    slave.start()
    try:
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        ctx.check_hostname = False
        async with await WireClient.connect(master.addr, ctx) as client:
            for i in range(20):
                resp = await client.request(RC.SEND_MESSAGE_V2,
                                            send_v2_fields("TlsRepl", 0, props(UNIQ_KEY=f"L{i}")), b"tls-body-%d" % i)
                assert resp.code == R.SUCCESS
        await wait_until(lambda: same_logs(master, slave), "the slave caught up over TLS", timeout=20)
        assert b"tls-body-19" in log_bytes(slave.store_dir)
    finally:
        slave.stop()


async def test_the_ha_port_refuses_connections_past_its_cap(tmp_path, broker_factory):
    ha_port = free_port()
    master = broker_factory("broker-c", embedded_namesrv=False, extra={"haListenPort": ha_port, "haMaxConnections": 3})
    async with await WireClient.connect(master.addr) as client:
        assert (await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("Capped", 0), b"c")).code == R.SUCCESS
    held = [await asyncio.open_connection("127.0.0.1", ha_port) for _ in range(3)]
    for _, w in held:
        w.write(encode_report(0))  # three slaves of the reference's protocol (no ACL): served
    over_r, over_w = await asyncio.open_connection("127.0.0.1", ha_port)
    data, closed = await read_all(over_r, 2.0)
    assert closed and data == b""
    assert "haMaxConnections" in master.wait_for_log("haMaxConnections", timeout=5)
    for r, _ in held:  # control: those under the cap are streamed the log
        header = await asyncio.wait_for(r.readexactly(12), 5.0)
        assert struct.unpack(">qi", header)[0] == 0
    held[0][1].close()
    await asyncio.sleep(0.3)
    again_r, again_w = await asyncio.open_connection("127.0.0.1", ha_port)  # a slot is free again
    again_w.write(encode_report(0))
    data, closed = await read_all(again_r, 1.0)
    assert not closed
    for _, w in held[1:] + [(over_r, over_w), (again_r, again_w)]:
        w.close()


async def test_acl_on_one_side_only_is_refused_with_a_clear_line_on_each(tmp_path, broker_factory, acl_file):
    master, slave, _ = master_and_slave(tmp_path, broker_factory, master_extra={"aclEnable": "true"})
    slave.start()  # no ACL, no credentials: it speaks the plain protocol
    try:
        line = await asyncio.to_thread(slave.wait_for_log, "requires authentication", 15)
        assert "set aclEnable=true and an admin account's accessKey/secretKey on this slave" in line
        assert "did not send a handshake message" in master.wait_for_log("HA port: refused", 5)
        assert log_bytes(slave.store_dir).strip(b"\0") == b""
    finally:
        slave.stop()
