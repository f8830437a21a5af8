"""Real broker clusters on loopback for the network-mode Spark tests (issue 29), and what was sent to them.

* ``NetCluster``: a standalone name server (``python -m broker.namesrv``), group ``broker-a`` (master + slave, both
  with slaveReadEnable) and group ``broker-b`` (master only). Every topic has 4 queues on both groups. The name
  server is its own process so that killing broker-a's master leaves the route (and the slave) reachable.
* ``AclBroker``: one broker with aclEnable=true and a plain_acl.yml (admin writer, SUB-only reader account).
* ``RetentionBroker``: one broker whose old commit-log files are deleted at once (fileReservedTime=0, every hour a
  deletion hour), so a queue's minOffset is above 0: a real data-loss range for failOnDataLoss.

Every message is sent with an explicit queue to a master and then pulled back from that master, so the record
keeps what the broker stored (queue offset, commit-log offset, store time), not what the test hoped for.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from tests.support.broker_process import NamesrvProcess, free_port
from tests.support.wire import WireClient, props, pull_fields, records, send_v2_fields
from protocol.acl_signature import sign
from protocol.bodies import TopicRouteData
from protocol.codes import RequestCode as RC, ResponseCode as R

QUEUES = 4
BATCH_TOPICS = ("NetOrders", "NetEvents", "NetAudit")
STREAM_TOPIC = "NetStream"
KILL_TOPIC = "NetKill"
TAGS = ("TagA", "TagB", "TagC", None)
GROUPS = ("broker-a", "broker-b")
PULL_GROUP = "netVerifier"
PHASE2_FIRST = 10_000  # batch-topic messages numbered from here were sent after NetCluster.boundary_ms


@dataclass(frozen=True)
class Sent:
    """One message as the broker stored it (queue_offset/commitlog_offset/store_ms read back by a pull)."""
    topic: str
    broker: str
    queue_id: int
    queue_offset: int
    body: bytes
    tags: str | None
    keys: str | None
    store_ms: int
    commitlog_offset: int

    @property
    def key(self) -> tuple[str, str, int, int, bytes]:
        return self.topic, self.broker, self.queue_id, self.queue_offset, self.body


def number(sent: Sent) -> int:
    """The message's number within its queue, as written in its body by plan_messages."""
    return int(sent.body.split(b"|", 4)[3])


def multiset(rows: Iterable[Any]) -> Counter:
    """(topic, broker, queue_id, queue_offset, body) of Rows or Sent records, counted."""
    return Counter((r.topic, r.broker, r.queue_id, r.queue_offset, bytes(r.body)) for r in rows)


