"""A slave hands the offsets consumers committed to it (while its master was away) to the master at its next metadata
copy (issue 28): only those newer than the master's, the copy keeps them, a refusal keeps them for the next copy."""

import json
import logging

from broker.ha.metadata_sync import MetadataSync
from broker.managers.consumer_offset import ConsumerOffsetManager
from protocol.codes import RequestCode, ResponseCode


class FakeMaster:
    """The master's remoting port as MetadataSync's ``connect`` sees it; records UPDATE_CONSUMER_OFFSET."""

    def __init__(self, offset_table: dict, refuse_updates: bool = False) -> None:
        self.offset_table = offset_table
        self.refuse_updates = refuse_updates
        self.updates: list[dict] = []

    async def invoke(self, cmd, timeout):
        if cmd.code == RequestCode.UPDATE_CONSUMER_OFFSET:
            if self.refuse_updates:
                return cmd.make_response(ResponseCode.NO_PERMISSION, "no permission")
            self.updates.append(dict(cmd.ext_fields))
            key = f"{cmd.ext_fields['topic']}@{cmd.ext_fields['consumerGroup']}"
            self.offset_table.setdefault(key, {})[cmd.ext_fields["queueId"]] = int(cmd.ext_fields["commitOffset"])
            return cmd.make_response(ResponseCode.SUCCESS)
        if cmd.code == RequestCode.GET_ALL_CONSUMER_OFFSET:
            response = cmd.make_response(ResponseCode.SUCCESS)
            response.body = json.dumps({"offsetTable": self.offset_table}).encode()
            return response
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, "nothing here")

    def close(self) -> None:
        pass


class Tables:
    def __init__(self) -> None:
        from protocol.config_bodies import DataVersion

        self.data_version = DataVersion()


def make_sync(tmp_path, master: FakeMaster) -> tuple[MetadataSync, ConsumerOffsetManager]:
    offsets = ConsumerOffsetManager(str(tmp_path))
    sync = MetadataSync(topics=Tables(), groups=Tables(), offsets=offsets,
                        delay_offset_path=str(tmp_path / "delayOffset.json"), own_addr="127.0.0.1:2",
                        connect=lambda addr: master)
    return sync, offsets


async def test_newer_client_commits_reach_the_master_and_survive_the_copy(tmp_path):
    master = FakeMaster({"T@g": {"0": 50, "1": 70}, "T@other": {"0": 9}})
    sync, offsets = make_sync(tmp_path, master)
    offsets.commit_offset("g", "T", 0, 100)  # committed here while the master was away: newer
    offsets.commit_offset("g", "T", 1, 60)  # older than the master's 70: the master moved on
    await sync.sync_once("127.0.0.1:1")
    assert master.updates == [{"consumerGroup": "g", "topic": "T", "queueId": "0", "commitOffset": "100"}]
    assert offsets.offset_table["T@g"] == {0: 100, 1: 70}
    assert offsets.offset_table["T@other"] == {0: 9}  # the master's other entries copied as before
    assert offsets.client_commits == {}  # handed over: not offered again
    await sync.sync_once("127.0.0.1:1")
    assert len(master.updates) == 1


async def test_a_master_without_any_offsets_gets_them_too(tmp_path):
    master = FakeMaster({})
    sync, offsets = make_sync(tmp_path, master)
    offsets.commit_offset("g", "T", 3, 12)
    await sync.sync_once("127.0.0.1:1")
    assert master.offset_table == {"T@g": {"3": 12}}
    assert offsets.offset_table["T@g"] == {3: 12}


async def test_a_refusing_master_leaves_them_here_for_the_next_copy(tmp_path, caplog):
    master = FakeMaster({"T@g": {"0": 50}}, refuse_updates=True)
    sync, offsets = make_sync(tmp_path, master)
    offsets.commit_offset("g", "T", 0, 100)
    offsets.commit_offset("g", "T", 1, 100)
    with caplog.at_level(logging.WARNING, logger="broker.ha.metadata_sync"):
        await sync.sync_once("127.0.0.1:1")
    assert [r.levelname for r in caplog.records] == ["WARNING"]  # one line, not one per queue
    assert offsets.offset_table["T@g"] == {0: 100, 1: 100}  # not overwritten by the master's older 50
    assert offsets.client_commits == {"T@g": {0: 100, 1: 100}}
    master.refuse_updates = False
    await sync.sync_once("127.0.0.1:1")
    assert master.offset_table["T@g"] == {"0": 100, "1": 100} and offsets.client_commits == {}


def test_a_master_records_no_client_commits(tmp_path):
    offsets = ConsumerOffsetManager(str(tmp_path))  # no MetadataSync: a master
    offsets.commit_offset("g", "T", 0, 5)
    assert offsets.client_commits is None
