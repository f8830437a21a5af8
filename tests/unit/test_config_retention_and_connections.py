"""Project keys added for issue 2: retention cadence, disk thresholds, idle timeout, VIP channel."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, load_broker_config


def test_store_thresholds_and_intervals_reach_the_store(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"storePathRootDir={tmp_path}\ncleanResourceInterval=250\ndiskSpaceWarningLevelRatio=93\n"
        "diskSpaceCleanForciblyRatio=80\ndeleteWhen=01;13\nfileReservedTime=5\n"
        "serverChannelMaxIdleTimeSeconds=7\nenableVipChannel=false\n")
    config = load_broker_config(conf)
    store = config.to_store_config()
    assert store.clean_resource_interval_ms == 250
    assert store.disk_space_warning_level_ratio == 93 and store.disk_space_clean_forcibly_ratio == 80
    assert store.delete_hours() == {1, 13} and store.file_reserved_time_hours == 5
    assert config.server_channel_max_idle_time_seconds == 7 and config.enable_vip_channel is False


def test_defaults_match_rocketmq(tmp_path):
    config = load_broker_config(None, {"storePathRootDir": str(tmp_path)})
    assert config.clean_resource_interval == 10_000
    assert config.server_channel_max_idle_time_seconds == 120
    assert config.disk_space_warning_level_ratio == 90 and config.enable_vip_channel is True


@pytest.mark.parametrize("line, key", [("diskSpaceWarningLevelRatio=0", "diskSpaceWarningLevelRatio"),
                                       ("cleanResourceInterval=-1", "cleanResourceInterval"),
                                       ("serverChannelMaxIdleTimeSeconds=0", "serverChannelMaxIdleTimeSeconds")])
def test_bad_values_name_the_key(tmp_path, line, key):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path}\n{line}\n")
    with pytest.raises(ConfigError) as info:
        load_broker_config(conf)
    assert key in str(info.value)
