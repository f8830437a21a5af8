"""broker.testing, the broker for application tests: the pytest plugin used as a user would (a test file of their
own, run by pytest in a subprocess), and ``RocketMQBroker`` as a context manager outside pytest."""

from __future__ import annotations

from pathlib import Path
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib

from broker.testing import RocketMQBroker
from client import Message, Producer
from tests.support.broker_process import PROJECT_ROOT

PLUGIN = "broker.testing.pytest_plugin"

USER_TEST = '''
import json
import os

import pytest
from client.sync import Message, Producer, PullConsumer


def test_send_and_read_back(rocketmq_broker):
    with Producer("user-pg", rocketmq_broker.namesrv_addr) as producer:
        result = producer.send(Message("UserTopic", b"hello"))
    assert result.status.name == "SEND_OK"
    with PullConsumer("user-cg", rocketmq_broker.namesrv_addr) as consumer:
        [mq] = [q for q in consumer.fetch_message_queues("UserTopic") if q.queue_id == result.queue_id]
        pulled = consumer.pull(mq, "*", offset=result.queue_offset, max_nums=1)
    assert [m.body for m in pulled.messages] == [b"hello"]
    _record("session", rocketmq_broker)


def test_the_session_broker_is_shared(rocketmq_broker):
    _record("session-again", rocketmq_broker)


def test_a_function_broker_is_fresh(rocketmq_broker_function, rocketmq_broker):
    assert rocketmq_broker_function.namesrv_addr != rocketmq_broker.namesrv_addr
    assert not (rocketmq_broker_function.store_dir / "consumequeue" / "UserTopic").exists()
    _record("function", rocketmq_broker_function)


def _record(name, broker):
    with open(os.environ["RECORD_FILE"], "a") as out:
        out.write(json.dumps({"name": name, "pid": broker.pid, "namesrv": broker.namesrv_addr,
                              "broker": broker.broker_addr, "grpc": broker.grpc_endpoint}) + "\\n")
'''


def _readme_example() -> str:
    """The README's five-line test with the fixture (section "A broker for your own tests")."""
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    [example] = [b for b in blocks if "(rocketmq_broker)" in b]
    assert len(example.strip().splitlines()) == 5, example
    return example


def _plugin_entry_point_installed(env: dict[str, str], cwd: Path) -> bool:
    """Whether pytest, started with `env` in `cwd`, finds the entry point: asked of that interpreter, since what
    importlib.metadata sees depends on sys.path (a stale egg-info on PYTHONPATH hides the installed one)."""
    probe = ("import importlib.metadata as m, sys; "
             f"sys.exit(0 if any(e.value == {PLUGIN!r} for e in m.entry_points(group='pytest11')) else 1)")
    return subprocess.run([sys.executable, "-c", probe], cwd=cwd, env=env, timeout=60).returncode == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose: it only waits to be reaped by its parent (the finished pytest)
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_the_package_declares_the_pytest_plugin_entry_point():
    with open(PROJECT_ROOT / "pyproject.toml", "rb") as handle:
        project = tomllib.load(handle)["project"]
    assert project["entry-points"]["pytest11"] == {"rocketmq_broker": PLUGIN}


def test_a_users_test_file_gets_real_brokers_from_the_plugin(tmp_path):
    user = tmp_path / "user-project"
    user.mkdir()
    (user / "pytest.ini").write_text("[pytest]\n")  # the user's own project: not this repository's settings
    (user / "test_with_broker.py").write_text(textwrap.dedent(USER_TEST))
    (user / "test_readme_example.py").write_text(_readme_example())
    record = tmp_path / "brokers.jsonl"
    env = dict(os.environ, RECORD_FILE=str(record),
               PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # installed (pip install): the pytest11 entry point loads it; in a checkout not reinstalled since, name it
    plugin_args = [] if _plugin_entry_point_installed(env, user) else ["-p", PLUGIN]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin_args,
                           "--basetemp", str(tmp_path / "basetemp")],
                          cwd=user, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "4 passed" in proc.stdout
    rows = {row["name"]: row for row in map(json.loads, record.read_text().splitlines())}
    assert rows["session"]["pid"] == rows["session-again"]["pid"]  # one broker for the session
    assert rows["function"]["pid"] != rows["session"]["pid"]
    for row in rows.values():
        assert row["namesrv"].startswith("127.0.0.1:") and row["grpc"].startswith("127.0.0.1:")
        assert all(20000 <= int(addr.rsplit(":", 1)[1]) < 32000 for addr in (row["namesrv"], row["broker"], row["grpc"]))
        assert not _alive(row["pid"]), "a broker outlived the test session"


async def test_the_async_context_manager_outside_pytest_fixtures(tmp_path):
    async with RocketMQBroker(conf={"defaultTopicQueueNums": 2}) as broker:
        workdir = broker.workdir
        assert workdir is not None and broker.store_dir.is_dir()
        assert "defaultTopicQueueNums=2" in broker.conf_path.read_text()
        async with Producer("ctx-pg", namesrv_addr=broker.namesrv_addr) as producer:
            result = await producer.send(Message("CtxTopic", b"x"))
        assert result.status.name == "SEND_OK" and result.queue_id in (0, 1)
        pid = broker.pid
    assert not _alive(pid)
    assert not workdir.exists()  # the temporary store is removed


def test_a_broker_that_cannot_start_says_why_and_leaves_nothing(tmp_path):
    import pytest

    from broker.testing import BrokerStartError

    broker = RocketMQBroker(conf={"listenPrt": 1}, workdir=tmp_path / "w", grpc=False, attempts=1)
    with pytest.raises(BrokerStartError) as err:
        broker.start()
    assert "exited with code 2" in str(err.value) and "did you mean listenPort?" in str(err.value)
    assert not (tmp_path / "w" / "store").exists()
