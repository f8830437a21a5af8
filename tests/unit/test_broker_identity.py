"""The persistent broker id files of controller mode (controller.md §3)."""

from __future__ import annotations

import pytest

from broker.replicas.identity import (
    BrokerIdentity,
    IdentityError,
    delete_temp,
    load_identity,
    load_temp,
    save_identity,
    save_temp,
)


def test_round_trip_and_formats(tmp_path):
    path = str(tmp_path / "brokerIdentity")
    assert load_identity(path, "C", "b") is None and load_temp(path, "C", "b") is None
    save_temp(path, BrokerIdentity("C", "b", 3, "127.0.0.1:10911;1700000000000"))
    assert (tmp_path / "brokerIdentity-temp").read_text() == "C#b#3#127.0.0.1:10911;1700000000000"
    assert load_temp(path, "C", "b") == BrokerIdentity("C", "b", 3, "127.0.0.1:10911;1700000000000")
    save_identity(path, BrokerIdentity("C", "b", 3))
    delete_temp(path)
    delete_temp(path)  # already gone: fine
    assert (tmp_path / "brokerIdentity").read_text() == "C#b#3"
    assert load_identity(path, "C", "b") == BrokerIdentity("C", "b", 3)


def test_another_brokers_store_is_refused(tmp_path):
    path = str(tmp_path / "brokerIdentity")
    save_identity(path, BrokerIdentity("C", "other", 1))
    with pytest.raises(IdentityError, match="belongs to C/other"):
        load_identity(path, "C", "b")
    (tmp_path / "brokerIdentity").write_text("garbage")
    with pytest.raises(IdentityError, match="expected"):
        load_identity(path, "C", "b")
