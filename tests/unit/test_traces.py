"""Message traces: the reference-format codec (protocol/trace.py), the client's dispatcher and listener wrapper
(client/trace.py), and the dead-letter resend audit table (broker/managers/dlq_resends.py)."""

from __future__ import annotations

import asyncio
import json
import threading

from broker.managers.dlq_resends import DlqResendLog
from client.message import ConsumeOrderlyResult, ConsumeResult
from client.trace import TraceDispatcher, traced_listener
from protocol.admin_bodies import Connection, ProducerConnection, ProducerTableInfo
from protocol.trace import (
    MAX_TRACE_BODY, ContextCode, TraceRecord, decode_records, encode_records, message_trace, trace_keys)

A, B = "\x01", "\x02"


# ---- codec ------------------------------------------------------------------------------------
def test_bodies_laid_out_as_the_reference_writes_them_are_read():
    # field by field as the reference encoder appends them (Pub 14, SubBefore 8, SubAfter 9 fields)
    body = (f"Pub{A}1700000000000{A}DefaultRegion{A}pg{A}Orders{A}7F00000100002A9F0000000000000001{A}TagA{A}k1 k2{A}"
            f"10.0.0.1:10911{A}42{A}5{A}0{A}0A00000100002A9F0000000000001234{A}true{B}"
            f"SubBefore{A}1700000000100{A}DefaultRegion{A}cg{A}REQ1{A}7F00000100002A9F0000000000000001{A}2{A}k1 k2{B}"
            f"SubAfter{A}REQ1{A}7F00000100002A9F0000000000000001{A}17{A}false{A}k1 k2{A}4{A}1700000000117{A}cg{B}")
    pub, before, after = decode_records(body.encode())
    assert (pub.type, pub.timestamp, pub.group, pub.topic, pub.tags, pub.keys, pub.store_host, pub.body_length,
            pub.cost_ms, pub.msg_type, pub.offset_msg_id, pub.success) == \
           ("Pub", 1700000000000, "pg", "Orders", "TagA", "k1 k2", "10.0.0.1:10911", 42, 5, 0,
            "0A00000100002A9F0000000000001234", True)
    assert (before.group, before.request_id, before.retry_times) == ("cg", "REQ1", 2)
    assert (after.request_id, after.cost_ms, after.success, after.context_code, after.timestamp, after.group) == \
           ("REQ1", 17, False, ContextCode.FAILED, 1700000000117, "cg")
    assert encode_records([pub, before, after]) == body.encode()  # byte for byte the same


def test_old_and_odd_writers_are_read_and_garbage_is_skipped():
    old_pub = f"Pub{A}1{A}r{A}pg{A}T{A}ID{A}null{A}null{A}h:1{A}3{A}4{A}3{A}true{B}"  # 13 fields, Java nulls
    with_host = f"Pub{A}1{A}r{A}pg{A}T{A}ID{A}t{A}k{A}h:1{A}3{A}4{A}0{A}OFF{A}false{A}9.9.9.9{B}"
    old_after = f"SubAfter{A}REQ{A}ID{A}8{A}true{A}k{B}"  # no context code, time or group
    unknown = f"Recall2{A}x{B}short{A}1{B}{B}"
    pub13, pub15, after = decode_records(old_pub + with_host + old_after + unknown)
    assert (pub13.tags, pub13.keys, pub13.msg_type, pub13.success, pub13.offset_msg_id) == ("", "", 3, True, "")
    assert (pub15.offset_msg_id, pub15.success, pub15.client_host) == ("OFF", False, "9.9.9.9")
    assert (after.cost_ms, after.context_code, after.group, after.timestamp) == (8, ContextCode.SUCCESS, "", 0)


def test_separators_inside_values_cannot_break_a_record():
    record = TraceRecord("Pub", 1, "r", "pg", "T", "ID", "tag\x01x", "key\x02y", "h", 1, 1, 0, "O", True)
    (back,) = decode_records(encode_records([record]))
    assert (back.tags, back.keys, back.msg_id) == ("tag x", "key y", "ID")


