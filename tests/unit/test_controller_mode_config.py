"""Controller-mode broker keys (issue 28, broker side): defaults off, a bad value stops start-up naming its key."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig, ConfigError, load_broker_config


def test_off_by_default_and_classic_roles_untouched():
    cfg = BrokerConfig(broker_role="SLAVE", broker_id=2)
    assert not cfg.enable_controller_mode and (cfg.broker_role, cfg.broker_id) == ("SLAVE", 2)
    assert (cfg.all_ack_in_sync_state_set, cfg.in_sync_replicas, cfg.min_in_sync_replicas) == (False, 1, 1)
    assert cfg.ha_max_time_slave_not_catchup == 15000 and cfg.broker_election_priority == 2**31 - 1


def test_controller_mode_needs_no_role_or_id(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"enableControllerMode=true\ncontrollerAddr=127.0.0.1:9878;127.0.0.1:9868\n"
                    f"storePathRootDir={tmp_path}/store\nallAckInSyncStateSet=true\nminInSyncReplicas=2\n")
    cfg = load_broker_config(str(conf))
    assert cfg.controller_addrs == ["127.0.0.1:9878", "127.0.0.1:9868"]
    assert (cfg.broker_role, cfg.broker_id) == ("SLAVE", -1)  # fenced until the controller decides
    assert cfg.epoch_file_path == f"{tmp_path}/store/epochFileCheckpoint"
    assert cfg.broker_identity_path == f"{tmp_path}/store/brokerIdentity"


@pytest.mark.parametrize("extra, key", [
    ({}, "controllerAddr"),
    ({"controller_addr": "localhost"}, "controllerAddr"),
    ({"controller_addr": "h:99999"}, "controllerAddr"),
    ({"controller_addr": "h:1", "min_in_sync_replicas": 0}, "minInSyncReplicas"),
    ({"controller_addr": "h:1", "broker_heartbeat_interval": 20000}, "brokerHeartbeatInterval"),
    ({"controller_addr": "h:1", "ha_max_time_slave_not_catchup": -1}, "haMaxTimeSlaveNotCatchup"),
])
def test_bad_values_name_their_key(extra, key):
    with pytest.raises(ConfigError) as info:
        BrokerConfig(enable_controller_mode=True, **extra)
    assert info.value.key == key
