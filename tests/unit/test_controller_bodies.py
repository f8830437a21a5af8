"""Controller-mode bodies and headers (protocol/controller.py): what the reference's Java side writes, read back."""

from __future__ import annotations

from protocol.codes import RequestCode, ResponseCode
from protocol.controller import (LONG_MAX, BrokerReplicasInfo, ElectMasterRequestHeader, ElectMasterResponseBody,
                                 EpochEntryCache, SyncStateSet)


def test_codes_are_the_reference_numbers():
    assert (RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_ELECT_MASTER,
            RequestCode.CONTROLLER_APPLY_BROKER_ID) == (904, 1002, 1013)
    assert (ResponseCode.CONTROLLER_NOT_LEADER, ResponseCode.CONTROLLER_MASTER_STILL_EXIST) == (2007, 2011)


def test_bodies_read_fastjson_and_write_sorted():
    assert SyncStateSet.decode(b'{"syncStateSet":[2,"1"],"syncStateSetEpoch":"3"}') == SyncStateSet({1, 2}, 3)
    assert SyncStateSet({2, 1}, 3).encode() == b'{"syncStateSet":[1,2],"syncStateSetEpoch":3}'
    elected = ElectMasterResponseBody.decode(
        b'{"brokerMemberGroup":{"cluster":"c","brokerName":"b","brokerAddrs":{1:"10.0.0.1:10911","2":"x:1"}},'
        b'"syncStateSet":[1]}')
    assert elected.broker_member_group.broker_addrs == {1: "10.0.0.1:10911", 2: "x:1"} and elected.sync_state_set == {1}
    info = BrokerReplicasInfo.decode(
        b'{"replicasInfoTable":{"broker-a":{"masterBrokerId":1,"masterAddress":"a:1","masterEpoch":2,'
        b'"syncStateSetEpoch":3,"inSyncReplicas":[{"brokerName":"broker-a","brokerId":1,"brokerAddress":"a:1",'
        b'"alive":true}],"notInSyncReplicas":[]}}}')
    group = info.replicas_info_table["broker-a"]
    assert (group.master_broker_id, group.master_epoch, group.in_sync_replicas[0].alive) == (1, 2, True)
    assert BrokerReplicasInfo.decode(info.encode()) == info
    cache = EpochEntryCache.decode(b'{"clusterName":"c","brokerName":"b","brokerId":0,"maxOffset":1500,'
                                   b'"epochList":[{"epoch":1,"startOffset":0,"endOffset":1000},'
                                   b'{"epoch":2,"startOffset":1000}]}')
    assert [(e.epoch, e.start_offset, e.end_offset) for e in cache.epoch_list] == [(1, 0, 1000), (2, 1000, LONG_MAX)]


def test_elect_master_header_defaults():
    header = ElectMasterRequestHeader.decode({"brokerName": "b"})
    assert (header.broker_id, header.designate_elect) == (-1, False)