async def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 20.0, interval: float = 0.1) -> Any:
    """Await ``predicate()`` (a coroutine function) until truthy; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = await predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(interval)


async def route(ns_addr: str, topic: str) -> TopicRouteData | None:
    async with await WireClient.connect(ns_addr) as client:
        resp = await client.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return TopicRouteData.decode(resp.body) if resp.code == R.SUCCESS else None


async def max_offset(client: WireClient, topic: str, queue_id: int, sign_with: tuple[str, str] | None = None) -> int:
    resp = await signed(client, RC.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)}, creds=sign_with)
    assert resp.code == R.SUCCESS, (topic, queue_id, resp.code, resp.remark)
    return int(resp.ext_fields["offset"])


async def signed(client: WireClient, code: int, ext: dict, body: bytes = b"",
                 creds: tuple[str, str] | None = None):
    """A request, signed (plain ACL) when ``creds`` = (accessKey, secretKey) is given."""
    if creds is None:
        return await client.request(code, ext, body)
    fields = dict(ext, AccessKey=creds[0])
    fields["Signature"] = sign(creds[1], fields, body)
    return await client.request(code, fields, body)


async def create_topic(addr: str, topic: str, queues: int = QUEUES, creds: tuple[str, str] | None = None) -> None:
    async with await WireClient.connect(addr) as client:
        resp = await signed(client, RC.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
            "perm": "6", "topicFilterType": "SINGLE_TAG"}, creds=creds)
    assert resp.code == R.SUCCESS, (addr, topic, resp.code, resp.remark)


@dataclass
class Planned:
    topic: str
    queue_id: int
    body: bytes
    tags: str | None
    keys: str | None


def plan_messages(topic: str, broker: str, counts: dict[int, int], first: int = 0, seed: int = 0) -> list[Planned]:
    """Messages for one (topic, broker): counts[queue] of them per queue, numbered from ``first`` in each queue;
    the tag cycles TagA, TagB, TagC, none; every third has keys; bodies unique and of varying length."""
    rnd = random.Random(f"{topic}/{broker}/{seed}")
    out = []
    for queue_id, count in sorted(counts.items()):
        for i in range(first, first + count):
            tag = TAGS[(i + queue_id) % len(TAGS)]
            keys = f"key-{topic}-{broker}-{queue_id}-{i} common" if i % 3 == 0 else None
            body = f"{topic}|{broker}|{queue_id}|{i}|".encode() + rnd.randbytes(rnd.randrange(0, 200))
            out.append(Planned(topic, queue_id, body, tag, keys))
    return out


async def send_and_record(addr: str, broker: str, planned: list[Planned],
                          creds: tuple[str, str] | None = None) -> list[Sent]:
    """Send ``planned`` to the master at ``addr`` (pipelined, in order) and read each one back by a pull, so the
    record holds the broker's queue offset, commit-log offset and store time."""
    offsets: list[tuple[Planned, int]] = []
    async with await WireClient.connect(addr) as client:
        for start in range(0, len(planned), 200):
            chunk = planned[start:start + 200]
            futures = []
            for p in chunk:
                kv = {"UNIQ_KEY": os.urandom(16).hex().upper()}
                if p.tags:
                    kv["TAGS"] = p.tags
                if p.keys:
                    kv["KEYS"] = p.keys
                fields = send_v2_fields(p.topic, p.queue_id, props(**kv))
                if creds is not None:
                    fields["AccessKey"] = creds[0]
                    fields["Signature"] = sign(creds[1], fields, p.body)
                futures.append(client.send_nowait(client.make(RC.SEND_MESSAGE_V2, fields, p.body)))
            await client.writer.drain()
            for p, fut in zip(chunk, futures):
                resp = await asyncio.wait_for(fut, 15)
                assert resp.code == R.SUCCESS, (broker, p.topic, resp.code, resp.remark)
                offsets.append((p, int(resp.ext_fields["queueOffset"])))
        wanted: dict[tuple[str, int], dict[int, Planned]] = {}
        for p, offset in offsets:
            wanted.setdefault((p.topic, p.queue_id), {})[offset] = p
        out: list[Sent] = []
        for (topic, queue_id), by_offset in wanted.items():
            stored = await pull_range(client, topic, queue_id, min(by_offset), max(by_offset) + 1, creds)
            for offset, p in sorted(by_offset.items()):
                rec = stored[offset]
                assert rec.body == p.body, (topic, queue_id, offset)
                out.append(Sent(topic, broker, queue_id, offset, p.body, p.tags, p.keys, rec.store_timestamp,
                                rec.physical_offset))
    return out


