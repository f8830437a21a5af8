"""The console's Replication page (issue 28) against real processes: a controller-mode group of two brokers shows
its replicas, master, epoch and SyncStateSet as the controller knows them, and after kill -9 of the master the
survivor's console shows itself elected in a higher epoch (API and page in headless Chromium). A classic broker says
controller mode is off and lists its HA links; with ACL on only admin accounts see the page."""

from __future__ import annotations

import asyncio

import pytest
from tests.support.broker_process import BrokerProcess, free_port

from protocol.codes import RequestCode, ResponseCode

from tests.support.console import http, open_page, start_browser
from tests.support.controller_cluster import FailoverCluster
from tests.support.acl import write_acl
from tests.support.wire import WireClient, create_topic, props, send_v2_fields, wait_until


@pytest.fixture
def cluster(tmp_path):
    made = FailoverCluster(tmp_path, 2)
    for b in made.brokers:  # the console of each replica on a port of its own (later keys win)
        b.console = f"http://127.0.0.1:{free_port()}"
        with b.conf_path.open("a") as conf:
            conf.write(f"dashboardPort={b.console.rsplit(':', 1)[1]}\n")
    yield made
    made.stop()


async def _replication(base: str) -> dict:
    status, answer, _ = await asyncio.to_thread(http, base, "/api/replication")
    assert status == 200, answer
    return answer


async def _state_where(base: str, check) -> dict | None:
    answer = await _replication(base)
    return answer if check(answer) else None


def _full_set(answer: dict) -> bool:
    group = answer["group"]
    return bool(group) and group["syncStateSet"] == [1, 2] and answer["local"]["role"] in ("SYNC_MASTER", "SLAVE")


async def test_replication_page_shows_the_group_and_follows_a_failover(cluster, tmp_path_factory):
    first, second = cluster.brokers
    first.start()
    await wait_until(cluster.master_addr, "a master in the routes", timeout=30)
    second.start()
    state = await wait_until(lambda: _state_where(first.console, _full_set), "both replicas in the SyncStateSet",
                             timeout=40)
    group, local = state["group"], state["local"]
    assert state["controllerMode"] is True and state["controllerProblem"] is None
    assert (state["clusterName"], state["brokerName"]) == ("FailCluster", "broker-f")
    assert (group["masterBrokerId"], group["masterAddress"], group["masterEpoch"]) == (1, first.addr, 1)
    assert group["syncStateSetEpoch"] >= 2  # the master alone first, then the slave joined
    assert [(r["brokerId"], r["address"], r["alive"], r["inSync"], r["master"]) for r in group["replicas"]] == [
        (1, first.addr, True, True, True), (2, second.addr, True, True, False)]
    assert (local["controllerId"], local["role"], local["registered"]) == (1, "SYNC_MASTER", True)
    assert local["activeController"] == cluster.controller.addr
    assert [(e["epoch"], e["startOffset"]) for e in local["epochs"]] == [(1, 0)]
    assert local["confirmOffset"] <= local["maxOffset"]
    slave = await wait_until(lambda: _state_where(second.console, _full_set), "the slave's view", timeout=20)
    assert (slave["local"]["controllerId"], slave["local"]["role"]) == (2, "SLAVE")
    assert slave["group"]["masterBrokerId"] == 1 and slave["local"]["masterAddress"] == first.addr

    # a few messages in epoch 1, copied to the slave (its console shows the same end)
    await create_topic(first.addr, "ReplTopic", 1)
    async with await WireClient.connect(first.addr) as client:
        for i in range(5):
            resp = await client.request(RequestCode.SEND_MESSAGE_V2,
                                        send_v2_fields("ReplTopic", 0, props(UNIQ_KEY=f"R{i}")), b"r" * 100)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
    end = (await _replication(first.console))["local"]["maxOffset"]
    assert end > 0
    await wait_until(lambda: _state_where(second.console, lambda a: a["local"]["maxOffset"] == end),
                     "the slave caught up", timeout=20)

    # kill -9 of the master: the survivor is elected in epoch 2 and its console says so
    await cluster.controller.past_grace()
    first.kill()
    after = await wait_until(lambda: _state_where(second.console, lambda a: bool(a["group"])
                                                  and a["group"]["masterBrokerId"] == 2
                                                  and a["local"]["role"] == "SYNC_MASTER"),
                             "the survivor elected", timeout=40)
    group, local = after["group"], after["local"]
    assert (group["masterAddress"], group["masterEpoch"]) == (second.addr, 2)
    assert group["syncStateSet"] == [2]
    assert [(r["brokerId"], r["alive"], r["inSync"], r["master"]) for r in group["replicas"]] == [
        (1, False, False, False), (2, True, True, True)]
    assert [(e["epoch"], e["startOffset"]) for e in local["epochs"]] == [(1, 0), (2, end)]
    assert local["actedMasterEpoch"] == 2 and local["maxOffset"] == end

    # the page renders those values
    from selenium.webdriver.common.by import By

    chrome = start_browser(tmp_path_factory.mktemp("chromium"))  # a short path: Chromium's socket lives there
    try:
        text = open_page(chrome, second.console, "/replication")
        value = lambda element_id: chrome.find_element(By.ID, element_id).text
        assert (value("rep-epoch"), value("rep-sync-set"), value("rep-role")) == ("2", "{2}", "SYNC_MASTER")
        assert value("rep-master") == f"2 ({second.addr})" and value("rep-own-id") == "2"
        rows = [row.text for row in chrome.find_elements(By.CSS_SELECTOR, "#rep-replicas tbody tr")]
        assert rows == [f"1 {first.addr} slave no no", f"2 {second.addr} master yes yes"], rows
        epochs = [row.text.split()[0] for row in chrome.find_elements(By.CSS_SELECTOR, "#rep-epochs tbody tr")]
        assert epochs == ["1", "2"] and "Replication" in text

        # no controller: the page still answers with what this broker knows, and says why the group is missing
        cluster.controller.stop()
        alone = await _replication(second.console)
        assert alone["group"] is None and "no controller answered" in alone["controllerProblem"], alone
        assert alone["local"]["role"] == "SYNC_MASTER" and alone["local"]["actedMasterEpoch"] == 2
        chrome.get("about:blank")
        open_page(chrome, second.console, "/replication")
        assert "no controller answered" in value("rep-problem") and value("rep-role") == "SYNC_MASTER"
    finally:
        chrome.quit()


