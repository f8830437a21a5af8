"""Our client and mqadmin with plain-ACL credentials against the real broker with aclEnable=true.

The right account works end to end (produce, batch, one-way, pull, push, offsets, admin codes); a wrong secret, a
missing permission or a missing signature is refused, and the broker's remark reaches the caller's exception.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest
from tests.support.broker_process import PROJECT_ROOT

from client import (
    ConsumeResult,
    Message,
    MQBrokerError,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    sync,
)

from tests.support.acl import CLIENT_ACL_YAML as ACL_YAML
from tests.support.acl import CLIENT_ADMIN as ADMIN, CLIENT_APP as APP, CLIENT_WRONG as WRONG


@pytest.fixture
def acl_broker(broker_factory, tmp_path):
    (tmp_path / "plain_acl.yml").write_text(ACL_YAML)  # the default aclFile: beside the broker's .conf
    return broker_factory(extra={"aclEnable": "true", "autoCreateTopicEnable": "false"})


async def create_topics(ns: str, *topics: str) -> None:
    """Admin code 17 through mqadmin signed with the admin account."""
    for topic in topics:
        proc = await asyncio.to_thread(mqadmin, ["updateTopic", "-n", ns, "-t", topic, "-w", "2", "-r", "2",
                                                 "--access-key", ADMIN.access_key, "--secret-key", ADMIN.secret_key])
        assert proc.returncode == 0, proc.stderr


def mqadmin(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_")}
    environ["PYTHONPATH"] = str(PROJECT_ROOT)
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "client.admin.cli", *args], cwd=PROJECT_ROOT, env=environ,
                          capture_output=True, text=True, timeout=60)


def test_mqadmin_signs_and_admin_codes_need_an_admin_account(acl_broker):
    ns = acl_broker.namesrv_addr
    create = ["updateTopic", "-n", ns, "-t", "Orders"]
    refused = mqadmin(create)
    assert refused.returncode == 1 and "No accessKey is configured" in refused.stderr, refused.stderr
    wrong = mqadmin(create + ["--access-key", WRONG.access_key, "--secret-key", WRONG.secret_key])
    assert wrong.returncode == 1 and "Check signature failed for accessKey=orders_app" in wrong.stderr, wrong.stderr
    not_admin = mqadmin(create, env={"ROCKETMQ_ACCESS_KEY": APP.access_key, "ROCKETMQ_SECRET_KEY": APP.secret_key})
    assert not_admin.returncode == 1, not_admin.stderr
    assert "Need admin permission for request code=17, but accessKey=orders_app is not" in not_admin.stderr
    ok = mqadmin(create, env={"ROCKETMQ_ACCESS_KEY": ADMIN.access_key, "ROCKETMQ_SECRET_KEY": ADMIN.secret_key})
    assert ok.returncode == 0, ok.stderr
    status = mqadmin(["topicStatus", "-n", ns, "-t", "Orders", "--json", "--access-key", APP.access_key,
                      "--secret-key", APP.secret_key])
    assert status.returncode == 0, status.stderr  # authentication alone is enough for non-admin codes


async def test_producer_pull_and_push_consumers_with_credentials(acl_broker):
    ns = acl_broker.namesrv_addr
    await create_topics(ns, "Orders")
    expected = {f"m-{i}".encode() for i in range(5)} | {b"b-1", b"b-2", b"one-way", b"z" * 6000}
    async with Producer("orders_pg", ns, credentials=APP) as producer:
        for i in range(5):
            assert (await producer.send(Message("Orders", f"m-{i}".encode(), tags="T"))).status.name == "SEND_OK"
        await producer.send(Message("Orders", b"z" * 6000))  # compressed body, signed as sent
        assert (await producer.send_batch([Message("Orders", b"b-1"), Message("Orders", b"b-2")])).status.name == \
            "SEND_OK"
        await producer.send_oneway(Message("Orders", b"one-way"))

    async with PullConsumer("orders_pull", ns, credentials=APP) as pull:
        got: set[bytes] = set()
        deadline = time.monotonic() + 10
        while got != expected and time.monotonic() < deadline:  # the one-way send may land a moment later
            got = set()
            for mq in await pull.fetch_message_queues("Orders"):
                result = await pull.pull(mq, "*", offset=0, max_nums=32)
                if result.status is PullStatus.FOUND:
                    got.update(m.body for m in result.messages)
                    await pull.update_offset(mq, result.next_offset)
                    assert await pull.fetch_consume_offset(mq) == result.next_offset
            await asyncio.sleep(0.05)
        assert got == expected

    seen: set[bytes] = set()
    done = asyncio.Event()

    async def listener(msgs):
        seen.update(m.body for m in msgs)
        if seen >= expected:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("orders_push", ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", rebalance_interval=1.0,
                            credentials=APP)
    consumer.subscribe("Orders", "*")
    consumer.register_listener(listener)
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), 15)
    finally:
        await consumer.shutdown()
    assert seen == expected
    assert "Check signature failed" not in acl_broker.log_text()


async def test_refusals_surface_the_broker_remark(acl_broker):
    ns = acl_broker.namesrv_addr
    await create_topics(ns, "Orders", "Payroll")
    async with Producer("orders_pg", ns, credentials=WRONG, retry_times_when_send_failed=0) as producer:
        with pytest.raises(MQBrokerError, match="Check signature failed for accessKey=orders_app") as refused:
            await producer.send(Message("Orders", b"x"))
        assert refused.value.code == 1
    async with Producer("orders_pg", ns, credentials=APP, retry_times_when_send_failed=0) as producer:
        with pytest.raises(MQBrokerError, match="No PUB permission for topic:Payroll, accessKey=orders_app"):
            await producer.send(Message("Payroll", b"x"))  # SUB only
    async with Producer("orders_pg", ns, retry_times_when_send_failed=0) as producer:
        with pytest.raises(MQBrokerError, match="No accessKey is configured"):
            await producer.send(Message("Orders", b"x"))
    async with PullConsumer("billing", ns, credentials=APP) as pull:
        mq = (await pull.fetch_message_queues("Orders"))[0]
        with pytest.raises(MQBrokerError, match="No SUB permission for group:billing, accessKey=orders_app"):
            await pull.pull(mq, "*", offset=0, max_nums=4)


def test_sync_facade_with_credentials(acl_broker):
    ns = acl_broker.namesrv_addr
    asyncio.run(create_topics(ns, "Orders"))
    with sync.Producer("orders_sync", ns, credentials=APP) as producer:
        assert producer.send(Message("Orders", b"sync")).status.name == "SEND_OK"
    with sync.Producer("orders_sync", ns, credentials=WRONG, retry_times_when_send_failed=0) as producer:
        with pytest.raises(MQBrokerError, match="Check signature failed"):
            producer.send(Message("Orders", b"refused"))
    with sync.PullConsumer("orders_sync_pull", ns, credentials=APP) as pull:
        bodies = []
        for mq in pull.fetch_message_queues("Orders"):
            result = pull.pull(mq, "*", 0, 8)
            if result.status is PullStatus.FOUND:
                bodies += [m.body for m in result.messages]
        assert bodies == [b"sync"]