async def pull_range(client: WireClient, topic: str, queue_id: int, start: int, end: int,
                     creds: tuple[str, str] | None = None) -> dict[int, Any]:
    """Records [start, end) of a queue by queue offset (bounded: one pull per 32 records, plus retries)."""
    out: dict[int, Any] = {}
    offset = start
    for _ in range((end - start) // 8 + 50):
        if offset >= end:
            return out
        resp = await signed(client, RC.PULL_MESSAGE, pull_fields(topic, PULL_GROUP, queue_id, offset, max_nums=32,
                                                                   suspend_ms=0), creds=creds)
        if resp.code == R.SUCCESS:
            for rec in records(resp.body):
                out[rec.queue_offset] = rec
        elif resp.code != R.PULL_RETRY_IMMEDIATELY:
            raise AssertionError(f"pull {topic}:{queue_id}@{offset}: {resp.code} {resp.remark}")
        offset = int(resp.ext_fields["nextBeginOffset"])
    raise AssertionError(f"pulling {topic}:{queue_id} [{start}, {end}) did not finish")


@dataclass
class NetCluster:
    """The two-group cluster and everything sent to it (``sent`` grows when tests send more)."""
    workdir: Path
    namesrv: NamesrvProcess
    master_a: Any
    slave_a: Any
    master_b: Any
    sent: list[Sent] = field(default_factory=list)
    boundary_ms: int = 0  # store times of the batch topics' second phase are >= this, the first phase's below

    @property
    def name_server(self) -> str:
        return self.namesrv.addr

    @property
    def masters(self) -> dict[str, Any]:
        return {"broker-a": self.master_a, "broker-b": self.master_b}

    def of(self, *topics: str) -> list[Sent]:
        return [s for s in self.sent if s.topic in topics]

    def max_offsets(self, topic: str) -> dict[tuple[str, int], int]:
        """(broker, queue) -> next offset, from what was sent (every queue starts empty)."""
        ends = {(b, q): 0 for b in GROUPS for q in range(QUEUES)}
        for s in self.sent:
            if s.topic == topic:
                ends[(s.broker, s.queue_id)] = max(ends[(s.broker, s.queue_id)], s.queue_offset + 1)
        return ends

    async def send(self, topic: str, per_queue: int, seed: int) -> list[Sent]:
        """``per_queue`` more messages on every queue of ``topic`` on both groups; recorded in ``sent``."""
        new: list[Sent] = []
        for broker in GROUPS:
            first = self.max_offsets(topic)[(broker, 0)]
            planned = plan_messages(topic, broker, {q: per_queue for q in range(QUEUES)}, first=first, seed=seed)
            new += await send_and_record(self.masters[broker].addr, broker, planned)
        self.sent += new
        return new

    async def wait_slave_caught_up(self, topics: Iterable[str], timeout: float = 30.0) -> None:
        """The slave knows every topic, has broker-a's max offsets, and serves a pull of each non-empty queue."""
        topics = list(topics)

        async def caught_up() -> bool:
            async with await WireClient.connect(self.master_a.addr) as master, \
                    await WireClient.connect(self.slave_a.addr) as slave:
                config = await slave.request(RC.GET_ALL_TOPIC_CONFIG, {})
                if config.code != R.SUCCESS or any(t.encode() not in (config.body or b"") for t in topics):
                    return False
                for topic in topics:
                    for q in range(QUEUES):
                        end = await max_offset(master, topic, q)
                        if await max_offset(slave, topic, q) != end:
                            return False
                        if end:
                            resp = await slave.request(RC.PULL_MESSAGE, pull_fields(topic, PULL_GROUP, q, end - 1,
                                                                                    max_nums=1, suspend_ms=0))
                            if resp.code != R.SUCCESS:
                                return False
            return True
        await wait_for(caught_up, "broker-a's slave to catch up with its master", timeout, interval=0.3)

    async def wait_route(self, topic: str, a_ids: set[int], timeout: float = 20.0) -> TopicRouteData:
        """The name server's route of ``topic`` lists both groups with 4 queues, broker-a with ids ``a_ids``."""
        async def ready() -> TopicRouteData | None:
            data = await route(self.name_server, topic)
            if data is None:
                return None
            queues = {q.broker_name: q.read_queue_nums for q in data.queue_datas}
            addrs = {b.broker_name: set(b.broker_addrs) for b in data.broker_datas}
            ok = queues == {b: QUEUES for b in GROUPS} and addrs.get("broker-a") == a_ids and \
                addrs.get("broker-b") == {0}
            return data if ok else None
        return await wait_for(ready, f"the route of {topic} (broker-a ids {sorted(a_ids)})", timeout, 0.2)

    def kill_master_a(self) -> None:
        self.master_a.kill()

    def restart_master_a(self) -> None:
        """After a kill: broker-a's master back on the same store, registered, and the slave in step again.
        Nothing to do when it still runs (a test failed before its kill)."""
        if self.master_a.proc is not None and self.master_a.proc.poll() is None:
            return
        self.master_a.start()
        asyncio.run(self._after_restart())

    async def _after_restart(self) -> None:
        for topic in (*BATCH_TOPICS, STREAM_TOPIC, KILL_TOPIC):
            await self.wait_route(topic, {0, 1}, timeout=30)
        await self.wait_slave_caught_up((*BATCH_TOPICS, STREAM_TOPIC, KILL_TOPIC))

    def stop(self) -> None:
        for broker in (self.slave_a, self.master_a, self.master_b):
            broker.stop()
        self.namesrv.stop()


def batch_counts(topic_index: int, broker: str) -> dict[int, int]:
    """Messages per queue of a batch topic: all different, so a queue mixed up with another shows."""
    return {q: 9 + 4 * q + 3 * topic_index + (5 if broker == "broker-b" else 0) for q in range(QUEUES)}


def start_net_cluster(workdir: Path, broker_cls: type) -> NetCluster:
    """Start and populate the two-group cluster; returns once the slave has caught up."""
    namesrv = NamesrvProcess(free_port())
    started: list[Any] = []
    try:
        def broker(name: str, sub: str, **extra: object) -> Any:
            (workdir / sub).mkdir()
            b = broker_cls(workdir / sub, name, embedded_namesrv=False, namesrv_addr=namesrv.addr,
                           extra={"brokerClusterName": "NetCluster", "slaveReadEnable": "true", **extra})
            started.append(b)
            return b
        master_a = broker("broker-a", "a-master", brokerRole="ASYNC_MASTER").start()
        master_b = broker("broker-b", "b-master", brokerRole="ASYNC_MASTER").start()
        slave_a = broker("broker-a", "a-slave", brokerRole="SLAVE", brokerId=1)
        cluster = NetCluster(workdir, namesrv, master_a, slave_a, master_b)
        topics = (*BATCH_TOPICS, STREAM_TOPIC, KILL_TOPIC)

        async def create() -> None:
            for topic in topics:
                for b in (master_a, master_b):
                    await create_topic(b.addr, topic)
        asyncio.run(create())
        slave_a.start()  # after the topics exist: its first metadata copy (3 s after start) has them all
        asyncio.run(_populate(cluster))
        return cluster
    except BaseException:
        for b in reversed(started):
            b.stop()
        namesrv.stop()
        raise


async def _populate(cluster: NetCluster) -> None:
    for index, topic in enumerate(BATCH_TOPICS):  # phase 1: about two thirds of every queue
        for broker in GROUPS:
            counts = {q: n * 2 // 3 for q, n in batch_counts(index, broker).items()}
            cluster.sent += await send_and_record(cluster.masters[broker].addr, broker,
                                                  plan_messages(topic, broker, counts))
    await asyncio.sleep(0.05)
    cluster.boundary_ms = int(time.time() * 1000)
    await asyncio.sleep(0.05)
    for index, topic in enumerate(BATCH_TOPICS):  # phase 2: the rest, stored at or after boundary_ms
        for broker in GROUPS:
            full = batch_counts(index, broker)
            counts = {q: n - n * 2 // 3 for q, n in full.items()}
            cluster.sent += await send_and_record(cluster.masters[broker].addr, broker,
                                                  plan_messages(topic, broker, counts, first=PHASE2_FIRST))
    await cluster.send(STREAM_TOPIC, 20, seed=1)
    await cluster.send(KILL_TOPIC, 150, seed=2)
    for s in cluster.of(*BATCH_TOPICS):  # the boundary splits the two phases by store time
        assert (s.store_ms >= cluster.boundary_ms) == (number(s) >= PHASE2_FIRST), (s, cluster.boundary_ms)
    for topic in (*BATCH_TOPICS, STREAM_TOPIC, KILL_TOPIC):
        await cluster.wait_route(topic, {0, 1})
    await cluster.wait_slave_caught_up((*BATCH_TOPICS, STREAM_TOPIC, KILL_TOPIC))


# ---- ACL ----------------------------------------------------------------------------------------------------
ACL_TOPIC = "NetSecured"
ACL_ADMIN = ("net_admin", "net-admin-secret")
ACL_READER = ("spark_reader", "spark-reader-secret")
ACL_YAML = f"""
globalWhiteRemoteAddresses:
accounts:
  - accessKey: {ACL_ADMIN[0]}
    secretKey: {ACL_ADMIN[1]}
    admin: true
  - accessKey: {ACL_READER[0]}
    secretKey: {ACL_READER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {ACL_TOPIC}=SUB
"""


@dataclass
class AclBroker:
    broker: Any
    sent: list[Sent]

    @property
    def name_server(self) -> str:
        return self.broker.namesrv_addr


def start_acl_broker(workdir: Path, broker_cls: type) -> AclBroker:
    """One broker (embedded name server) with plain ACL; ACL_TOPIC populated by the admin account."""
    (workdir / "plain_acl.yml").write_text(ACL_YAML)  # the default aclFile: beside the broker's .conf
    broker = broker_cls(workdir, "broker-acl", extra={"aclEnable": "true"}).start()
    try:
        async def populate() -> list[Sent]:
            await create_topic(broker.addr, ACL_TOPIC, creds=ACL_ADMIN)
            planned = plan_messages(ACL_TOPIC, "broker-acl", {q: 6 + q for q in range(QUEUES)})
            return await send_and_record(broker.addr, "broker-acl", planned, creds=ACL_ADMIN)

        sent = asyncio.run(populate())

        async def routed() -> bool:
            return await route(broker.namesrv_addr, ACL_TOPIC) is not None
        asyncio.run(wait_for(routed, f"the route of {ACL_TOPIC}"))
        return AclBroker(broker, sent)
    except BaseException:
        broker.stop()
        raise


# ---- retention (data loss) ----------------------------------------------------------------------------------
LOSS_TOPIC = "NetRetained"


@dataclass
class RetentionBroker:
    broker: Any
    min_offset: int  # queue 0's first offset still stored (> 0)
    max_offset: int  # queue 0's next offset

    @property
    def name_server(self) -> str:
        return self.broker.namesrv_addr


def start_retention_broker(workdir: Path, broker_cls: type) -> RetentionBroker:
    """A broker whose full commit-log files are deleted at once: LOSS_TOPIC queue 0 keeps only its tail."""
    broker = broker_cls(workdir, "broker-loss", extra={
        "mappedFileSizeCommitLog": 64 * 1024, "mappedFileSizeConsumeQueue": 20 * 40, "fileReservedTime": 0,
        "deleteWhen": ";".join(f"{h:02d}" for h in range(24)), "cleanResourceInterval": 100,
        "messageIndexEnable": "false"}).start()
    try:
        async def fill() -> RetentionBroker:
            await create_topic(broker.addr, LOSS_TOPIC, queues=1)
            async with await WireClient.connect(broker.addr) as client:
                for start in range(0, 300, 100):
                    futures = [client.send_nowait(client.make(RC.SEND_MESSAGE_V2, send_v2_fields(LOSS_TOPIC, 0),
                                                              f"loss-{i}|".encode() + b"." * 1000))
                               for i in range(start, start + 100)]
                    await client.writer.drain()
                    assert all(r.code == R.SUCCESS for r in await asyncio.wait_for(asyncio.gather(*futures), 15))

                async def trimmed() -> int:
                    resp = await client.request(RC.GET_MIN_OFFSET, {"topic": LOSS_TOPIC, "queueId": "0"})
                    files = os.listdir(broker.store_dir / "commitlog")
                    return int(resp.ext_fields["offset"]) if len(files) == 1 else 0
                low = await wait_for(trimmed, "retention to delete the old commit-log files")
                high = await max_offset(client, LOSS_TOPIC, 0)
            assert 0 < low < high == 300, (low, high)
            await wait_for(lambda: route(broker.namesrv_addr, LOSS_TOPIC), f"the route of {LOSS_TOPIC}")
            return RetentionBroker(broker, low, high)
        return asyncio.run(fill())
    except BaseException:
        broker.stop()
        raise
