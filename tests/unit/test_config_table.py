"""The broker.conf key table (broker/config): one entry per key, and every conversion derived from it drops nothing.

The message store, the connection guard, the TLS settings and the embedded controller take their settings from
``BrokerConfig``; these tests fail when a key is added to one side only.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from broker.config import BY_ATTR, BY_KEY, CONCERNS, TABLE, BrokerConfig, key_to_attr, load_broker_config
from broker.config.entry import Key, key
from broker.config.model import store_config_values
from broker.config.table import _join
from broker.connection_guard import ConnectionLimits
from broker.controller.config import CONTROLLER_KEYS, ControllerConfig
from broker.store.types import StoreConfig
from broker.tls import TLS_KEYS

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# StoreConfig fields the broker fills from several keys (model.store_config_values), not from one table entry.
DERIVED_STORE_FIELDS = {"replica", "commit_log_dir", "store_host"}
# StoreConfig fields that are the store's own tuning, with no broker.conf key: the store's default applies.
STORE_INTERNAL_FIELDS = {"flush_interval_consume_queue_ms", "disk_check_interval_ms", "delete_files_batch_max"}


def test_dataclass_fields_are_the_table():
    assert [f.name for f in dataclasses.fields(BrokerConfig)] == [entry.attr for entry in TABLE]
    assert BrokerConfig.keys() == {entry.name: entry.attr for entry in TABLE}
    for entry in TABLE:
        assert key_to_attr(entry.name) == entry.attr
        assert entry.concern in CONCERNS
    assert {entry.concern for entry in TABLE} == set(CONCERNS)


def test_every_store_key_is_mapped_or_says_why_not():
    store_fields = {f.name for f in dataclasses.fields(StoreConfig)}
    fed = [entry.store for entry in TABLE if entry.store]
    assert len(fed) == len(set(fed)), "two keys feed one StoreConfig field"
    assert set(fed) <= store_fields, f"no such StoreConfig field: {set(fed) - store_fields}"
    for entry in TABLE:
        if entry.concern == "store":
            assert entry.store or entry.not_for_store, entry.name
    unfed = store_fields - set(fed) - DERIVED_STORE_FIELDS - STORE_INTERNAL_FIELDS
    assert not unfed, f"StoreConfig fields no broker.conf key feeds (map them in keys_store.py): {unfed}"


def test_a_store_key_without_a_mapping_is_refused():
    stray = key("someNewStoreKnob", int, 1, concern="store")
    with pytest.raises(ValueError, match="someNewStoreKnob"):
        _join([(stray,)])
    with pytest.raises(ValueError, match="listed twice"):
        _join([(TABLE[0],), (TABLE[0],)])


def test_to_store_config_refuses_a_field_the_store_lacks(tmp_path, monkeypatch):
    """The old hand-written mapping filtered out fields StoreConfig did not accept (debug log only)."""
    import broker.config.model as model

    wrong = dataclasses.replace(BY_KEY["maxMessageSize"], store="max_msg_size")
    monkeypatch.setattr(model, "TABLE", tuple(wrong if e.name == "maxMessageSize" else e for e in TABLE))
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path))
    with pytest.raises(TypeError, match="max_msg_size"):
        cfg.to_store_config()


def _non_default(entry: Key):
    if entry.type is bool:
        return not entry.default
    if entry.name == "messageDelayLevel":
        return "1s 2s"
    if entry.name == "deleteWhen":
        return "01;13"
    if entry.name == "flushDiskType":
        return "SYNC_FLUSH"
    if entry.type is int:
        return entry.default + 1 if entry.name not in ("diskMaxUsedSpaceRatio",) else 80
    return entry.default


def test_each_mapped_key_reaches_the_store(tmp_path):
    overrides = {"storePathRootDir": str(tmp_path / "root"), "storePathCommitLog": str(tmp_path / "log"),
                 "brokerIP1": "10.1.2.3", "listenPort": "20911", "brokerRole": "SLAVE", "brokerId": "1"}
    for entry in TABLE:
        if entry.store and entry.name not in overrides:
            overrides[entry.name] = _non_default(entry)
    cfg = load_broker_config(None, overrides)
    store = cfg.to_store_config()
    for entry in TABLE:
        if entry.store:
            assert getattr(store, entry.store) == getattr(cfg, entry.attr), entry.name
    assert store.root_dir == str(tmp_path / "root") and store.commit_log_dir == str(tmp_path / "log")
    assert store.replica is True and store.flush_disk_type == "SYNC_FLUSH"
    assert store.store_host == bytes([10, 1, 2, 3]) + (20911).to_bytes(4, "big")
    assert set(store_config_values(cfg)) == {e.store for e in TABLE if e.store} | DERIVED_STORE_FIELDS


def test_connection_limits_and_controller_keys_are_table_keys(tmp_path):
    """ConnectionLimits.from_config and ControllerConfig.from_object skip attributes BrokerConfig lacks."""
    for f in dataclasses.fields(ConnectionLimits):
        assert f.name in BY_ATTR and BY_ATTR[f.name].default == f.default, f.name
    for name, attr in CONTROLLER_KEYS.items():
        assert BY_KEY[name].attr == attr
        assert BY_KEY[name].default == getattr(ControllerConfig(), attr), name
    assert set(TLS_KEYS) <= set(BY_KEY)
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path), server_max_connections=77, write_buffer_low_water_mark=5,
                       scan_inactive_master_interval=1234)
    limits = ConnectionLimits.from_config(cfg)
    assert limits.server_max_connections == 77 and limits.write_buffer_low_water_mark == 5
    assert ControllerConfig.from_object(cfg).scan_inactive_master_interval == 1234


def test_every_key_round_trips_through_properties(tmp_path):
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path), broker_ip1="127.0.0.1", access_key="ak", secret_key="sk",
                       tls_enable=False, ha_listen_port=20000, dashboard_port=0, grpc_server_port=0,
                       namesrv_addr="127.0.0.1:9876", acl_file=str(tmp_path / "acl.yml"), broker_ip2="127.0.0.2",
                       ha_master_address="127.0.0.1:1", slave_timeout=3, tls_server_cert_path="c.pem",
                       tls_server_key_path="k.pem", tls_server_trust_cert_path="t.pem",
                       store_path_commit_log=str(tmp_path / "log"), store_path_epoch_file="e",
                       store_path_broker_identity="i")
    props = cfg.to_properties()
    assert set(props) == set(BY_KEY) - {"secretKey"}


def test_sample_conf_uses_only_table_keys():
    from broker.config import parse_properties

    with open(os.path.join(REPO_ROOT, "conf", "broker.conf"), encoding="utf-8") as handle:
        names = [name for _, name, _ in parse_properties(handle.read())]
    assert names and not set(names) - set(BY_KEY)