async def test_a_classic_broker_says_controller_mode_is_off_and_only_admins_see_it(broker_factory, tmp_path):
    write_acl(tmp_path / "plain_acl.yml")
    port = free_port()
    broker_factory(extra={"aclEnable": "true", "dashboardPort": port})
    base = f"http://127.0.0.1:{port}"
    status, answer, _ = await asyncio.to_thread(http, base, "/api/replication")
    assert status == 401
    _, _, app = await asyncio.to_thread(http, base, "/api/login", {"accessKey": "app_key01",
                                                                   "secretKey": "app_secret01"})
    status, answer, _ = await asyncio.to_thread(http, base, "/api/replication", cookie=app)
    assert status == 403 and "Need admin permission for the replication state" in answer["error"], answer
    _, _, admin = await asyncio.to_thread(http, base, "/api/login", {"accessKey": "broker_admin",
                                                                     "secretKey": "admin-secret-1"})
    status, answer, _ = await asyncio.to_thread(http, base, "/api/replication", cookie=admin)
    assert status == 200, answer
    assert answer["controllerMode"] is False and answer["role"] == "ASYNC_MASTER"
    assert answer["slaves"] == [] and answer["master"] is None and answer["maxOffset"] >= 0


async def test_a_classic_pair_shows_the_masters_slaves_and_the_slaves_master(broker_factory, tmp_path):
    ha_port, master_port, slave_port = free_port(), free_port(), free_port()
    common = {"brokerClusterName": "ClassicCluster"}
    master = broker_factory("broker-c", embedded_namesrv=False,
                            extra={**common, "haListenPort": ha_port, "dashboardPort": master_port})
    (tmp_path / "slave").mkdir()
    slave = BrokerProcess(tmp_path / "slave", "broker-c", embedded_namesrv=False,
                          extra={**common, "brokerRole": "SLAVE", "brokerId": 1, "dashboardPort": slave_port,
                                 "haMasterAddress": f"127.0.0.1:{ha_port}"}).start()
    try:
        seen = await wait_until(lambda: _state_where(f"http://127.0.0.1:{master_port}", lambda a: a["slaves"]),
                                "the slave's HA connection on the master's page", timeout=20)
        assert seen["controllerMode"] is False and seen["role"] == "ASYNC_MASTER" and seen["master"] is None
        assert len(seen["slaves"]) == 1 and seen["slaves"][0]["address"].startswith("127.0.0.1:")
        follower = await wait_until(lambda: _state_where(f"http://127.0.0.1:{slave_port}",
                                                         lambda a: a["master"]["connected"]),
                                    "the slave connected to its master", timeout=20)
        assert follower["role"] == "SLAVE" and follower["slaves"] == []
        assert follower["master"]["haAddress"] == f"127.0.0.1:{ha_port}"
    finally:
        slave.stop()
    assert master.proc.poll() is None
