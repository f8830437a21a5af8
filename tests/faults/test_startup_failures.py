"""Start-up failures an operator meets: one line on stderr naming the key and what to do, exit code 2, no traceback
(the traceback is only logged at DEBUG)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]


def start_broker(conf: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker", "-c", str(conf), *extra], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def write_conf(tmp_path: Path, **keys) -> Path:
    conf = tmp_path / "broker.conf"
    lines = {"brokerName": "startup-fail", "brokerIP1": "127.0.0.1", "listenHost": "127.0.0.1",
             "storePathRootDir": str(tmp_path / "store"), **keys}
    conf.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return conf


def mqbroker_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("mqbroker:")]


@pytest.mark.parametrize("key", ["listenPort", "namesrvListenPort", "metricsPort"])
def test_a_port_in_use_names_its_key(tmp_path, key):
    ports = {"listenPort": free_port(), "namesrvListenPort": free_port(), "metricsPort": free_port()}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[key]))
        taken.listen()
        proc = start_broker(write_conf(tmp_path, **ports))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = mqbroker_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert f"{key} {ports[key]} is already in use" in lines[0] and f"set another {key}" in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "boot success" not in proc.stdout
    assert not (tmp_path / "store" / "config" / "brokerName.json").exists()  # written only by a broker that started


def test_the_traceback_is_there_at_debug(tmp_path):
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        proc = start_broker(write_conf(tmp_path, listenPort=port, namesrvListenPort=free_port()), "-l", "DEBUG")
    assert proc.returncode == 2
    assert f"listenPort {port} is already in use" in proc.stderr


def test_a_store_path_that_is_a_file(tmp_path):
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    proc = start_broker(write_conf(tmp_path, storePathRootDir=a_file, listenPort=free_port(),
                                   namesrvListenPort=free_port()))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = mqbroker_lines(proc.stderr)
    assert lines == [f"mqbroker: storePathRootDir {a_file}: {a_file} is a file, not a directory: point "
                     f"storePathRootDir at a writable directory"], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("depth", [1, 3])
def test_a_store_path_under_a_file_names_the_file(tmp_path, depth):
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    store = a_file.joinpath(*["sub"] * (depth - 1), "store")
    proc = start_broker(write_conf(tmp_path, storePathRootDir=store, listenPort=free_port(),
                                   namesrvListenPort=free_port()))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = mqbroker_lines(proc.stderr)
    assert line == (f"mqbroker: storePathRootDir {store}: {a_file} is a file, not a directory: point "
                    f"storePathRootDir at a writable directory")
    assert a_file.read_text() == "x"


def test_a_commit_log_path_under_a_file_is_refused_before_the_store_is_made(tmp_path):
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    proc = start_broker(write_conf(tmp_path, storePathCommitLog=a_file / "commitlog", listenPort=free_port(),
                                   namesrvListenPort=free_port()))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert mqbroker_lines(proc.stderr) == [
        f"mqbroker: storePathCommitLog {a_file / 'commitlog'}: {a_file} is a file, not a directory: point "
        f"storePathCommitLog at a writable directory"]
    assert not (tmp_path / "store").exists()


# ---- issue 31: a failed start writes nothing ---------------------------------------------------------
def snapshot(root: Path) -> dict[str, tuple[bytes, int]] | None:
    """Every file under root with its bytes and mtime (None when root is absent)."""
    if not root.exists():
        return None
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"<dir>", p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("key", ["listenPort", "namesrvListenPort", "metricsPort", "dashboardPort",
                                 "grpcServerPort", "haListenPort"])
def test_a_busy_port_leaves_a_new_store_absent(tmp_path, key):
    ports = {k: free_port() for k in ("listenPort", "namesrvListenPort", "metricsPort", "dashboardPort",
                                      "grpcServerPort", "haListenPort")}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[key]))
        taken.listen()
        proc = start_broker(write_conf(tmp_path, enableGrpcProxy="true", **ports))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = mqbroker_lines(proc.stderr)
    assert f"{key} {ports[key]} is already in use" in line
    assert snapshot(tmp_path / "store") is None  # no lock, checkpoint or config/ either


def test_a_busy_port_leaves_an_existing_store_byte_identical(tmp_path):
    broker = BrokerProcess(tmp_path, "pf").start()
    broker.stop()
    before = snapshot(broker.store_dir)
    assert before and "checkpoint" in before and "lock" in before
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", broker.port))
        taken.listen()
        proc = start_broker(broker.conf_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"listenPort {broker.port} is already in use" in mqbroker_lines(proc.stderr)[0]
    assert snapshot(broker.store_dir) == before


def test_a_locked_store_is_left_byte_identical(tmp_path):
    import fcntl
    import os

    broker = BrokerProcess(tmp_path, "pf").start()
    broker.stop()
    lock = broker.store_dir / "lock"
    lock.write_text("4242")
    before = snapshot(broker.store_dir)
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running broker holds it
        proc = start_broker(broker.conf_path)
    finally:
        os.close(fd)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert mqbroker_lines(proc.stderr) == [f"mqbroker: store directory {broker.store_dir} is locked by another "
                                           f"running broker (pid 4242); refusing to start"]
    assert snapshot(broker.store_dir) == before


@pytest.mark.parametrize("what", ["missing", "directory"])
def test_an_unreadable_conf(tmp_path, what):
    conf = tmp_path / "nope.conf" if what == "missing" else tmp_path
    proc = start_broker(conf)
    assert proc.returncode == 2
    assert mqbroker_lines(proc.stderr) == [
        f"mqbroker: cannot read {conf}: {'No such file or directory' if what == 'missing' else 'Is a directory'}"]
