"""broker.conf parsing and BrokerConfig validation."""

from __future__ import annotations

import logging
import os

import pytest

from broker.config import (
    BrokerConfig,
    ConfigError,
    key_to_attr,
    load_broker_config,
    parse_delay_levels,
    parse_properties,
)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(tmp_path, text: str) -> str:
    path = tmp_path / "broker.conf"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_defaults_follow_rocketmq(monkeypatch):
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    cfg = BrokerConfig(store_path_root_dir="/tmp/x")
    assert cfg.listen_port == 10911
    assert cfg.broker_cluster_name == "DefaultCluster"
    assert cfg.broker_id == 0
    assert cfg.namesrv_addr is None
    assert cfg.mapped_file_size_commit_log == 1073741824
    assert cfg.mapped_file_size_consume_queue == 6_000_000
    assert cfg.flush_disk_type == "ASYNC_FLUSH"
    assert cfg.default_topic_queue_nums == 8
    assert cfg.auto_create_topic_enable and cfg.auto_create_subscription_group
    assert cfg.enable_embedded_namesrv and cfg.namesrv_listen_port == 9876
    assert cfg.frame_max_length == 16777216
    assert cfg.listen_host == "0.0.0.0" and cfg.metrics_port == 0
    assert cfg.commit_log_dir == "/tmp/x/commitlog"
    assert cfg.config_dir == "/tmp/x/config"
    assert cfg.ha_port == 10912
    assert cfg.broker_ip1 and cfg.broker_addr == f"{cfg.broker_ip1}:10911"
    assert len(cfg.delay_levels_ms()) == 18
    assert cfg.delay_levels_ms()[0] == 1000 and cfg.delay_levels_ms()[-1] == 7_200_000


def test_namesrv_addr_from_environment(monkeypatch):
    monkeypatch.setenv("NAMESRV_ADDR", "10.0.0.1:9876;10.0.0.2:9876")
    cfg = BrokerConfig(store_path_root_dir="/tmp/x")
    assert cfg.namesrv_addr_list == ["10.0.0.1:9876", "10.0.0.2:9876"]


def test_key_names_map_to_snake_case():
    assert key_to_attr("brokerIP1") == "broker_ip1"
    assert key_to_attr("mappedFileSizeCommitLog") == "mapped_file_size_commit_log"
    keys = BrokerConfig.keys()
    for key in ("brokerIP1", "storePathCommitLog", "shortPollingTimeMills", "enableEmbeddedNamesrv",
                "flushConsumerOffsetInterval", "registerNameServerPeriod", "enabledAppendPropCRC"):
        assert key in keys


def test_good_file(tmp_path, caplog):
    path = write(
        tmp_path,
        """# comment
! another comment
brokerClusterName = MyCluster
brokerName:broker-b
brokerId 0
brokerIP1=127.0.0.1
listenPort=20911
storePathRootDir=./store
mappedFileSizeCommitLog=10485760
mappedFileSizeConsumeQueue=1001
flushDiskType=SYNC_FLUSH
autoCreateTopicEnable=FALSE
messageDelayLevel=1s 5s 100ms 1d
deleteWhen=04;16
namesrvAddr=127.0.0.1:9876
""",
    )
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with caplog.at_level(logging.WARNING):
            cfg = load_broker_config(path)
    finally:
        os.chdir(cwd)
    assert not caplog.records
    assert cfg.broker_cluster_name == "MyCluster"
    assert cfg.broker_name == "broker-b"
    assert cfg.listen_port == 20911
    assert cfg.broker_addr == "127.0.0.1:20911"
    assert cfg.store_path_root_dir == os.path.join(str(tmp_path), "store")
    assert cfg.mapped_file_size_commit_log == 10485760
    assert cfg.mapped_file_size_consume_queue == 1020  # rounded up to whole 20-byte units
    assert cfg.flush_disk_type == "SYNC_FLUSH"
    assert cfg.auto_create_topic_enable is False
    assert cfg.delay_levels_ms() == [1000, 5000, 100, 86_400_000]
    assert cfg.namesrv_addr_list == ["127.0.0.1:9876"]


def test_sample_conf_loads():
    cfg = load_broker_config(os.path.join(REPO_ROOT, "conf", "broker.conf"))
    assert cfg.broker_name == "broker-a"
    assert cfg.default_topic_queue_nums == 4
    assert cfg.broker_ip1 == "127.0.0.1"
    assert cfg.enable_embedded_namesrv


