"""broker.preflight: what start-up checks before it writes anything (issue 31), without starting a broker."""

from __future__ import annotations

import fcntl
import os
import socket

import pytest

from broker.errors import ConfigError
from broker.preflight import PortCheck, check_paths, check_ports, check_store_lock, path_problem
from broker.store.lock import StoreLockedError


def test_a_path_under_a_file_names_the_file_and_creates_nothing(tmp_path):
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    assert path_problem(str(a_file / "a" / "b")) == f"{a_file} is a file, not a directory"
    assert path_problem(str(tmp_path / "new" / "store")) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]
    with pytest.raises(ConfigError) as err:
        check_paths([("storePathRootDir", str(tmp_path / "ok")), ("storePathCommitLog", str(a_file / "cl"))],
                    str(tmp_path / "ok"))
    assert str(err.value) == (f"storePathCommitLog {a_file / 'cl'}: {a_file} is a file, not a directory: point "
                              f"storePathCommitLog at a writable directory")


def test_a_held_lock_is_reported_and_an_absent_one_not_created(tmp_path):
    check_store_lock(str(tmp_path / "absent"))
    assert not (tmp_path / "absent").exists()
    (tmp_path / "lock").write_text("77")
    fd = os.open(tmp_path / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StoreLockedError, match=r"locked by another running broker \(pid 77\)"):
            check_store_lock(str(tmp_path))
    finally:
        os.close(fd)
    check_store_lock(str(tmp_path))  # released: fine, and the file is unchanged
    assert (tmp_path / "lock").read_text() == "77"


def test_ports_busy_shared_or_unresolvable_name_their_key():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"^metricsPort {port} is already in use"):
            check_ports([PortCheck("metricsPort", "127.0.0.1", port)])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    with pytest.raises(ConfigError, match=f"^grpcServerPort {free} is also listenPort"):
        check_ports([PortCheck("listenPort", "127.0.0.1", free), PortCheck("grpcServerPort", "127.0.0.1", free)])
    with pytest.raises(ConfigError, match="cannot resolve 'no.such.host.invalid'"):
        check_ports([PortCheck("listenPort", "no.such.host.invalid", free)])
