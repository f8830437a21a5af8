"""A topic auto-created just before a crash has its queues on disk but may be missing from topics.json
(written shortly after the change). The broker must recover it from the store at start-up, or the
acknowledged messages on it would be unreachable."""

from __future__ import annotations

import json
import os

from broker.broker import Broker
from broker.config import BrokerConfig
from protocol.codes import RequestCode as RC, ResponseCode as R

from tests.support.broker_process import free_port
from tests.support.wire import WireClient, pull_fields, records, send_v2_fields


def _config(tmp_path, port: int) -> BrokerConfig:
    return BrokerConfig(
        broker_name="broker-recover", broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=port,
        namesrv_addr=None, enable_embedded_namesrv=False, enable_vip_channel=False,
        store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=1000, max_index_num=4000)


async def test_topic_missing_from_topics_json_is_recovered_from_the_store(tmp_path):
    port = free_port()
    first = Broker(_config(tmp_path, port))
    await first.start()
    async with await WireClient.connect(f"127.0.0.1:{port}") as client:
        for i in range(3):
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields("Orphaned", 2), b"m%d" % i)
            assert resp.code == R.SUCCESS
    await first.shutdown()

    # Simulate the crash window: topics.json (and its backup) written before the topic existed.
    topics_file = os.path.join(first.config.config_dir, "topics.json")
    for path in (topics_file, topics_file + ".bak"):
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            data["topicConfigTable"].pop("Orphaned", None)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(data, f)

    second = Broker(_config(tmp_path, port))
    await second.start()
    try:
        recovered = second.topic_config_manager.topics["Orphaned"]
        assert recovered.read_queue_nums == 3 and recovered.write_queue_nums == 3
        async with await WireClient.connect(f"127.0.0.1:{port}") as client:
            pulled = await client.request(RC.PULL_MESSAGE, pull_fields("Orphaned", "g", 2, 0, max_nums=32))
            assert pulled.code == R.SUCCESS
            assert [r.body for r in records(pulled.body)] == [b"m0", b"m1", b"m2"]
    finally:
        await second.shutdown()
