"""Incremental route registration, coalesced remote registration, and the topic change journal (issue 11)."""

from __future__ import annotations

import asyncio
import json
import os

from broker.config import BrokerConfig
from broker.managers.persistence import ChangeJournal, data_version_key
from broker.managers.subscription_group import SubscriptionGroupManager
from broker.managers.topic_config import TopicConfigManager
from broker.namesrv.registrar import BrokerRegistrar
from broker.namesrv.route_info import RouteInfoManager
from protocol.config_bodies import DataVersion, TopicConfig


def broker_config(tmp_path, **kw) -> BrokerConfig:
    return BrokerConfig(store_path_root_dir=str(tmp_path), broker_name="broker-a", broker_ip1="127.0.0.1",
                        listen_port=10911, namesrv_addr=None, **kw)


# -- route_info ------------------------------------------------------------------------------------
def test_topic_changes_apply_only_to_a_registered_master():
    ri = RouteInfoManager()
    assert not ri.apply_topic_changes("a:1", {"T": TopicConfig("T", 2, 2)}, DataVersion(counter=2))
    ri.register_broker("C", "a", "a:1", 0, None, {"Old": TopicConfig("Old", 4, 4)}, DataVersion(counter=1))
    ri.register_broker("C", "a", "s:1", 1, None, {}, DataVersion(counter=1))
    assert not ri.apply_topic_changes("s:1", {"T": TopicConfig("T", 2, 2)}, DataVersion(counter=2))  # a slave

    v2 = DataVersion(counter=2)
    assert ri.apply_topic_changes("a:1", {"T": TopicConfig("T", 2, 3, 4), "Old": None}, v2)
    assert ri.pick_topic_route_json("Old") is None
    queue = ri.pick_topic_route_json("T")["queueDatas"][0]
    assert (queue["readQueueNums"], queue["writeQueueNums"], queue["perm"]) == (2, 3, 4)
    assert ri.broker_live_table["a:1"].data_version == data_version_key(v2)
    # A full registration with the version the delta already announced does not re-read the table.
    ri.register_broker("C", "a", "a:1", 0, None, {}, v2)
    assert ri.pick_topic_route_json("T") is not None


# -- registrar -------------------------------------------------------------------------------------
async def test_embedded_routes_follow_each_change_without_rescanning_the_table(tmp_path):
    cfg = broker_config(tmp_path, broker_permission=4)
    tcm = TopicConfigManager(cfg)
    ri = RouteInfoManager()
    registrar = BrokerRegistrar(cfg, tcm, local_route_info=ri, namesrv_addrs=[])
    await registrar.start()
    try:
        full_registrations = 0
        original = ri.register_broker

        def counting(*args, **kwargs):
            nonlocal full_registrations
            full_registrations += 1
            return original(*args, **kwargs)

        ri.register_broker = counting
        for i in range(300):
            tcm.create_topic_if_absent(f"T{i}", 2)
        tcm.update_order_flags(["T1"])
        registrar.refresh_local()  # the periodic registration: versions match, so only the timer
        assert full_registrations == 0
        assert ri.pick_topic_route_json("T299")["queueDatas"][0]["perm"] == 4  # read-only broker's permission
        assert tcm.get("T299").perm == 6
        tcm.delete_topic("T5")
        assert ri.pick_topic_route_json("T5") is None

        ri.unregister_broker(cfg.broker_cluster_name, cfg.broker_addr, cfg.broker_name, 0)  # namesrv forgot us
        tcm.create_topic_if_absent("After", 1)
        assert full_registrations == 1
        assert ri.pick_topic_route_json("T299") is not None and ri.pick_topic_route_json("After") is not None
    finally:
        await registrar.close()


async def test_a_burst_of_changes_costs_one_remote_registration(tmp_path):
    from broker.namesrv.__main__ import NameServer

    server = NameServer("127.0.0.1", 0)
    await server.start()
    try:
        cfg = broker_config(tmp_path)
        tcm = TopicConfigManager(cfg)
        registrar = BrokerRegistrar(cfg, tcm, namesrv_addrs=[f"127.0.0.1:{server.port}"], change_debounce_s=0.2)
        await registrar.start()
        for _ in range(100):
            if server.route_info.pick_topic_route_json("TBW102"):
                break
            await asyncio.sleep(0.02)
        before = registrar.remote_registrations
        for i in range(400):  # larger than INLINE_ENCODE_MAX_TOPICS: encoded in a worker thread
            tcm.create_topic_if_absent(f"Burst{i}", 2)
        for _ in range(200):
            if server.route_info.pick_topic_route_json("Burst399"):
                break
            await asyncio.sleep(0.02)
        assert server.route_info.pick_topic_route_json("Burst0") is not None
        assert server.route_info.pick_topic_route_json("Burst399") is not None
        assert registrar.remote_registrations - before == 1
        # Changes trickling in over 1 s: registered at most once per debounce interval (+ the first).
        before = registrar.remote_registrations
        started = asyncio.get_running_loop().time()
        for i in range(40):
            tcm.create_topic_if_absent(f"Trickle{i}", 1)
            await asyncio.sleep(0.025)
        for _ in range(200):
            if server.route_info.pick_topic_route_json("Trickle39"):
                break
            await asyncio.sleep(0.02)
        assert server.route_info.pick_topic_route_json("Trickle39") is not None
        elapsed = asyncio.get_running_loop().time() - started
        assert 2 <= registrar.remote_registrations - before <= elapsed / 0.2 + 2
        await asyncio.wait_for(registrar.close(), 5)
    finally:
        await server.close()


