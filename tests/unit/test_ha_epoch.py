"""Controller-mode HA (controller.md §10): the frames sans-I/O, then a real master/slave pair over loopback on two
stores, where the slave's divergent tail is cut before it copies anything and transfers never cross an epoch."""

from __future__ import annotations

import asyncio
import logging

import pytest

from broker.ha.epoch_master import EpochHAMaster
from broker.ha.epoch_slave import EpochHASlave
from broker.store import PutStatus
from broker.store.epoch_file import EpochFile, EpochRecord
from protocol.ha import HAProtocolError
from protocol.ha_epoch import (
    MasterHello,
    MasterHelloReader,
    ReportReader,
    SlaveHello,
    TransferReader,
    decode_slave_hello,
    encode_master_hello,
    encode_report,
    encode_slave_hello,
    encode_transfer_header,
)

from tests.support.store import make_msg, open_store


# ---- sans-I/O ---------------------------------------------------------------------------------------------------
def test_slave_hello_layout():
    data = encode_slave_hello(SlaveHello(7, False, True))
    assert data == bytes.fromhex("00000001" "0000" "0001" "0000000000000007")
    assert decode_slave_hello(data + b"rest") == SlaveHello(7, False, True)
    with pytest.raises(HAProtocolError, match="controller-mode handshake"):
        decode_slave_hello(bytes(8) + bytes(8))  # a classic offset report 0 twice
    with pytest.raises(HAProtocolError):
        decode_slave_hello(encode_slave_hello(SlaveHello(7))[:10])


@pytest.mark.parametrize("chunk", [1, 5, 1000])
def test_master_hello_any_chunking(chunk):
    hello = MasterHello(1500, 2, [(1, 0), (2, 1000)])
    data = encode_master_hello(hello)
    assert len(data) == 20 + 12 * 2 and data[:20] == bytes.fromhex("00000001" "00000018" "00000000000005dc" "00000002")
    reader = MasterHelloReader()
    got = None
    stream = data + encode_transfer_header(1000, 0, 2, 1000, 1500)
    for i in range(0, len(stream), chunk):
        if got is None:
            got = reader.feed(stream[i:i + chunk])
            rest = reader.rest
        else:
            rest += stream[i:i + chunk]
    assert got == hello
    assert TransferReader().feed(rest)[0].confirm_offset == 1500


def test_master_hello_refuses_a_classic_frame():
    with pytest.raises(HAProtocolError, match="controller-mode"):
        MasterHelloReader().feed(bytes.fromhex("0000000000000000" "00000000") + bytes(8))


def test_reports_and_transfers():
    reader = ReportReader()
    data = encode_report(5) + encode_report(9)
    assert reader.feed_all(data[:7]) == [] and reader.feed_all(data[7:]) == [5, 9]
    with pytest.raises(HAProtocolError):
        ReportReader().feed_all(bytes(8) + bytes(4))  # classic reports: state 0
    frames = TransferReader()
    stream = encode_transfer_header(100, 3, 4, 90, 95) + b"abc" + encode_transfer_header(103, 0, 4, 90, 103)
    out = frames.feed(stream[:40]) + frames.feed(stream[40:])
    assert [(t.offset, t.epoch, t.epoch_start, t.confirm_offset, t.data) for t in out] == [
        (100, 4, 90, 95, b"abc"), (103, 4, 90, 103, b"")]
    with pytest.raises(HAProtocolError):
        TransferReader().feed(encode_transfer_header(80, 0, 4, 90, 0))  # epoch starts after the data


# ---- a real pair ------------------------------------------------------------------------------------------------
async def _put(store, n, start=0):
    ends = []
    for i in range(start, start + n):
        r = await store.put_message(make_msg(i, queue_id=i % 2, keys=f"k{i}", body=b"x" * 200))
        assert r.status is PutStatus.PUT_OK
        ends.append(r.physical_offset + r.wrote_bytes)
    return ends