def test_trace_keys_are_the_msg_ids_and_their_keys_once_each():
    records = [TraceRecord("Pub", msg_id="A", keys="k1 k2"), TraceRecord("SubBefore", msg_id="A", keys="k1"),
               TraceRecord("SubAfter", msg_id="B", keys="")]
    assert trace_keys(records) == ["A", "k1", "k2", "B"]


def test_a_message_trace_pairs_sub_before_and_after_by_request_id():
    found = [
        (TraceRecord("Pub", 10, "r", "pg", "T", "M", store_host="s:1", cost_ms=3), "p:1"),
        (TraceRecord("SubBefore", 20, "r", "cg", msg_id="M", request_id="R1", retry_times=0), "c:1"),
        (TraceRecord("SubAfter", msg_id="M", request_id="R1", cost_ms=4, success=False,
                     context_code=ContextCode.EXCEPTION), "c:1"),  # an old writer: no group, no time
        (TraceRecord("SubBefore", 30, "r", "cg", msg_id="M", request_id="R2", retry_times=1), "c:1"),
        (TraceRecord("SubBefore", 40, "r", "other", msg_id="M", request_id="R3"), "c:2"),
        (TraceRecord("Pub", 11, "r", "pg", "T", "NOT-M"), "p:1"),
    ]
    trace = message_trace(found, "M")
    assert [(s["producerGroup"], s["storeHost"], s["clientHost"], s["costMs"]) for s in trace["sends"]] == \
           [("pg", "s:1", "p:1", 3)]
    groups = {g["consumerGroup"]: g["consumptions"] for g in trace["consumers"]}
    assert [(c["time"], c["status"], c["result"]) for c in groups["cg"]] == \
           [(20, "failed", "EXCEPTION"), (30, "in progress", None)]
    assert [c["status"] for c in groups["other"]] == ["in progress"]


def test_producer_connection_bodies():
    body = ProducerConnection([Connection("c1", "1.2.3.4:5", "JAVA", 479)]).encode()
    assert json.loads(body) == {"connectionSet": [{"clientAddr": "1.2.3.4:5", "clientId": "c1", "language": "JAVA",
                                                   "version": 479}]}
    assert ProducerConnection.decode(body).connection_set[0].client_id == "c1"
    table = ProducerTableInfo({"pg": [{"clientId": "c1", "remoteIP": "1.2.3.4:5"}]})
    assert ProducerTableInfo.decode(table.encode()).data == table.data


# ---- client dispatcher --------------------------------------------------------------------------
class FakeProducer:
    def __init__(self) -> None:
        self.sent: list = []

    async def send(self, msg, timeout: float = 3.0):
        self.sent.append(msg)

    async def shutdown(self) -> None:
        pass


def _dispatcher(**kwargs) -> tuple[TraceDispatcher, FakeProducer]:
    dispatcher = TraceDispatcher("g", "127.0.0.1:9876", **kwargs)
    producer = FakeProducer()
    dispatcher._producer = producer  # no network: what would be sent is kept
    return dispatcher, producer


