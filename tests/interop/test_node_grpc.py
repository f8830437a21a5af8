"""Interop: the official RocketMQ 5.x Node.js SDK (npm rocketmq-client-nodejs 1.0.8) against the broker's gRPC endpoint.

Each test starts the real broker process with `enableGrpcProxy=true`, runs Node scripts from tests/interop/node
(grpc_*.js, each bounded by its own deadline and by a process timeout here) and asserts on the JSON summary they
print (NODE_GRPC_DEBUG=1 prints the summaries). What the broker stored, or what a remoting producer put in, is
checked or fed over the remoting protocol (tests/support/wire.py), so gRPC <-> remoting interoperation is
covered both ways.

What this SDK does that a server must live with (1.0.8):
* its load balancers keep only route queues whose *queue id* is 0 (they compare MessageQueue.id with the master
  broker id): every SendMessage and every SimpleConsumer ReceiveMessage names queue 0, whatever the route says;
* Producer and consumers wait for the Settings answer on Telemetry before startup() returns (no time limit);
* a consumer adopts the Settings' backoff policy only when it is exponential (reading whole seconds of it as
  milliseconds); otherwise a push consumer nacks with delay 0 and its ordered mode gives up after one attempt
  (ForwardMessageToDeadLetterQueue at the first failure);
* parts of it log to ~/logs/rocketmq whatever logger it is given: the scripts run with HOME = the test's tmp_path.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from tests.support.wire import WireClient, create_topic, props, pull_records, send_v2_fields

from protocol.codes import RequestCode as RC, ResponseCode as R

pytestmark = pytest.mark.interop

NODE_GRACE_S = 5  # on top of a script's own --timeout-ms before the process is killed


@pytest.fixture
def grpc_broker(grpc_broker_factory):
    return grpc_broker_factory()


@pytest.fixture
def fast_grpc_broker(grpc_broker_factory):
    """The gRPC broker with the shortest receive invisible duration and long poll lowered (broker.conf keys of the
    reference proxy), so a test can let a handle expire in 3 s and see an empty receive in 0.5 s."""
    return grpc_broker_factory(minInvisibleTimeMillsForRecv=1000,
                             grpcClientConsumerMinLongPollingTimeoutMillis=500)


async def _run_node(node_runtime, broker, script: str, timeout_s: float, *, home, **options) -> dict:
    """Run tests/interop/node/<script> with --endpoints and --<option> value...; its JSON summary (ok must be true).
    HOME is `home`: parts of the SDK always log to ~/logs/rocketmq."""
    cmd = [node_runtime.node, str(node_runtime.script(script)), "--endpoints", broker.endpoints,
           "--timeout-ms", str(int(timeout_s * 1000))]
    for name, value in options.items():
        cmd += ["--" + name.replace("_", "-"), str(value)]
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=node_runtime.project_dir, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env=dict(os.environ, HOME=str(home)))
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout_s + NODE_GRACE_S)
    except asyncio.TimeoutError:
        proc.kill()
        stdout, stderr = await proc.communicate()
        pytest.fail(f"{script} hung past {timeout_s + NODE_GRACE_S} s\nstdout:\n{stdout.decode()[-2000:]}\n"
                    f"stderr:\n{stderr.decode()[-4000:]}\nbroker log:\n{broker.log_text()[-4000:]}")
    out, err = stdout.decode(), stderr.decode()
    context = (f"{script} exit {proc.returncode}\nstderr:\n{err[-6000:]}\n"
               f"broker log:\n{broker.log_text()[-4000:] or '<empty broker output>'}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"{script} printed no JSON summary\nstdout:\n{out[-2000:]}\n{context}"
    summary = json.loads(lines[-1])
    if os.environ.get("NODE_GRPC_DEBUG"):
        print(script, json.dumps(summary, indent=1))
    assert proc.returncode == 0 and summary["ok"], (
        f"{script} failed: {summary.get('failure')}\nsummary: {json.dumps(summary)[:4000]}\n{context}")
    return summary


async def _stored(broker, topic: str, queues: int) -> list:
    async with await WireClient.connect(broker.addr) as client:
        return [r for q in range(queues) for r in await pull_records(client, topic, q)]


# ---- a. Producer -------------------------------------------------------------------------------------------------

NODE_ACL = """
accounts:
  - accessKey: node_admin
    secretKey: node-admin-secret
    admin: true
  - accessKey: node_shop
    secretKey: node-shop-secret
    defaultTopicPerm: DENY
    topicPerms:
      - NodeSigned=PUB