def test_a_reference_key_this_broker_lacks_warns_once_naming_it_unsupported(tmp_path, caplog):
    path = write(tmp_path, "listenPort=10911\nsendMessageThreadPoolNums=16\nhaSendHeartbeatInterval=5000\n")
    with caplog.at_level(logging.WARNING):
        cfg = load_broker_config(path)
    assert cfg.listen_port == 10911
    lines = [r.getMessage() for r in caplog.records if "sendMessageThreadPoolNums" in r.getMessage()]
    assert len(lines) == 1 and "line 2" in lines[0] and "not support" in lines[0]
    assert any("haSendHeartbeatInterval" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("line, suggestion", [
    ("listenPrt=50921", "did you mean listenPort?"),
    ("storePathRootDr=/x", "did you mean storePathRootDir?"),
    ("brokerip1=127.0.0.1", "did you mean brokerIP1?"),  # keys are case-sensitive, as in RocketMQ
    ("transientStorePoolEnabl=true", "did you mean transientStorePoolEnable (a RocketMQ key this broker does not"),
])
def test_a_key_unknown_to_both_brokers_is_refused_naming_the_nearest_key(tmp_path, line, suggestion):
    path = write(tmp_path, f"brokerName=a\n{line}\n")
    with pytest.raises(ConfigError) as err:
        load_broker_config(path)
    name = line.split("=")[0]
    assert str(err.value).startswith(f"unknown key '{name}' in broker.conf line 2: ")
    assert suggestion in str(err.value) and "\n" not in str(err.value)


def test_the_reference_key_list_ships_as_package_data_and_covers_the_table():
    from broker.config import BY_KEY
    from broker.config.reference import reference_keys

    keys = reference_keys()
    assert {"brokerClusterName", "listenPort", "storePathRootDir", "haSendHeartbeatInterval", "authenticationEnabled",
            "controllerStorePath", "clientWorkerThreads"} <= keys
    assert "listenPrt" not in keys
    shared = set(BY_KEY) & keys
    assert len(shared) > 60  # most of this broker's keys are the reference's (the rest are its own additions)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("brokerName=a\nlistenPort=abc\n", "broker.conf line 2: key 'listenPort': expected an integer, got 'abc'"),
        ("autoCreateTopicEnable=yes\n", "line 1: key 'autoCreateTopicEnable': expected true or false"),
        ("\n\nflushDiskType=FAST\n", "line 3: key 'flushDiskType'"),
        ("listenPort=70000\n", "line 1: key 'listenPort': expected a TCP port"),
        ("mappedFileSizeCommitLog=0\n", "key 'mappedFileSizeCommitLog': must be greater than 0"),
        ("messageDelayLevel=1s 5x\n", "key 'messageDelayLevel'"),
        ("deleteWhen=25\n", "key 'deleteWhen'"),
        ("brokerRole=MASTER\n", "key 'brokerRole'"),
        ("timerMaxDelaySec=0\n", "key 'timerMaxDelaySec': must be greater than 0"),
        ("minInvisibleTimeMillsForRecv=-1\n", "key 'minInvisibleTimeMillsForRecv'"),
        ("grpcClientConsumerMinLongPollingTimeoutMillis=30000\n",
         "key 'grpcClientConsumerMinLongPollingTimeoutMillis': must not exceed"),
        ("renewAheadTimeMillis=60000\n", "key 'renewAheadTimeMillis': must be less than defaultInvisibleTimeMills"),
    ],
)
def test_malformed_values_name_key_and_line(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_broker_config(path)
    assert fragment in str(info.value)


def test_overrides_win_and_are_checked(tmp_path):
    path = write(tmp_path, "listenPort=10911\n")
    cfg = load_broker_config(path, {"listenPort": "10999", "namesrv_addr": "1.2.3.4:9876"})
    assert cfg.listen_port == 10999 and cfg.namesrv_addr == "1.2.3.4:9876"
    with pytest.raises(ConfigError, match="override: key 'listenPort'"):
        load_broker_config(path, {"listenPort": "x"})


def test_escapes_and_continuations():
    text = (
        "a=one \\\n    two\\\n three\n"
        "b = tab\\there\n"
        "c=\\u0041\\u00e9\n"
        "key\\ with\\ spaces = v  \n"
        "d=trailing\\ \n"
        "e\n"
        "f:=x\n"
        "  # indented comment\n"
        "g=ends with backslash\\\\\n"
    )
    entries = {k: v for _, k, v in parse_properties(text)}
    assert entries["a"] == "one twothree"  # continuation drops the next line's leading whitespace only
    assert entries["b"] == "tab\there"
    assert entries["c"] == "A\u00e9"
    assert entries["key with spaces"] == "v"
    assert entries["d"] == "trailing "
    assert entries["e"] == ""
    assert entries["f"] == "=x"
    assert entries["g"] == "ends with backslash\\"
    assert "# indented comment" not in entries


def test_line_numbers_of_continued_entries():
    entries = parse_properties("a=1\\\n2\nb=3\n")
    assert entries == [(1, "a", "12"), (3, "b", "3")]


def test_bad_unicode_escape(tmp_path):
    with pytest.raises(ConfigError, match="line 1"):
        load_broker_config(write(tmp_path, "brokerName=\\u00zz\n"))


def test_delay_levels():
    assert parse_delay_levels("1s 1m 1h 1d 5ms") == [1000, 60000, 3600000, 86400000, 5]
    with pytest.raises(ValueError):
        parse_delay_levels("1 s")
    with pytest.raises(ValueError):
        parse_delay_levels("")


def test_slave_keeps_id_master_forced_to_zero():
    assert BrokerConfig(store_path_root_dir="/tmp/x", broker_id=3).broker_id == 0
    assert BrokerConfig(store_path_root_dir="/tmp/x", broker_id=3, broker_role="SLAVE").broker_id == 3


def test_to_properties_round_trip(tmp_path):
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path), broker_name="b1", broker_ip1="127.0.0.1")
    props = cfg.to_properties()
    assert props["brokerName"] == "b1" and props["listenPort"] == "10911" and props["autoCreateTopicEnable"] == "true"
    text = "".join(f"{k}={v}\n" for k, v in props.items())
    again = load_broker_config(write(tmp_path, text))
    assert again == cfg


