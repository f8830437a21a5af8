"""ACL and TLS together: signed requests over enforced TLS, on the broker and its embedded name server."""

from __future__ import annotations

import pytest

from client import Message, Producer, PullConsumer, PullStatus, SendStatus
from client.errors import MQBrokerError

from tests.support.acl import CLIENT_ACL_YAML as ACL_YAML, CLIENT_APP as APP, CLIENT_WRONG as WRONG
from tests.support.tls_certs import make_pki


@pytest.fixture
def secured_broker(broker_factory, tmp_path):
    pki = make_pki(tmp_path / "pki")
    (tmp_path / "plain_acl.yml").write_text(ACL_YAML)
    broker = broker_factory(extra={"aclEnable": "true", "tlsMode": "enforcing", "tlsServerCertPath": pki.server_cert,
                                   "tlsServerKeyPath": pki.server_key})
    return broker, str(pki.ca)


async def test_signed_clients_over_tls_are_served_and_a_wrong_secret_refused(secured_broker):
    broker, ca = secured_broker
    tls = {"tls": True, "tls_ca_path": ca}
    async with Producer("orders_pg", broker.namesrv_addr, credentials=APP, **tls) as producer:
        result = await producer.send(Message("Orders", b"over tls, signed"))
        assert result.status is SendStatus.SEND_OK
    async with PullConsumer("orders_cg", broker.namesrv_addr, credentials=APP, **tls) as consumer:
        queue = next(mq for mq in await consumer.fetch_message_queues("Orders") if mq.queue_id == result.queue_id)
        pulled = await consumer.pull(queue, "*", offset=result.queue_offset, max_nums=1)
        assert pulled.status is PullStatus.FOUND and pulled.messages[0].body == b"over tls, signed"
    async with Producer("orders_pg", broker.namesrv_addr, credentials=WRONG, retry_times_when_send_failed=0,
                        **tls) as producer:
        with pytest.raises(MQBrokerError, match="[Ss]ignature"):
            await producer.send(Message("Orders", b"refused"))