"""


async def _signed_request(client, code: int, fields: dict, creds: tuple[str, str]):
    from protocol.acl_signature import sign

    fields = dict(fields, AccessKey=creds[0])
    fields["Signature"] = sign(creds[1], fields, b"")
    return await client.request(code, fields, b"")


async def test_node_producer_signs_its_calls_for_the_acl(node_runtime, grpc_broker_factory, tmp_path):
    """With aclEnable=true the SDK's signatures (UTC x-mq-date-time, upper-case hex) pass the broker's timed check
    on every call it makes: route, Telemetry settings, heartbeats, sends, NotifyClientTermination."""
    (tmp_path / "plain_acl.yml").write_text(NODE_ACL)
    broker = grpc_broker_factory(aclEnable="true")
    admin = ("node_admin", "node-admin-secret")
    async with await WireClient.connect(broker.addr) as client:
        resp = await _signed_request(client, RC.UPDATE_AND_CREATE_TOPIC, {
            "topic": "NodeSigned", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}, admin)
        assert resp.code == R.SUCCESS, resp.remark
    summary = await _run_node(node_runtime, broker, "grpc_produce.js", 20, home=tmp_path, topic="NodeSigned",
                              count=3, prefix="signed", access_key="node_shop", secret_key="node-shop-secret")
    assert len(summary["sent"]) == 3
    async with await WireClient.connect(broker.addr) as client:
        resp = await _signed_request(client, RC.GET_MAX_OFFSET, {"topic": "NodeSigned", "queueId": "0"}, admin)
        assert resp.code == R.SUCCESS and int(resp.ext_fields["offset"]) == 3, (resp.code, resp.remark)
    assert "refused" not in broker.log_text()


async def test_node_producer_sends_and_a_remoting_pull_reads_tags_keys_and_ids(node_runtime, grpc_broker, tmp_path):
    topic, count = "NodeGrpcProduce", 10
    await create_topic(grpc_broker.addr, topic)
    summary = await _run_node(node_runtime, grpc_broker, "grpc_produce.js", 20, home=tmp_path, topic=topic,
                              count=count, prefix="np")
    sent = summary["sent"]
    assert len(sent) == count and len({s["messageId"] for s in sent}) == count
    # The SDK's chosen queue only decides the endpoints (and 1.0.8 only ever picks route queue 0: it compares
    # MessageQueue.id with the master broker id); like the reference proxy, the broker picks the queue itself.

    stored = await _stored(grpc_broker, topic, 2)
    by_id = {r.uniq_key: r for r in stored}
    assert set(by_id) == {s["messageId"] for s in sent}, "UNIQ_KEY of each stored message = the id send() returned"
    for i, s in enumerate(sent):
        record = by_id[s["messageId"]]
        assert record.topic == topic and record.body == f"np body {i}".encode()
        assert record.queue_offset == s["offset"], "the receipt's offset is the queue offset the message got"
        assert record.properties["TAGS"] == ("TagA" if i % 2 == 0 else "TagB")
        assert record.properties["KEYS"] == f"np-key-{i} np-alt-{i}"
        assert record.properties["seq"] == str(i) and record.properties["origin"] == "nodejs"


# ---- helpers for the consumer tests ------------------------------------------------------------------------------

OK = 20000  # apache.rocketmq.v2.Code.OK


async def _create_group(addr: str, group: str, *, orderly: bool = False) -> None:
    body = json.dumps({"groupName": group, "consumeEnable": True, "consumeMessageOrderly": orderly}).encode()
    async with await WireClient.connect(addr) as client:
        resp = await client.request(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
        assert resp.code == R.SUCCESS, resp.remark


async def _remoting_send(broker, topic: str, count: int, prefix: str, queues: int = 2) -> list[dict]:
    """Send over the remoting protocol (SEND_MESSAGE_V2) with UNIQ_KEY, TAGS, KEYS and a user property, like a
    4.x producer does; what was sent, with the id each message carries."""
    sent = []
    async with await WireClient.connect(broker.addr) as client:
        for i in range(count):
            uniq = f"7F000001{int(time.time() * 1000) & 0xFFFFFFFF:08X}{i:016X}"
            tag = "TagA" if i % 2 == 0 else "TagB"
            keys = [f"{prefix}-key-{i}", f"{prefix}-alt-{i}"]
            properties = props(UNIQ_KEY=uniq, TAGS=tag, KEYS=" ".join(keys), seq=str(i), WAIT="true")
            body = f"{prefix} body {i}".encode()
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, i % queues, properties), body)
            assert resp.code == R.SUCCESS, resp.remark
            sent.append({"messageId": uniq, "tag": tag, "keys": keys, "body": body.decode(), "seq": str(i),
                         "queueId": int(resp.ext_fields["queueId"]), "offset": int(resp.ext_fields["queueOffset"])})
    return sent


# ---- b. SimpleConsumer -------------------------------------------------------------------------------------------

INVISIBLE_MS = 10_000  # the smallest invisible duration a receive may ask for (the reference's floor)
CHANGE_MS = 1_000


async def test_node_simple_consumer_receives_acks_changes_invisibility_and_gets_unacked_messages_back(
        node_runtime, grpc_broker, tmp_path):
    """Messages a remoting producer sent reach the Node SimpleConsumer with their id, tag, keys and properties.
    TagA messages are acked at once and never come back. Of the TagB messages (not acked), the 1st and 3rd get
    changeInvisibleDuration(1 s): a new receipt handle, and back ~1 s later with deliveryAttempt 2; the 2nd is left
    alone and comes back after its 10 s invisible duration, not before, with deliveryAttempt 2."""
    topic, group = "NodeGrpcSimple", "node_grpc_simple"
    await create_topic(grpc_broker.addr, topic)
    sent = await _remoting_send(grpc_broker, topic, 6, "rs")
    summary = await _run_node(node_runtime, grpc_broker, "grpc_simple_consumer.js", 28, home=tmp_path,
                              topic=topic, group=group, expect=6, batch=16, await_ms=5000,
                              invisible_ms=INVISIBLE_MS, hold_tag="TagB", change_ms=CHANGE_MS, change_every=2,
                              receive_wait_ms=8000, redeliver_wait_ms=INVISIBLE_MS + 6000,
                              quiet_until_ms=INVISIBLE_MS + 3000)
    by_id = {s["messageId"]: s for s in sent}
    first = {m["messageId"]: m for m in summary["first"]}
    assert set(first) == set(by_id), "every message arrives once, with the UNIQ_KEY the remoting producer set"
    for message_id, m in first.items():
        s = by_id[message_id]
        assert (m["topic"], m["tag"], m["keys"], m["body"]) == (topic, s["tag"], s["keys"], s["body"])
        assert m["properties"] == {"seq": s["seq"]}, "user properties only: no system property leaks"
        assert m["deliveryAttempt"] == 1 and not m["corrupted"] and m["receiptHandle"]
        assert m["offset"] == s["offset"]

    held = [s["messageId"] for s in sent if s["tag"] == "TagB"]
    acked_first = {a["messageId"] for a in summary["acks"] if a["attempt"] == 1}
    assert acked_first == {s["messageId"] for s in sent if s["tag"] == "TagA"}

    changes = {c["messageId"]: c for c in summary["changes"]}
    assert len(changes) == 2 and set(changes) < set(held)
    for c in changes.values():
        assert c["newHandle"] and c["newHandle"] != c["oldHandle"], "ChangeInvisibleDuration returns a new handle"
    redelivered = {m["messageId"]: m for m in summary["redelivered"]}
    assert set(redelivered) == set(held), f"un-acked messages come back: {summary['redelivered']}"
    for message_id, m in redelivered.items():
        s = by_id[message_id]
        assert m["deliveryAttempt"] == 2, m
        assert (m["topic"], m["tag"], m["keys"], m["body"]) == (topic, s["tag"], s["keys"], s["body"])
        assert m["properties"] == {"seq": s["seq"]} and m["receiptHandle"] != first[message_id]["receiptHandle"]
        if message_id in changes:  # back after the changed duration, well before the original one ran out
            assert changes[message_id]["startMs"] + CHANGE_MS <= m["atMs"] < first[message_id]["atMs"] + INVISIBLE_MS
        else:  # back once its invisible duration lapsed, not before
            assert m["atMs"] >= first[message_id]["atMs"] + INVISIBLE_MS - 200, (m["atMs"], first[message_id])
    assert {a["messageId"] for a in summary["acks"] if a["attempt"] == 2} == set(held)
    assert summary["late"] == [], "acked messages, and redeliveries that were acked, must not come back"


async def test_node_simple_consumer_with_a_tag_expression_gets_only_those_tags(node_runtime, fast_grpc_broker,
                                                                               tmp_path):
    """Node Producer -> Node SimpleConsumer subscribed with `TagA||TagC`: the broker filters, so only the TagA
    messages arrive (and are acked); the TagB ones never do."""
    broker = fast_grpc_broker
    topic, group = "NodeGrpcFilter", "node_grpc_filter"
    await create_topic(broker.addr, topic)
    produced = await _run_node(node_runtime, broker, "grpc_produce.js", 20, home=tmp_path, topic=topic, count=8,
                               prefix="tf")
    tag_a = {s["messageId"]: s for s in produced["sent"] if s["tag"] == "TagA"}
    summary = await _run_node(node_runtime, broker, "grpc_simple_consumer.js", 20, home=tmp_path, topic=topic,
                              group=group, filter="TagA||TagC", expect=len(tag_a), batch=16, await_ms=500,
                              invisible_ms=5000, receive_wait_ms=8000, quiet_until_ms=2000)
    assert {m["messageId"]: (m["tag"], m["body"]) for m in summary["first"]} == \
        {i: (s["tag"], s["body"]) for i, s in tag_a.items()}
    assert {a["messageId"] for a in summary["acks"]} == set(tag_a)
    assert summary["late"] == [], "a TagB message (or an acked TagA one) was delivered"


# ---- c. PushConsumer ---------------------------------------------------------------------------------------------

def _deliveries_by_id(summary: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for d in summary["deliveries"]:
        out.setdefault(d["messageId"], []).append(d)
    return out


def _answers(entries: list[dict]) -> dict[str, list[int | None]]:
    out: dict[str, list[int | None]] = {}
    for e in entries:
        out.setdefault(e["messageId"], []).append(e.get("code"))
    return out


async def test_node_push_consumer_acks_everything_and_a_failed_message_comes_back(node_runtime, grpc_broker,
                                                                                 tmp_path):
    """A Node Producer sends 8 messages over gRPC; a Node PushConsumer (QueryAssignment + auto-renewed receives)
    consumes them. Its listener returns FAILURE the first time it sees a TagB message: the SDK nacks it
    (ChangeInvisibleDuration with its backoff delay) and the broker delivers it again with deliveryAttempt 2.
    Every message is acked with status OK, and no acked message is delivered again."""
    topic, group, count = "NodeGrpcPush", "node_grpc_push", 8
    await create_topic(grpc_broker.addr, topic)
    produced = await _run_node(node_runtime, grpc_broker, "grpc_produce.js", 20, home=tmp_path, topic=topic,
                               count=count, prefix="pp")
    sent = {s["messageId"]: s for s in produced["sent"]}
    summary = await _run_node(node_runtime, grpc_broker, "grpc_push_consumer.js", 25, home=tmp_path, topic=topic,
                              group=group, expect=count, fail_tag="TagB", fail_times=1, receive_wait_ms=15000,
                              linger_ms=1500)
    assert summary["fifo"] is False
    deliveries = _deliveries_by_id(summary)
    assert set(deliveries) == set(sent), "every message the Node producer sent is delivered"
    for message_id, got in deliveries.items():
        s = sent[message_id]
        for d in got:
            assert (d["topic"], d["tag"], d["keys"], d["body"]) == (topic, s["tag"], s["keys"], s["body"])
            assert d["properties"] == {"seq": s["seq"], "origin": "nodejs"}
            assert not d["corrupted"]
        expected = [(1, "SUCCESS")] if s["tag"] == "TagA" else [(1, "FAILURE"), (2, "SUCCESS")]
        assert [(d["deliveryAttempt"], d["outcome"]) for d in got] == expected, (message_id, got)

    acks, nacks = _answers(summary["acks"]), _answers(summary["nacks"])
    assert acks == {m: [OK] for m in sent}, f"one ack per message, answered OK: {summary['acks']}"
    assert nacks == {m: [OK] for m, s in sent.items() if s["tag"] == "TagB"}, f"nacks: {summary['nacks']}"
    assert summary["forwards"] == []


# ---- d. FIFO -----------------------------------------------------------------------------------------------------

async def test_node_push_consumer_of_an_orderly_group_consumes_each_message_group_in_order(node_runtime, grpc_broker,
                                                                                          tmp_path):
    """Messages of two message groups, interleaved, sent by the Node Producer; the consumer group is orderly
    (consumeMessageOrderly=true, created over remoting), so the broker's Settings say fifo and the Node
    PushConsumer consumes each message group in send order. One message always fails: the SDK's ordered mode retries
    it in place up to its max attempts (from the Settings' backoff policy; 1 when that is not exponential), then
    forwards it with ForwardMessageToDeadLetterQueue, and its group goes on in order. The message is then in
    %DLQ%<group>, read over remoting."""
    topic, group, count = "NodeGrpcFifo", "node_grpc_fifo", 12
    await create_topic(grpc_broker.addr, topic, message_type="FIFO")
    await _create_group(grpc_broker.addr, group, orderly=True)
    produced = await _run_node(node_runtime, grpc_broker, "grpc_produce.js", 20, home=tmp_path, topic=topic,
                               count=count, prefix="fifo", message_groups="order-1,order-2")
    sent = produced["sent"]
    by_id = {s["messageId"]: s for s in sent}

    stored = {r.uniq_key: r for r in await _stored(grpc_broker, topic, 2)}
    for message_group in ("order-1", "order-2"):
        ids = [s["messageId"] for s in sent if s["messageGroup"] == message_group]
        records = [stored[i] for i in ids]
        assert all(r.properties["__SHARDINGKEY"] == message_group for r in records)
        assert len({r.queue_id for r in records}) == 1, "one message group, one queue"
        assert [r.queue_offset for r in records] == sorted(r.queue_offset for r in records)

    poison = sent[4]["messageId"]  # order-1's 3rd message
    summary = await _run_node(node_runtime, grpc_broker, "grpc_push_consumer.js", 25, home=tmp_path, topic=topic,
                              group=group, expect=count, work_ms=20, fail_ids=poison, fail_times=1000,
                              receive_wait_ms=15000, linger_ms=1000)
    assert summary["fifo"] is True, "an orderly group gets fifo = true in the Settings answer"
    attempts = summary["maxAttempts"] or 1  # the SDK only adopts an exponential backoff policy
    for message_group in ("order-1", "order-2"):
        expected = []
        for s in sent:
            if s["messageGroup"] == message_group:
                expected += [(s["messageId"], a, "SUCCESS" if s["messageId"] != poison else "FAILURE")
                             for a in (range(1, attempts + 1) if s["messageId"] == poison else (1,))]
        got = [(d["messageId"], d["deliveryAttempt"], d["outcome"]) for d in summary["deliveries"]
               if d["messageGroup"] == message_group]
        assert got == expected, f"{message_group} consumed out of order or more than once: {got} != {expected}"
    assert _answers(summary["acks"]) == {m: [OK] for m in by_id if m != poison}, summary["acks"]
    assert _answers(summary["forwards"]) == {poison: [OK]}, summary["forwards"]
    assert summary["nacks"] == []

    async with await WireClient.connect(grpc_broker.addr) as client:
        dead = await pull_records(client, f"%DLQ%{group}", 0)
    assert [r.uniq_key for r in dead] == [poison], "the forwarded message is in the group's dead-letter queue"
    assert dead[0].body == by_id[poison]["body"].encode() and dead[0].properties["TAGS"] == by_id[poison]["tag"]


async def test_node_simple_consumer_on_an_orderly_group_gets_a_queue_batch_by_batch(node_runtime, fast_grpc_broker,
                                                                                    tmp_path):
    """Orderly group, one message group: the broker hands out the queue's messages a batch at a time, in order, and
    nothing more of that queue while any message of the batch is un-acked. A batch left to expire comes back whole,
    in the same order, with deliveryAttempt 2, and an ack with the expired handle is refused
    (INVALID_RECEIPT_HANDLE)."""
    broker = fast_grpc_broker
    topic, group, invisible_ms = "NodeGrpcFifoSimple", "node_grpc_fifo_simple", 3000
    await create_topic(broker.addr, topic, message_type="FIFO")
    await _create_group(broker.addr, group, orderly=True)
    produced = await _run_node(node_runtime, broker, "grpc_produce.js", 20, home=tmp_path, topic=topic, count=6,
                               prefix="fs", message_groups="solo")
    ids = [s["messageId"] for s in produced["sent"]]
    queues = {r.queue_id for r in await _stored(broker, topic, 2)}
    assert len(queues) == 1
    # Where the broker put the message group matters to this SDK: its SimpleConsumer names route queue 0 in every
    # ReceiveMessage (see test_node_producer_...), and the reference pops all queues of the broker for it anyway.
    where = f"the message group is in queue {queues.pop()}; the Node SimpleConsumer always names queue 0"
    summary = await _run_node(node_runtime, broker, "grpc_simple_fifo.js", 28, home=tmp_path, topic=topic,
                              group=group, batch=2, await_ms=500, invisible_ms=invisible_ms, first_wait_ms=4000,
                              expire_wait_ms=invisible_ms + 3000)
    steps = summary["steps"]
    got = {name: [(m["messageId"], m["deliveryAttempt"]) for m in step["messages"]] for name, step in steps.items()}
    assert got == {
        "r1": [(ids[0], 1), (ids[1], 1)],
        "r2": [],  # blocked: the whole r1 batch is un-acked
        "r3": [],  # still blocked: r1's second message is un-acked
        "r4": [(ids[2], 1), (ids[3], 1)],
        "r5": [(ids[2], 2), (ids[3], 2)],  # r4 expired: the same batch again, same order, next attempt
        "r6": [(ids[4], 1), (ids[5], 1)],
        "r7": [],
    }, f"{where}\n{json.dumps(steps)[:3000]}"
    assert all(m["messageGroup"] == "solo" for step in steps.values() for m in step["messages"])
    assert steps["r5"]["atMs"] >= steps["r4"]["startMs"] + invisible_ms, "redelivered before the handle expired"
    assert summary["expiredAck"]["ok"] is False and summary["expiredAck"]["code"] == 40013, summary["expiredAck"]


async def test_node_producer_transactions_and_timed_messages(node_runtime, grpc_broker_factory, tmp_path):
    """Node transactions: the committed message reaches the topic, the rolled-back one never; a timed message arrives
    at its time (not before), and one recalled before its time never does."""
    grpc_broker = grpc_broker_factory(recallMessageEnable="true")  # recall is off by default, as in the reference
    topic, timed_topic = "NodeGrpcTx", "NodeGrpcTimed"  # one message type per 5.x topic
    await create_topic(grpc_broker.addr, topic, message_type="TRANSACTION")
    await create_topic(grpc_broker.addr, timed_topic, message_type="DELAY")
    summary = await _run_node(node_runtime, grpc_broker, "grpc_transaction_delay.js", 20, home=tmp_path, topic=topic,
                              timed_topic=timed_topic, delay_ms=4000)
    transactions, timed = summary["transactions"], summary["timed"]
    assert all(t["transactionId"] == t["messageId"] for t in transactions.values())  # as the reference answers
    assert timed["keptHandle"] and timed["recallAnswer"] == timed["recalled"]
    committed = {r.uniq_key: r for r in await _stored(grpc_broker, topic, 2)}
    assert set(committed) == {transactions["committed"]["messageId"]}  # the rolled back one never
    assert committed[transactions["committed"]["messageId"]].properties["__transactionId__"] == \
        transactions["committed"]["messageId"]
    topic = timed_topic
    checked_ms = time.time() * 1000
    early = {r.uniq_key for r in await _stored(grpc_broker, topic, 2)}
    if checked_ms < timed["dueMs"] - 100:  # looked before its time (the Node process normally exits within 1 s)
        assert timed["kept"] not in early, "a timed message arrived before its time"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and timed["kept"] not in early:
        await asyncio.sleep(0.1)
        early = {r.uniq_key for r in await _stored(grpc_broker, topic, 2)}
    assert timed["kept"] in early and time.time() * 1000 >= timed["dueMs"]
    await asyncio.sleep(0.5)
    stored = {r.uniq_key: r for r in await _stored(grpc_broker, topic, 2)}
    assert set(stored) == {timed["kept"]}  # not recalled
    assert stored[timed["kept"]].body == b"timed" and stored[timed["kept"]].properties["TAGS"] == "TagT"
