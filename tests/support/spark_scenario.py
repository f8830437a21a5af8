"""The store scenario for the Spark tests: what is sent to the real broker and what it answers.

A few thousand messages on several topics with tags, keys, custom (also non-ASCII) properties, compressed
bodies, a batch send, retries through the schedule topic and a DLQ, and committed consumer offsets. While
the broker runs, its own answers are recorded (GET_MAX_OFFSET, QUERY_CONSUMER_OFFSET, every record pulled
back); the tests compare the DataFrames with those and with what was sent.
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.wire import WireClient, props, pull_fields, records, send_v2_fields
from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.message import BatchEntry, encode_batch_body

TOPICS = ("SparkOrders", "SparkEvents", "SparkAudit")
QUEUES = 4
MESSAGES = 3000
GROUP = "sparkGroup"
OTHER_GROUP = "sparkOther"
RETRIED = 15
DEAD = 5
DELAY_LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms"
BROKER_EXTRA = {
    "messageDelayLevel": DELAY_LEVELS,
    "mappedFileSizeCommitLog": 256 * 1024,  # several files, so BLANK end-of-file markers are exercised
    "mappedFileSizeConsumeQueue": 20 * 1000,
}


@dataclass
class SentMessage:
    topic: str
    queue_id: int
    body: bytes           # as the application sees it (before compression)
    stored_body: bytes    # as sent on the wire
    properties: dict[str, str]
    flag: int
    sys_flag: int
    born_timestamp: int
    queue_offset: int | None = None
    commitlog_offset: int | None = None


@dataclass
class BrokerStore:
    store_dir: Path
    store_host: str
    sent: list[SentMessage] = field(default_factory=list)
    pulled: dict[int, object] = field(default_factory=dict)  # commitlog offset -> MessageRecord
    max_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    consumer_offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (topic, group, qid)


def _tag(i: int) -> str | None:
    return (None, "TagA", "TagB", "标签", "TagC")[i % 5]


async def populate(broker, out: BrokerStore) -> None:
    rnd = random.Random(6)
    async with await WireClient.connect(broker.addr) as client:
        pending = []
        for i in range(MESSAGES):
            topic = TOPICS[i % len(TOPICS)]
            queue_id = (i // len(TOPICS)) % QUEUES
            p = {"UNIQ_KEY": f"{0xC0A80001:08X}{i:024X}", "custom": f"value-{i}", "ünï": "值\u00e9"}
            tag = _tag(i)
            if tag:
                p["TAGS"] = tag
            if i % 3 == 0:
                p["KEYS"] = f"order-{i} user-{i % 17}"
            body = rnd.randbytes(rnd.randrange(0, 300)) if i % 101 else b""
            sys_flag, stored = 0, body
            if i % 97 == 5:  # a producer-compressed body (sysflag COMPRESSED, zlib)
                body = (f"compressible payload {i} " * 200).encode()
                stored, sys_flag = zlib.compress(body, 5), 1
            born = 1_700_000_000_000 + i
            msg = SentMessage(topic, queue_id, body, stored, p, i % 7, sys_flag, born)
            out.sent.append(msg)
            fields = send_v2_fields(topic, queue_id, props(**p), born_ts=born, flag=msg.flag, sys_flag=sys_flag)
            pending.append((msg, client.send_nowait(client.make(RC.SEND_MESSAGE_V2, fields, stored))))
            if len(pending) >= 200 or i == MESSAGES - 1:
                await client.writer.drain()
                for m, fut in pending:
                    resp = await asyncio.wait_for(fut, 10)
                    assert resp.code == R.SUCCESS, resp.remark
                    m.queue_offset = int(resp.ext_fields["queueOffset"])
                    m.commitlog_offset = int(resp.ext_fields["msgId"][-16:], 16)
                pending.clear()

        batch = []
        for j in range(10):
            p = {"UNIQ_KEY": f"{0xC0A80002:08X}{j:024X}", "TAGS": "Batch", "custom": f"batch-{j}"}
            batch.append(SentMessage("SparkEvents", 1, f"batch body {j}".encode(), f"batch body {j}".encode(),
                                     p, 3, 0, 0))
        body = encode_batch_body([BatchEntry(m.flag, m.stored_body, props(**m.properties)) for m in batch])
        resp = await client.request(RC.SEND_BATCH_MESSAGE, send_v2_fields("SparkEvents", 1, "", flag=3), body)
        assert resp.code == R.SUCCESS, resp.remark
        first = int(resp.ext_fields["queueOffset"])
        for j, (m, msg_id) in enumerate(zip(batch, resp.ext_fields["msgId"].split(","))):
            m.queue_offset, m.commitlog_offset = first + j, int(msg_id[-16:], 16)
        out.sent.extend(batch)

        # Retries (delay level 0 -> the schedule topic, then %RETRY%) and dead letters (delay level -1).
        resp = await client.request(RC.PULL_MESSAGE, pull_fields("SparkOrders", GROUP, 0, 0, max_nums=32,
                                                                  suspend_ms=0))
        assert resp.code == R.SUCCESS, resp.remark
        failed = records(resp.body)[: RETRIED + DEAD]
        for k, record in enumerate(failed):
            level = "0" if k < RETRIED else "-1"
            resp = await client.request(RC.CONSUMER_SEND_MSG_BACK, {
                "offset": str(record.physical_offset), "group": GROUP, "delayLevel": level})
            assert resp.code == R.SUCCESS, resp.remark
        retry_topic, dlq_topic = f"%RETRY%{GROUP}", f"%DLQ%{GROUP}"
        deadline = time.monotonic() + 15
        while True:
            got = await _max_offset(client, retry_topic, 0)
            if got >= RETRIED:
                break
            assert time.monotonic() < deadline, f"only {got} retries arrived"
            await asyncio.sleep(0.1)

        # Committed consumer offsets.
        commits = {("SparkOrders", GROUP, 0): 100, ("SparkOrders", GROUP, 1): 37, ("SparkOrders", GROUP, 3): 250,
                   ("SparkEvents", OTHER_GROUP, 2): 7, (retry_topic, GROUP, 0): 4}
        for (topic, group, queue_id), offset in commits.items():
            resp = await client.request(RC.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)})
            assert resp.code == R.SUCCESS, resp.remark
        for topic, group, queue_id in commits:
            resp = await client.request(RC.QUERY_CONSUMER_OFFSET, {
                "consumerGroup": group, "topic": topic, "queueId": str(queue_id)})
            assert resp.code == R.SUCCESS, resp.remark
            out.consumer_offsets[(topic, group, queue_id)] = int(resp.ext_fields["offset"])

        queues = [(t, q) for t in TOPICS for q in range(QUEUES)] + [(retry_topic, 0), (dlq_topic, 0)]
        queues += [("SCHEDULE_TOPIC_XXXX", q) for q in range(8)]
        for topic, queue_id in queues:
            out.max_offsets[(topic, queue_id)] = await _max_offset(client, topic, queue_id)
            if topic.startswith("SCHEDULE"):
                continue
            offset = 0
            while offset < out.max_offsets[(topic, queue_id)]:
                resp = await client.request(RC.PULL_MESSAGE, pull_fields(topic, "sparkVerifier", queue_id, offset,
                                                                          max_nums=256, suspend_ms=0))
                assert resp.code == R.SUCCESS, (topic, queue_id, offset, resp.code, resp.remark)
                for record in records(resp.body):
                    out.pulled[record.physical_offset] = record
                offset = int(resp.ext_fields["nextBeginOffset"])


async def _max_offset(client: WireClient, topic: str, queue_id: int) -> int:
    resp = await client.request(RC.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    return int(resp.ext_fields["offset"]) if resp.code == R.SUCCESS else 0


