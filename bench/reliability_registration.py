"""Route registration and topic/group creation at scale (issue 11): does the cost of one more topic grow
with the number of topics, and does a heartbeat naming thousands of new groups freeze the broker?

    python bench/reliability_registration.py [--levels 500,2000,4000,8000] [--groups 1000,3000] [--sample 100]

Starts the real broker (tests/support/broker_process.py: embedded name server, temporary store) and prints
  * ms per topic creation when the broker already has N topics: UPDATE_AND_CREATE_TOPIC (17), one at a
    time, averaged over --sample new topics, and the same for auto-creation by a first SEND_MESSAGE_V2;
  * the round trip of one HEART_BEAT naming G new CLUSTERING consumer groups (each creates a subscription
    group and its %RETRY% topic), the longest round trip a side client (GET_MAX_OFFSET every 20 ms) saw
    meanwhile, and how long until the embedded name server serves the last group's %RETRY% route.

Figures (2 cores shared with other jobs, so noisy; before = main at 09e9209 with
`--levels 500,2000,4000 --sample 50`, after = branch issue11-registration with the defaults):

    topics  create ms/topic (17)   auto-create ms/topic (first send)
            before    after        before    after
    500      11.3      0.28         16.8      3.0
    2000     66.5      0.28         49.8      5.9
    4000     53.3      0.37        107.3      9.5
    8000       -       0.26           -       9.1

    groups  heartbeat s         side client max s            (on top of the 4,000-8,000 topics above)
            before   after      before           after
    1000     37.1    0.08       >=30 (timed out)  0.015
    3000    193.6    0.22       >=30 (timed out)  0.024

The auto-create column is mostly the store creating the new topic's consume queue file (mkdir,
fallocate, first-touch page faults: ~3 ms in-process at 500 and at 8,000 topics alike); the
registration part of it is the flat admin column.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from tests.support.broker_process import prepare_broker  # noqa: E402
from tests.support.probes import LatencyProbe  # noqa: E402
from tests.support.wire import WireClient, send_v2_fields  # noqa: E402
from protocol.codes import RequestCode, ResponseCode  # noqa: E402

FILL_WINDOW = 64  # creation requests in flight while filling up to the next level


def create_fields(topic: str) -> dict[str, str]:
    return {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}


async def create_topics(client: WireClient, names: list[str]) -> None:
    """Create ``names`` with at most FILL_WINDOW requests in flight."""
    for start in range(0, len(names), FILL_WINDOW):
        chunk = names[start:start + FILL_WINDOW]
        responses = await asyncio.gather(*(client.request(RequestCode.UPDATE_AND_CREATE_TOPIC, create_fields(n),
                                                          timeout=300) for n in chunk))
        bad = [r for r in responses if r.code != ResponseCode.SUCCESS]
        if bad:
            raise RuntimeError(f"topic creation failed: {bad[0].code} {bad[0].remark}")


async def per_topic_ms(client: WireClient, level: int, sample: int) -> tuple[float, float]:
    """(ms per admin creation, ms per auto-creation by send), one request at a time."""
    started = time.perf_counter()
    for i in range(sample):
        response = await client.request(RequestCode.UPDATE_AND_CREATE_TOPIC, create_fields(f"S{level}-{i}"),
                                        timeout=300)
        assert response.code == ResponseCode.SUCCESS, response.remark
    admin_ms = (time.perf_counter() - started) * 1000 / sample
    started = time.perf_counter()
    for i in range(sample):
        response = await client.request(RequestCode.SEND_MESSAGE_V2, send_v2_fields(f"A{level}-{i}"), b"x",
                                        timeout=300)
        assert response.code == ResponseCode.SUCCESS, response.remark
    auto_ms = (time.perf_counter() - started) * 1000 / sample
    return admin_ms, auto_ms


def heartbeat_body(client_id: str, groups: list[str]) -> bytes:
    import json

    consumers = [{"groupName": g, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                  "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
                  "subscriptionDataSet": [{"topic": "bench-hb-topic", "subString": "*", "tagsSet": [], "codeSet": [],
                                           "subVersion": 1, "expressionType": "TAG"}]} for g in groups]
    return json.dumps({"clientID": client_id, "consumerDataSet": consumers, "producerDataSet": []}).encode()


async def heartbeat_round(addr: str, namesrv_addr: str, count: int) -> tuple[float, float, float]:
    """(heartbeat round trip s, side client's max round trip s, s until the last %RETRY% route is served)."""
    groups = [f"bench-hb-{count}-{i}" for i in range(count)]
    body = heartbeat_body(f"bench-client-{count}", groups)
    async with await WireClient.connect(addr) as client, await WireClient.connect(namesrv_addr) as namesrv:
        async with LatencyProbe(addr) as probe:
            started = time.perf_counter()
            response = await client.request(RequestCode.HEART_BEAT, {}, body, timeout=600)
            rtt = time.perf_counter() - started
            assert response.code == ResponseCode.SUCCESS, response.remark
            deadline = time.monotonic() + 120
            while True:
                route = await namesrv.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%" + groups[-1]},
                                              timeout=120)
                if route.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.01)
            routed = time.perf_counter() - started
        return rtt, probe.max_latency, routed


async def run(args: argparse.Namespace, addr: str, namesrv_addr: str) -> None:
    levels = sorted(int(x) for x in args.levels.split(",") if x)
    groups = [int(x) for x in args.groups.split(",") if x]
    async with await WireClient.connect(addr) as client:
        print(f"{'topics':>7} {'create ms/topic (17)':>21} {'auto-create ms/topic':>21} {'fill s':>7}")
        made = 0
        for level in levels:
            started = time.perf_counter()
            await create_topics(client, [f"F{i}" for i in range(made, level)])
            made = max(made, level)
            fill = time.perf_counter() - started
            admin_ms, auto_ms = await per_topic_ms(client, level, args.sample)
            print(f"{level:>7} {admin_ms:>21.2f} {auto_ms:>21.2f} {fill:>7.1f}", flush=True)
    print(f"\n{'groups':>7} {'heartbeat s':>12} {'side client max s':>18} {'last route served s':>20}")
    for count in groups:
        rtt, stall, routed = await heartbeat_round(addr, namesrv_addr, count)
        print(f"{count:>7} {rtt:>12.2f} {stall:>18.3f} {routed:>20.2f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="500,2000,4000,8000", help="topic counts to measure at")
    parser.add_argument("--groups", default="1000,3000", help="new groups per heartbeat")
    parser.add_argument("--sample", type=int, default=100, help="creations averaged per level")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-registration-")
    broker, namesrv_port = prepare_broker(workdir, 16 * 1024 * 1024, None)
    broker.start()
    ok = False
    try:
        asyncio.run(run(args, f"127.0.0.1:{broker_listen_port(workdir)}", f"127.0.0.1:{namesrv_port}"))
        ok = True
    finally:
        if ok:
            broker.stop()
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            broker.kill()
            print(f"failed; broker log and store kept in {workdir}", file=sys.stderr)
    return 0


def broker_listen_port(workdir: str) -> int:
    with open(os.path.join(workdir, "broker.conf"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("listenPort="):
                return int(line.split("=", 1)[1])
    raise RuntimeError("no listenPort in broker.conf")


if __name__ == "__main__":
    sys.exit(main())