async def test_records_go_out_in_batches_keyed_by_msg_id_from_any_thread():
    dispatcher, producer = _dispatcher(batch_size=3, flush_interval=0.05)
    dispatcher._loop = asyncio.get_running_loop()
    dispatcher._wake = asyncio.Event()
    dispatcher._task = asyncio.create_task(dispatcher._run())
    threads = [threading.Thread(target=dispatcher.append, args=(TraceRecord("Pub", msg_id=f"M{i}", keys="k"),))
               for i in range(7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _ in range(100):
        if sum(len(decode_records(m.body)) for m in producer.sent) == 7:
            break
        await asyncio.sleep(0.02)
    await dispatcher.close()
    assert [len(decode_records(m.body)) for m in producer.sent] == [3, 3, 1]
    assert all(m.topic == "RMQ_SYS_TRACE_TOPIC" for m in producer.sent)
    first = producer.sent[0]
    assert sorted(first.keys) == sorted([r.msg_id for r in decode_records(first.body)] + ["k"])
    assert dispatcher.sent_records == 7 and dispatcher.dropped == 0


async def test_a_full_queue_drops_instead_of_blocking_and_big_batches_split():
    dispatcher, producer = _dispatcher(max_pending=2)
    for i in range(5):
        dispatcher.append(TraceRecord("Pub", msg_id=f"M{i}"))
    assert dispatcher.dropped == 3
    big, _ = _dispatcher(batch_size=20)
    big._producer = producer
    for i in range(3):
        big.append(TraceRecord("Pub", msg_id=f"B{i}", keys="x" * (MAX_TRACE_BODY // 2)))
    await big.flush()
    assert [len(decode_records(m.body)) for m in producer.sent] == [1, 1, 1]


async def test_the_listener_wrapper_keeps_its_shape_and_records_each_outcome():
    dispatcher, _ = _dispatcher()

    class Msg:
        def __init__(self, msg_id: str, props: dict | None = None) -> None:
            self.msg_id, self.topic, self.keys, self.reconsume_times = msg_id, "T", ["k"], 1
            self.properties = props or {}

    async def ok(msgs):
        return ConsumeResult.SUCCESS

    def later(msgs, context):
        return ConsumeResult.RECONSUME_LATER

    def boom(msgs):
        raise RuntimeError("listener bug")

    def orderly(msgs):
        return ConsumeOrderlyResult.SUCCESS

    wrapped_ok = traced_listener(ok, "cg", dispatcher)
    assert asyncio.iscoroutinefunction(wrapped_ok)
    assert await wrapped_ok([Msg("A"), Msg("SKIP", {"TRACE_ON": "false"})]) is ConsumeResult.SUCCESS
    assert traced_listener(later, "cg", dispatcher)([Msg("B")], object()) is ConsumeResult.RECONSUME_LATER
    try:
        traced_listener(boom, "cg", dispatcher)([Msg("C")])
    except RuntimeError:
        pass
    assert traced_listener(orderly, "cg", dispatcher)([Msg("D")]) is ConsumeOrderlyResult.SUCCESS
    records = list(dispatcher._pending)
    after = {r.msg_id: r for r in records if r.type == "SubAfter"}
    assert {r.msg_id for r in records} == {"A", "B", "C", "D"}  # TRACE_ON=false is not traced
    assert [(after[m].success, after[m].context_code) for m in "ABCD"] == \
           [(True, ContextCode.SUCCESS), (False, ContextCode.FAILED), (False, ContextCode.EXCEPTION),
            (True, ContextCode.SUCCESS)]
    before = {r.msg_id: r for r in records if r.type == "SubBefore"}
    assert all(before[m].request_id == after[m].request_id and before[m].retry_times == 1 for m in "ABCD")


# ---- resend audit -------------------------------------------------------------------------------
def test_the_resend_audit_counts_is_bounded_and_survives_a_reload(tmp_path):
    log = DlqResendLog(str(tmp_path), max_entries=3)
    assert log.last("g", 100) is None
    log.record("g", 100, "ID100", "%RETRY%g", "NEW1", "console@1.2.3.4", at_ms=1)
    entry = log.record("g", 100, "ID100", "T", "NEW2", "ak@1.2.3.4", at_ms=2)
    assert (entry["count"], entry["by"], entry["target"], entry["at"]) == (2, "ak@1.2.3.4", "T", 2)
    for offset in (200, 300, 400):
        log.record("g", offset, f"ID{offset}", "%RETRY%g", "N", "x", at_ms=offset)
    assert log.last("g", 100) is None and sorted(log.of_group("g")) == [200, 300, 400]  # the oldest went
    log.record("other", 1, "O", "%RETRY%other", "N", "x")
    log.persist()
    again = DlqResendLog(str(tmp_path), max_entries=3)
    assert sorted(again.of_group("g")) == [300, 400] and again.last("other", 1)["count"] == 1
    untouched = DlqResendLog(str(tmp_path / "fresh"))
    untouched.persist()  # nothing changed: no file written
    assert not (tmp_path / "fresh").exists()
