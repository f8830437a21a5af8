"""The network source over TLS: mutual TLS to the embedded name server and the broker, and the clear refusal of a
plaintext read (real broker process, real SparkSession)."""

from __future__ import annotations

import asyncio

import pytest

from client.remoting import tls_context
from tests.support.tls_certs import make_pki
from tests.support.wire import WireClient, props, send_v2_fields
from protocol.codes import RequestCode as RC, ResponseCode as R


async def _send(addr: str, ctx, topic: str, count: int) -> None:
    async with await WireClient.connect(addr, ctx) as client:
        for i in range(count):
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, i % 2, props(TAGS="T")),
                                        f"tls-{i}".encode())
            assert resp.code == R.SUCCESS, resp.remark


def test_mutual_tls_read_and_plaintext_refusal(spark, broker_factory, tmp_path):
    pki = make_pki(tmp_path / "pki")
    broker = broker_factory("broker-tls", extra={
        "tlsMode": "enforcing", "tlsServerCertPath": pki.server_cert, "tlsServerKeyPath": pki.server_key,
        "tlsServerNeedClientAuth": "require", "tlsServerTrustCertPath": pki.ca})
    client_ctx = tls_context(True, str(pki.ca), str(pki.client_cert), str(pki.client_key))
    asyncio.run(_send(broker.addr, client_ctx, "TlsSpark", 30))

    def reader(**extra: str):
        r = spark.read.format("rocketmq").option("nameServer", broker.namesrv_addr).option("topic", "TlsSpark")
        for key, value in extra.items():
            r = r.option(key, value)
        return r.load()

    rows = reader(tls="true", tlsTrustCertPath=str(pki.ca), tlsCertPath=str(pki.client_cert),
                  tlsKeyPath=str(pki.client_key), pullTimeoutMs="5000").select("body", "broker").collect()
    assert sorted(r.body for r in rows) == sorted(f"tls-{i}".encode() for i in range(30))
    assert {r.broker for r in rows} == {"broker-tls"}

    with pytest.raises(Exception) as info:  # plaintext against an enforcing name server
        reader(pullTimeoutMs="3000").count()
    assert "rocketmq: no name server reachable at" in str(info.value)
