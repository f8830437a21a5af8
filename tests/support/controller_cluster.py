"""A controller-mode broker group of real processes on loopback (issue 28): a name server, one controller
(``python -m broker.controller -c controller.conf``) and N brokers with ``enableControllerMode=true`` sharing one
brokerName, plus the wire helpers the failover tests and bench/failover.py use (current master from the name
server's routes, a producer that follows the master, draining a topic)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from protocol.acl_signature import ACCESS_KEY, SIGNATURE, sign
from protocol.bodies import ClusterInfo
from protocol.codes import RequestCode, ResponseCode
from protocol.controller import BrokerReplicasInfo, EpochEntryCache, ReplicasInfo
from tests.support.broker_process import BrokerProcess, NamesrvProcess
from tests.support.controller import ControllerProcess
from tests.support.wire import WireClient, props, pull_records, send_v2_fields

GROUP = "broker-f"
CLUSTER = "FailCluster"
FILE_SIZE = 1024 * 1024


class FailoverCluster:
    """``replicas`` brokers of one group; ``brokers[i]`` keeps its store across restarts (``restart(i)``)."""

    def __init__(self, workdir: Path, replicas: int = 3, broker_extra: dict[str, object] | None = None,
                 controller_extra: dict[str, object] | None = None, acl_yaml: str | None = None,
                 credentials: tuple[str, str] | None = None) -> None:
        self.workdir = workdir
        self.credentials = credentials  # signs the helpers' requests to the controller and brokers (ACL on)
        if acl_yaml is not None:  # the default aclFile of the controller and of each broker: beside its .conf
            for d in [workdir / "controller"] + [workdir / f"replica{i}" for i in range(replicas)]:
                d.mkdir(parents=True, exist_ok=True)
                (d / "plain_acl.yml").write_text(acl_yaml)
        self.namesrv = NamesrvProcess()
        self.controller = ControllerProcess(workdir, "controller", extra=controller_extra).start()
        self.brokers: list[BrokerProcess] = []
        for i in range(replicas):
            d = workdir / f"replica{i}"
            d.mkdir(parents=True, exist_ok=True)
            self.brokers.append(BrokerProcess(d, GROUP, embedded_namesrv=False, namesrv_addr=self.namesrv.addr, extra={
                "brokerClusterName": CLUSTER, "enableControllerMode": "true", "controllerAddr": self.controller.addr,
                "mappedFileSizeCommitLog": FILE_SIZE, "brokerElectionPriority": i + 1,
                **(broker_extra or {})}))

    def stop(self) -> None:
        for b in self.brokers:
            b.stop()
        self.controller.stop()
        self.namesrv.stop()

    def by_addr(self, addr: str) -> BrokerProcess:
        return next(b for b in self.brokers if b.addr == addr)

    # ---- reading the cluster -------------------------------------------------------------------------------------
    async def routes(self) -> dict[int, str]:
        """brokerId -> address of the group, as the name server lists it."""
        async with await WireClient.connect(self.namesrv.addr) as client:
            resp = await client.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        info = ClusterInfo.decode(resp.body) if resp.body else ClusterInfo()
        data = info.broker_addr_table.get(GROUP)
        return dict(data.broker_addrs) if data is not None else {}

    async def master_addr(self) -> str | None:
        return (await self.routes()).get(0)

    def signed(self, fields: dict[str, str], body: bytes = b"") -> dict[str, str]:
        fields = dict(fields)
        if self.credentials is not None:
            fields[ACCESS_KEY] = self.credentials[0]
            fields[SIGNATURE] = sign(self.credentials[1], fields, body)
        return fields

    async def replicas_info(self) -> ReplicasInfo | None:
        body = json.dumps([GROUP]).encode()
        async with await WireClient.connect(self.controller.addr) as client:
            resp = await client.request(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, self.signed({}, body), body)
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            return None
        return BrokerReplicasInfo.decode(resp.body).replicas_info_table.get(GROUP)

    async def in_sync_ids(self) -> set[int]:
        info = await self.replicas_info()
        return {r.broker_id for r in info.in_sync_replicas} if info is not None else set()

    async def epochs(self, addr: str) -> EpochEntryCache:
        async with await WireClient.connect(addr) as client:
            resp = await client.request(RequestCode.GET_BROKER_EPOCH_CACHE, self.signed({}))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        return EpochEntryCache.decode(resp.body)


class FollowingProducer:
    """Sends numbered messages to whatever address the name server lists as the group's master, one at a time;
    ``acked`` maps each acknowledged key to the address that acknowledged it. On an error it looks the master up
    again (every 20 ms) and resends the same key."""

    def __init__(self, cluster: FailoverCluster, topic: str, body_size: int = 200) -> None:
        self.cluster = cluster
        self.topic = topic
        self.body = b"f" * body_size
        self.acked: dict[str, tuple[str, float]] = {}
        self.failures = 0
        self.stopping = False
        self.next = 0

    async def run(self) -> None:
        addr = None
        client = None
        while not self.stopping:
            try:
                if addr is None:
                    addr = await self.cluster.master_addr()
                    if addr is None:
                        await asyncio.sleep(0.02)
                        continue
                    client = await WireClient.connect(addr)
                key = f"K{self.next:08d}"
                resp = await client.request(RequestCode.SEND_MESSAGE_V2,
                                            send_v2_fields(self.topic, self.next % 2, props(UNIQ_KEY=key, KEYS=key)),
                                            self.body, timeout=5.0)
                if resp.code == ResponseCode.SUCCESS:
                    self.acked[key] = (addr, time.monotonic())
                    self.next += 1
                    continue
                self.failures += 1
            except (OSError, ConnectionError, asyncio.TimeoutError):
                self.failures += 1
            if client is not None:
                await client.close()
            client, addr = None, None
            await asyncio.sleep(0.02)
        if client is not None:
            await client.close()

    def first_ack_after(self, t: float, not_addr: str) -> float | None:
        times = [when for a, when in self.acked.values() if when >= t and a != not_addr]
        return min(times) if times else None


async def drain_keys(addr: str, topic: str, queues: int = 2) -> set[str]:
    """The UNIQ_KEYs of every message of the topic stored at addr."""
    keys: set[str] = set()
    async with await WireClient.connect(addr) as client:
        for q in range(queues):
            for rec in await pull_records(client, topic, q):
                keys.add(rec.properties.get("UNIQ_KEY", ""))
    return keys


async def stored_keys(addr: str, topic: str, expected: set[str], timeout: float = 15.0) -> set[str]:
    """The UNIQ_KEYs stored at addr once `expected` are all readable, or what is readable at the deadline.

    A message is acknowledged once it is appended (and, in controller mode, confirmed by the SyncStateSet); it becomes
    pullable when the confirm offset reaches the consume-queue dispatch, a moment later: under load the last
    acknowledged message may not be readable yet at the instant the producer stops."""
    deadline = time.monotonic() + timeout
    while True:
        keys = await drain_keys(addr, topic)
        if expected <= keys or time.monotonic() >= deadline:
            return keys
        await asyncio.sleep(0.2)


def commit_log_bytes(broker: BrokerProcess) -> bytes:
    files = sorted((broker.store_dir / "commitlog").iterdir())
    return b"".join(f.read_bytes() for f in files)
