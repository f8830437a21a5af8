"""Fixtures for the interop tests: the Node.js runtime with ali-ons (remoting) and rocketmq-client-nodejs (gRPC,
the official RocketMQ 5.x Node SDK). The broker comes from tests/conftest.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

NODE_PROJECT = Path(__file__).resolve().parent / "node"
NPM_CI_TIMEOUT_S = 300.0
NODE_PACKAGES = ("ali-ons", "rocketmq-client-nodejs")  # tests/interop/node/package.json


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(reason: str) -> None:
    """In CI a missing interop runtime is a failure (.ci/run installs it); elsewhere a clear skip."""
    if _in_ci():
        pytest.fail(f"{reason} (CI must provide it: see .ci/run)", pytrace=False)
    pytest.skip(reason)


@dataclass
class NodeRuntime:
    node: str
    project_dir: Path

    def script(self, name: str) -> Path:
        return self.project_dir / name


@pytest.fixture(scope="session")
def node_runtime() -> NodeRuntime:
    """`node` plus tests/interop/node/node_modules (installed here with `npm ci` if missing, only when CI is set)."""
    node = shutil.which("node")
    if node is None:
        _unavailable("Node.js is not installed: `apt-get install nodejs npm` (bash .ci/run does it)")
    missing = [p for p in NODE_PACKAGES if not (NODE_PROJECT / "node_modules" / p / "package.json").is_file()]
    if missing:
        if not _in_ci():  # never install packages behind a local user's back
            pytest.skip(f"the Node interop clients {missing} are not installed: run `npm ci` in {NODE_PROJECT} "
                        "(bash .ci/run does it)")
        npm = shutil.which("npm")
        if npm is None:
            _unavailable(f"npm is not installed, cannot install the Node interop clients {missing}")
        try:
            proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_PROJECT, capture_output=True,
                                  text=True, timeout=NPM_CI_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            _unavailable(f"`npm ci` in {NODE_PROJECT} did not finish in {NPM_CI_TIMEOUT_S:.0f} s")
        if proc.returncode != 0:
            _unavailable(f"`npm ci` in {NODE_PROJECT} failed:\n{proc.stderr[-2000:]}")
    return NodeRuntime(node, NODE_PROJECT)