def test_to_store_config(tmp_path):
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path), broker_ip1="127.0.0.1", listen_port=10911)
    store = cfg.to_store_config()
    assert store.root_dir == str(tmp_path)
    assert store.mapped_file_size_commit_log == 1073741824
    assert store.flush_interval_commit_log_ms == 500 and store.delete_when == "04"
    assert store.store_host == bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")
    assert store.max_transfer_bytes_on_message_in_memory == 256 * 1024


def test_pull_answer_cap_from_broker_conf(tmp_path):
    text = f"storePathRootDir={tmp_path}\nmaxTransferBytesOnMessageInMemory=1048576\n"
    assert load_broker_config(write(tmp_path, text)).to_store_config().max_transfer_bytes_on_message_in_memory == 1 << 20
    with pytest.raises(ConfigError, match="maxTransferBytesOnMessageInMemory"):
        load_broker_config(write(tmp_path, f"storePathRootDir={tmp_path}\nmaxTransferBytesOnMessageInMemory=0\n"))


def test_acl_file_defaults_beside_the_conf_and_relative_paths_follow_it(tmp_path):
    conf = tmp_path / "conf" / "broker.conf"
    conf.parent.mkdir()
    conf.write_text(f"storePathRootDir={tmp_path}/store\naclEnable=true\n")
    assert load_broker_config(conf).acl_file == str(tmp_path / "conf" / "plain_acl.yml")
    conf.write_text(f"storePathRootDir={tmp_path}/store\naclEnable=true\naclFile=acl/accounts.yml\n")
    assert load_broker_config(conf).acl_file == str(tmp_path / "conf" / "acl" / "accounts.yml")


def test_secret_key_is_never_listed_and_needs_its_access_key(tmp_path):
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path), access_key="broker_admin", secret_key="admin-secret-1")
    assert cfg.to_properties()["accessKey"] == "broker_admin" and "secretKey" not in cfg.to_properties()
    with pytest.raises(ConfigError, match="set both or neither"):
        BrokerConfig(store_path_root_dir=str(tmp_path), secret_key="admin-secret-1")
