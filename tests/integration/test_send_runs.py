"""Pipelined sends read together are stored as one batch per queue, yet each request is checked and answered as if
it came alone (broker/processors/send.py send_run, broker/remoting_server.py dispatch_run).

Every test writes many frames with one `write`, so the broker reads them together and hands them to the run path."""

from __future__ import annotations

import asyncio
import time

from protocol.acl_signature import sign
from protocol.codes import RequestCode as RC, ResponseCode as R
from protocol.command import encode_command
from protocol.ids import decode_offset_msg_id

from tests.support.acl import APP, write_acl
from tests.support.wire import WireClient, props, pull_fields, pull_records, records, send_v1_fields, send_v2_fields


async def _write_together(client: WireClient, cmds) -> list:
    """Register every request, then put all frames on the wire in one write; the futures (None for one-way)."""
    futures = []
    for cmd in cmds:
        if cmd.is_oneway:
            futures.append(None)
        else:
            fut = asyncio.get_running_loop().create_future()
            client.pending[cmd.opaque] = fut
            futures.append(fut)
    client.writer.write(b"".join(encode_command(cmd) for cmd in cmds))
    await client.writer.drain()
    return futures


async def test_a_run_of_sends_keeps_per_request_checks_answers_and_queue_order(shared_broker):
    topic = "RunTopic"
    async with await WireClient.connect(shared_broker.addr) as client:
        assert (await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 0), b"warm-up")).code == R.SUCCESS
        cmds, expect = [], []  # expect: (queue id, body) for a send that must be stored, None for a refusal
        for i in range(90):
            queue_id = i % 3
            body = f"run-{i}".encode()
            if i == 10:
                cmds.append(client.make(RC.SEND_MESSAGE_V2, send_v2_fields("bad topic!", queue_id), body))
                expect.append(None)
            elif i == 20:
                fields = send_v2_fields(topic, queue_id)
                del fields["b"]  # no topic at all: a header error for this request only
                cmds.append(client.make(RC.SEND_MESSAGE_V2, fields, body))
                expect.append(None)
            elif i == 30:
                cmds.append(client.make(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 99), body))  # no such queue
                expect.append(None)
            elif i % 7 == 0:
                cmds.append(client.make(RC.SEND_MESSAGE, send_v1_fields(topic, queue_id, props(KEYS=f"k{i}")), body))
                expect.append((queue_id, body))
            else:
                cmds.append(client.make(RC.SEND_MESSAGE_V2, send_v2_fields(topic, queue_id, props(TAGS="T")), body))
                expect.append((queue_id, body))
        oneway = client.make(RC.SEND_MESSAGE_V2, send_v2_fields(topic, 1), b"oneway", oneway=True)
        # a pull for queue 2 in the same write must see every send written before it
        pull = client.make(RC.PULL_MESSAGE, pull_fields(topic, "run-reader", 2, 0, max_nums=64, suspend_ms=0))
        futures = await _write_together(client, cmds + [oneway, pull])
        responses = await asyncio.wait_for(asyncio.gather(*[f for f in futures if f is not None]), 10)
        pulled = responses[-1]

        offsets: dict[int, list[int]] = {0: [], 1: [], 2: []}
        for i, (resp, wanted) in enumerate(zip(responses, expect)):
            assert resp.opaque == cmds[i].opaque
            if wanted is None:
                assert resp.code in (R.INVALID_PARAMETER, R.SYSTEM_ERROR), (i, resp.code, resp.remark)
                assert resp.remark, i
                continue
            assert resp.code == R.SUCCESS, (i, resp.remark)
            queue_id, body = wanted
            assert int(resp.ext_fields["queueId"]) == queue_id
            offsets[queue_id].append(int(resp.ext_fields["queueOffset"]))
            # the answer's msgId is the offset id of this very record
            _, _, phys = decode_offset_msg_id(resp.ext_fields["msgId"])
            view = await client.request(RC.VIEW_MESSAGE_BY_ID, {"offset": str(phys)})
            assert records(view.body)[0].body == body
        assert "bad topic!" in responses[10].remark or "topic" in responses[10].remark.lower()
        assert "99" in responses[30].remark
        for queue_id, got in offsets.items():  # consecutive, in the order the requests were written
            first = 1 if queue_id == 0 else 0  # the warm-up took offset 0 of queue 0
            assert got == list(range(first, first + len(got))), (queue_id, got)

        assert pulled.code == R.SUCCESS, pulled.remark
        queue2 = [body for wanted in expect if wanted and wanted[0] == 2 for body in [wanted[1]]]
        assert [r.body for r in records(pulled.body)] == queue2

        stored = {q: [r.body for r in await pull_records(client, topic, q)] for q in (0, 1, 2)}
        assert stored[0] == [b"warm-up"] + [w[1] for w in expect if w and w[0] == 0]
        assert stored[1] == [w[1] for w in expect if w and w[0] == 1] + [b"oneway"]
        assert stored[2] == queue2
        # KEYS of the V1 sends are indexed as usual
        found = await client.request(RC.QUERY_MESSAGE, {"topic": topic, "key": "k7", "maxNum": "8",
                                                        "beginTimestamp": "0",
                                                        "endTimestamp": str(int(time.time() * 1000) + 60_000)})
        assert found.code == R.SUCCESS and [r.body for r in records(found.body)] == [b"run-7"]


async def test_acl_judges_every_request_of_a_run(broker_factory, tmp_path):
    write_acl(tmp_path / "plain_acl.yml")
    broker = broker_factory(extra={"aclEnable": "true"})
    async with await WireClient.connect(broker.addr) as client:
        cmds = []
        for i in range(40):
            fields = send_v2_fields("Orders", i % 2)
            body = f"acl-{i}".encode()
            if i % 4 != 3:  # every fourth request is not signed
                fields["AccessKey"] = APP[0]
                fields["Signature"] = sign(APP[1], fields, body)
            cmds.append(client.make(RC.SEND_MESSAGE_V2, fields, body))
        responses = await asyncio.wait_for(asyncio.gather(*await _write_together(client, cmds)), 10)
        for i, resp in enumerate(responses):
            if i % 4 == 3:
                assert resp.code == R.SYSTEM_ERROR and "No accessKey" in resp.remark, (i, resp.remark)
            else:
                assert resp.code == R.SUCCESS, (i, resp.remark)