async def _until(cond, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def _bytes(store, end):
    out = bytearray()
    pos = 0
    cl = store.commit_log
    while pos < end:
        mf = cl.mfq.find(pos)
        take = min(end - pos, cl.file_size - (pos - mf.file_from_offset))
        out += mf.mm[pos - mf.file_from_offset:pos - mf.file_from_offset + take]
        pos += take
    return bytes(out)


async def test_divergent_replica_is_cut_then_catches_up(tmp_path, caplog):
    # A was master in epochs 1 and 2 and wrote 60 messages; B copied 40 of them, then B became master (epoch 3)
    # and wrote 25 more. A returns as B's slave.
    a = open_store(tmp_path / "a")
    b = open_store(tmp_path / "b", replica=True)
    await a.start()
    await b.start()
    a_epochs = EpochFile(str(tmp_path / "a" / "epochFileCheckpoint"))
    b_epochs = EpochFile(str(tmp_path / "b" / "epochFileCheckpoint"))
    a_epochs.append(1, 0)
    ends = await _put(a, 30)
    a_epochs.append(2, ends[-1])
    ends += await _put(a, 30, 30)
    common = ends[39]
    for e in a_epochs.entries:  # B holds the first 40 messages and the same history up to there
        b_epochs.append(e.epoch, e.start_offset)
    b.append_replicated(0, _bytes(a, common))
    b.config.replica = False
    b_epochs.set_last_epoch(3, common)
    b_ends = await _put(b, 25, 100)
    a.config.replica = True
    master = EpochHAMaster(b.commit_log, "127.0.0.1", 0, epoch_file=b_epochs, local_id=2)
    b.add_arrival_listener(master.on_append)
    await master.start()
    slave = EpochHASlave(a, f"127.0.0.1:{master.port}", epoch_file=a_epochs, broker_id=1)
    caplog.set_level(logging.WARNING, logger="broker.ha.epoch_slave")
    try:
        slave.start()
        await _until(lambda: a.commit_log.max_offset == b.commit_log.max_offset)
        assert slave.last_truncation == (ends[-1], common)
        lines = [r.getMessage() for r in caplog.records if "cut the commit log" in r.getMessage()]
        assert len(lines) == 1 and f"from {ends[-1]} to {common} ({ends[-1] - common} bytes" in lines[0]
        assert _bytes(a, b_ends[-1]) == _bytes(b, b_ends[-1])
        assert a_epochs.entries == b_epochs.entries == [EpochRecord(1, 0), EpochRecord(2, ends[29]),
                                                        EpochRecord(3, common)]
        assert a.get_max_offset("TopicTest", 0) == b.get_max_offset("TopicTest", 0) == 20 + 13
        assert a.query_message("TopicTest", "k55", 4, 0, 2**62).records == []  # only A had it: gone
        assert len(a.query_message("TopicTest", "k110", 4, 0, 2**62).records) == 1
        # more writes on the master keep flowing, the slave's acks reach the master
        more = await _put(b, 5, 200)
        await _until(lambda: master.push_max_offset >= more[-1])
    finally:
        await slave.stop()
        await master.stop()
        await a.shutdown()
        await b.shutdown()


async def test_no_common_epoch_refuses_to_replicate(tmp_path):
    a = open_store(tmp_path / "a", replica=True)
    b = open_store(tmp_path / "b")
    await a.start()
    await b.start()
    a_epochs = EpochFile(str(tmp_path / "a" / "e"))
    b_epochs = EpochFile(str(tmp_path / "b" / "e"))
    await _put(b, 3)
    b_epochs.append(5, 100)  # its older files deleted: its history begins after ours, in another epoch
    a.config.replica = False
    a_epochs.append(1, 0)
    await _put(a, 3)
    a.config.replica = True
    before = a.commit_log.max_offset
    master = EpochHAMaster(b.commit_log, "127.0.0.1", 0, epoch_file=b_epochs, local_id=2)
    await master.start()
    reasons = []
    slave = EpochHASlave(a, f"127.0.0.1:{master.port}", epoch_file=a_epochs, broker_id=1,
                         on_unreconcilable=reasons.append)
    try:
        slave.start()
        await _until(lambda: reasons)
        assert "no epoch in common" in reasons[0]
        assert a.commit_log.max_offset == before  # nothing cut, nothing copied
        assert not master.slaves
    finally:
        await slave.stop()
        await master.stop()
        await a.shutdown()
        await b.shutdown()


async def test_fresh_replica_gets_every_epoch_entry(tmp_path):
    """Frames are cut at epoch ends: an empty slave records each of the master's epochs at its start."""
    b = open_store(tmp_path / "b")
    c = open_store(tmp_path / "c", replica=True)
    await b.start()
    await c.start()
    b_epochs = EpochFile(str(tmp_path / "b" / "e"))
    c_epochs = EpochFile(str(tmp_path / "c" / "e"))
    b_epochs.append(1, 0)
    ends = await _put(b, 7)
    b_epochs.append(2, ends[-1])
    ends += await _put(b, 9, 7)
    b_epochs.append(4, ends[-1])
    ends += await _put(b, 3, 16)
    master = EpochHAMaster(b.commit_log, "127.0.0.1", 0, epoch_file=b_epochs, local_id=1)
    await master.start()
    slave = EpochHASlave(c, f"127.0.0.1:{master.port}", epoch_file=c_epochs, broker_id=3)
    try:
        slave.start()
        await _until(lambda: c.commit_log.mfq.files and c.commit_log.max_offset == ends[-1])
        assert c_epochs.entries == b_epochs.entries
        assert _bytes(c, ends[-1]) == _bytes(b, ends[-1])
        assert slave.confirm_offset == ends[-1]
    finally:
        await slave.stop()
        await master.stop()
        await b.shutdown()
        await c.shutdown()


async def test_epoch_exchange_follows_the_acl_handshake(tmp_path):
    """Under aclEnable the authentication of protocol/ha.py comes first: a slave with the admin account's secret
    replicates; one with a wrong secret gets nothing."""
    secrets = {"ha_admin01": "secret-one"}
    b = open_store(tmp_path / "b")
    await b.start()
    b_epochs = EpochFile(str(tmp_path / "b" / "e"))
    b_epochs.append(1, 0)
    ends = await _put(b, 5)
    master = EpochHAMaster(b.commit_log, "127.0.0.1", 0, epoch_file=b_epochs, local_id=1, admin_secret=secrets.get)
    await master.start()
    stores = []
    try:
        for name, secret in (("bad", "wrong"), ("good", "secret-one")):
            c = open_store(tmp_path / name, replica=True)
            await c.start()
            stores.append(c)
            slave = EpochHASlave(c, f"127.0.0.1:{master.port}", epoch_file=EpochFile(str(tmp_path / name / "e")),
                                 broker_id=2, credentials=("ha_admin01", secret))
            slave.start()
            try:
                if name == "good":
                    await _until(lambda c=c: c.commit_log.mfq.files and c.commit_log.max_offset == ends[-1])
                else:
                    await asyncio.sleep(1.0)
                    assert not c.commit_log.mfq.files and not master.slaves
            finally:
                await slave.stop()
    finally:
        await master.stop()
        for c in stores:
            await c.shutdown()
        await b.shutdown()


async def test_sync_state_set_grows_shrinks_and_acks(tmp_path):
    """controller.md §7/§8 on a real pair: a caught-up slave is proposed for the set at once; a set member's acks
    are what allAck and inSyncReplicas wait for; a member whose connection closes is proposed out at once, and one
    behind for longer than haMaxTimeSlaveNotCatchup is dropped at the next check."""
    b = open_store(tmp_path / "b")
    c = open_store(tmp_path / "c", replica=True)
    await b.start()
    await c.start()
    b_epochs = EpochFile(str(tmp_path / "b" / "e"))
    b_epochs.append(1, 0)
    await _put(b, 3)
    proposals: list[set[int]] = []
    master = EpochHAMaster(b.commit_log, "127.0.0.1", 0, epoch_file=b_epochs, local_id=1, all_ack=True,
                           max_not_catchup_ms=300, on_expand=proposals.append)
    b.add_arrival_listener(master.on_append)
    await master.start()
    slave = EpochHASlave(c, f"127.0.0.1:{master.port}", epoch_file=EpochFile(str(tmp_path / "c" / "e")), broker_id=2)
    try:
        slave.start()
        await _until(lambda: proposals)
        assert proposals[0] == {1, 2} and master.in_sync_count() == 2  # pending: the larger set counts
        master.set_sync_state_set({1, 2}, 5)  # the controller's answer
        ends = await _put(b, 2, 10)
        assert await master.wait_for_in_sync(ends[-1], 5.0)
        assert await master.wait_for_acks(ends[-1], 1, 5.0)
        assert not await master.wait_for_acks(ends[-1], 2, 0.3)  # inSyncReplicas=3: only one slave here
        assert master.confirm_offset() == ends[-1]
        await asyncio.sleep(0.5)
        assert master.check_sync_state_set() is None  # caught up (nothing left to send): stays
        await slave.stop()
        await _until(lambda: len(proposals) > 1)
        assert proposals[-1] == {1}  # closed connection: out at once
        master.proposal_failed()
        more = await _put(b, 1, 20)
        assert not await master.wait_for_in_sync(more[-1], 0.3)  # member 2 gone: allAck times out
        assert master.confirm_offset() == ends[-1]  # a member without a connection keeps the last value
        assert master.check_sync_state_set() == {1}
    finally:
        await slave.stop()
        await master.stop()
        await b.shutdown()
        await c.shutdown()
