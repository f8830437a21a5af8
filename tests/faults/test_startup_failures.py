"""Start-up failures an operator meets: one line on stderr naming the key and what to do, exit code 2, no traceback
(the traceback is only logged at DEBUG)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.broker_process import free_port

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


def test_a_store_path_under_a_file(tmp_path):
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    proc = start_broker(write_conf(tmp_path, storePathRootDir=a_file / "store", listenPort=free_port(),
                                   namesrvListenPort=free_port()))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = mqbroker_lines(proc.stderr)
    assert line.startswith(f"mqbroker: storePathRootDir {a_file / 'store'}: ") and "writable directory" in line


@pytest.mark.parametrize("what", ["missing", "directory"])
def test_an_unreadable_conf(tmp_path, what):
    conf = tmp_path / "nope.conf" if what == "missing" else tmp_path
    proc = start_broker(conf)
    assert proc.returncode == 2
    assert mqbroker_lines(proc.stderr) == [
        f"mqbroker: cannot read {conf}: {'No such file or directory' if what == 'missing' else 'Is a directory'}"]
