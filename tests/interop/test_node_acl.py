"""Interop: ali-ons (pure JavaScript) with accessKey/secretKey against the broker with plain ACL on.

ali-ons signs every request itself (adding OnsChannel=ALIYUN, numbers and booleans as JSON types): the broker must
verify those signatures, so produce and consume work with the right account, and a wrong secret is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.interop

NODE_TIMEOUT_S = 120
PROJECT_ROOT = Path(__file__).resolve().parents[2]
ACL_YAML = """
accounts:
  - accessKey: ops_admin_01
    secretKey: "0p5-s3cret"
    admin: true
  - accessKey: node_app01
    secretKey: node-secret-1
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - NodeAclTopic=PUB|SUB
"""


@pytest.fixture
def acl_broker(broker_factory, tmp_path):
    (tmp_path / "plain_acl.yml").write_text(ACL_YAML)
    broker = broker_factory(extra={"aclEnable": "true"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_")}
    env.update(PYTHONPATH=str(PROJECT_ROOT), ROCKETMQ_ACCESS_KEY="ops_admin_01", ROCKETMQ_SECRET_KEY="0p5-s3cret")
    created = subprocess.run([sys.executable, "-m", "client.admin.cli", "updateTopic", "-n", broker.namesrv_addr,
                              "-t", "NodeAclTopic", "-w", "2", "-r", "2"], cwd=PROJECT_ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    return broker


def run_node(node_runtime, broker, secret: str, timeout_ms: int) -> tuple[int, dict, str]:
    cmd = [node_runtime.node, str(node_runtime.script("produce_consume.js")), "--namesrv", broker.namesrv_addr,
           "--topic", "NodeAclTopic", "--group", "node_acl_group", "--count", "6", "--timeout-ms", str(timeout_ms),
           "--step-timeout-ms", str(min(timeout_ms, 30000)), "--access-key", "node_app01", "--secret-key", secret]
    proc = subprocess.run(cmd, cwd=node_runtime.project_dir, capture_output=True, text=True,
                          timeout=NODE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    context = f"node exit {proc.returncode}\nstderr:\n{proc.stderr[-3000:]}\nbroker log:\n{broker.log_text()[-3000:]}"
    assert lines, f"node printed no JSON summary\n{context}"
    return proc.returncode, json.loads(lines[-1]), context


def test_ali_ons_signed_produce_and_consume(node_runtime, acl_broker):
    code, summary, context = run_node(node_runtime, acl_broker, "node-secret-1", (NODE_TIMEOUT_S - 10) * 1000)
    assert code == 0 and summary["ok"], f"{summary.get('failure')}\n{context}"
    assert len(summary["sent"]) == 6 and all(s["status"] == "SEND_OK" for s in summary["sent"])
    assert sorted(r["msgId"] for r in summary["received"]) == sorted(
        s["msgId"] for s in summary["sent"] if s["tag"] == "TagA")
    assert "Check signature failed" not in acl_broker.log_text()


def test_ali_ons_wrong_secret_is_refused(node_runtime, acl_broker):
    code, summary, context = run_node(node_runtime, acl_broker, "wrong-secret-1", 20000)
    assert code != 0 and not summary["ok"], context
    assert summary["sent"] == [], f"a send with a wrong secret was accepted\n{context}"
    assert "still failed" in (summary["failure"] or ""), context  # ali-ons retries, then drops the remark