async def test_a_large_register_broker_body_is_parsed_off_the_loop(tmp_path):
    from broker.namesrv.processor import INLINE_REGISTER_BODY_MAX, NamesrvProcessor

    cfg = broker_config(tmp_path)
    tcm = TopicConfigManager(cfg)
    for i in range(3000):
        tcm.create_topic_if_absent(f"Big{i}", 4)
    cmd = BrokerRegistrar(cfg, tcm, namesrv_addrs=[]).build_register_request()
    assert len(cmd.body) > INLINE_REGISTER_BODY_MAX
    processor = NamesrvProcessor(RouteInfoManager())
    pending = processor.register_broker(None, cmd)
    assert asyncio.iscoroutine(pending)  # the remoting server drives it as a task
    assert (await pending).code == 0
    assert processor.route_info.pick_topic_route_json("Big2999") is not None


# -- persistence -----------------------------------------------------------------------------------
def test_journal_skips_a_torn_record_and_drops_saved_segments(tmp_path):
    journal = ChangeJournal(str(tmp_path / "topics.json"))
    journal.append({"topic": "A"})
    covered = journal.rotate()
    journal.append({"topic": "B"})
    journal.close()
    with open(tmp_path / f"topics.json.journal.{covered + 1}", "ab") as f:
        f.write(b'{"topic": "C", "conf')  # killed mid-write
    assert [r["topic"] for r in journal.read()] == ["A", "B"]
    journal.drop_through(covered)
    assert [r["topic"] for r in journal.read()] == ["B"]


async def test_topic_changes_survive_without_a_write_of_topics_json(tmp_path):
    cfg = broker_config(tmp_path)
    first = TopicConfigManager(cfg)
    first.load()
    first.create_topic_if_absent("Kept", 3)
    first.create_topic_if_absent("Gone", 1)
    first.persist()
    first.delete_topic("Gone")
    first.update_topic(TopicConfig("Fresh", 5, 5, 6))
    # No write since: the crash image has topics.json (with Gone, without Fresh) plus the journal.
    second = TopicConfigManager(cfg)
    assert second.load()
    assert "Gone" not in second.topics and second.get("Fresh").write_queue_nums == 5 and "Kept" in second.topics
    assert second.dirty
    await second.persist_async()  # folds the journal into topics.json
    assert not [n for n in os.listdir(cfg.config_dir) if ".journal." in n]
    with open(os.path.join(cfg.config_dir, "topics.json"), encoding="utf-8") as f:
        assert "Fresh" in json.load(f)["topicConfigTable"]


async def test_an_older_snapshot_never_replaces_a_newer_one(tmp_path):
    groups = SubscriptionGroupManager(str(tmp_path))
    groups.find_or_create("first")
    seq_old, build_old, _ = groups._capture()
    groups.find_or_create("second")
    groups.persist()  # newer snapshot on disk
    assert not groups._save(seq_old, build_old)  # the slower, older write arrives late: skipped
    with open(tmp_path / "subscriptionGroup.json", encoding="utf-8") as f:
        assert "second" in json.load(f)["subscriptionGroupTable"]


async def test_a_slave_without_a_master_registers_again_within_seconds_then_only_each_period(tmp_path, monkeypatch):
    """Issue 28: a slave that registered before its master learns the master's HA address soon after the master
    registers, not a registerNameServerPeriod later; once it knows it, it registers at the period again."""
    import broker.namesrv.registrar as registrar_module

    monkeypatch.setattr(registrar_module, "MASTER_LOOKUP_FIRST_S", 0.05)
    monkeypatch.setattr(registrar_module, "MASTER_LOOKUP_MAX_S", 0.2)
    cfg = broker_config(tmp_path, broker_role="SLAVE", broker_id=1)
    ri = RouteInfoManager()
    registrar = BrokerRegistrar(cfg, TopicConfigManager(cfg), local_route_info=ri, namesrv_addrs=[])
    heard: list[tuple] = []
    registrar.master_listener = lambda ha, addr: heard.append((ha, addr))
    await registrar.start()
    try:
        await asyncio.sleep(0.6)
        assert len(heard) >= 4 and all(ha is None for ha, _ in heard)  # looking: 0, 0.05, 0.15, 0.35, 0.55 s
        ri.register_broker("DefaultCluster", "broker-a", "127.0.0.1:20911", 0, "127.0.0.1:20912", {}, DataVersion())
        await asyncio.sleep(0.3)
        assert heard[-1] == ("127.0.0.1:20912", "127.0.0.1:20911")
        found = len(heard)
        await asyncio.sleep(0.6)
        assert len(heard) == found  # known: the next registration is a period (30 s) away
    finally:
        await registrar.close()
