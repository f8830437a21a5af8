"""`spark.read.format("rocketmq")` with no register() call and no set-up step, as a new user runs it: a script run
with the venv's interpreter by its path, the venv not activated (its bin folder not on PATH, no VIRTUAL_ENV,
PYSPARK_PYTHON or PYTHONPATH), with the package installed as this environment has it (CI: pip install -e).

Spark runs its Python workers, and the lookup of installed pyspark_* data sources, with PYSPARK_PYTHON or else
`python3` from PATH; the package's start-up .pth (spark_export/startup.py) makes them this interpreter, and in an
editable install puts pyspark_rocketmq where pkgutil.iter_modules() sees it."""

from __future__ import annotations

import asyncio
import json
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.support.wire import WireClient, props, send_v2_fields
from protocol.codes import RequestCode as RC, ResponseCode as R
from spark_export.startup import PTH_NAME

READ = r"""
import json, os, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
table = sys.argv[2]  # messages; topics (no decoding kernels to compile: a shorter run)
out = {"rows": spark.read.format("rocketmq").option("table", table).load(sys.argv[1]).where("topic = 'SparkAudit'")
       .count()}
if len(sys.argv) > 3:  # the network mode too: name server, topic
    df = spark.read.format("rocketmq").option("nameServer", sys.argv[3]).option("topic", sys.argv[4]).load()
    out["network_bodies"] = sorted(bytes(r.body).decode() for r in df.select("body").collect())
worker = spark.sparkContext.parallelize([0], 1).map(
    lambda _: (__import__("sys").executable, __import__("os").environ.get("ROCKETMQ_TEST_WRAPPER", ""),
               __import__("pyspark").__file__)).first()
out.update(driver_pyspark_python=os.environ.get("PYSPARK_PYTHON", ""), worker_executable=worker[0],
           worker_wrapper=worker[1], worker_pyspark=worker[2])
print("RESULT " + json.dumps(out), flush=True)
spark.stop()
"""


def _unactivated_env() -> dict[str, str]:
    """This environment as a shell where the venv was never activated."""
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))
    drop = ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "PYSPARK_GATEWAY_PORT",
            "PYSPARK_GATEWAY_SECRET", "SPARK_HOME")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and os.path.abspath(p) != venv_bin)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def _wrapper(tmp_path: Path) -> Path:
    """An interpreter of the user's choosing: this one, behind a script that marks the processes it starts."""
    path = tmp_path / "chosen-python"
    path.write_text(f'#!/bin/sh\nexport ROCKETMQ_TEST_WRAPPER=1\nexec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return path


def _result(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def _audit_rows(broker_store) -> int:
    return sum(1 for r in broker_store.pulled.values() if r.topic == "SparkAudit")


def test_the_package_installed_its_startup_pth():
    """Without it nothing below can work: an install made before the .pth existed needs `pip install -e .` again."""
    folders = {sysconfig.get_paths()["purelib"], site.getusersitepackages()}
    assert any(Path(folder, PTH_NAME).is_file() for folder in folders), \
        f"{PTH_NAME} not in {sorted(folders)}: reinstall the package (pip install -e '.[test,spark]')"


def test_a_clean_interpreter_lists_pyspark_rocketmq():
    """What Spark's lookup worker does (pkgutil.iter_modules), in an interpreter with nothing set up."""
    code = "import pkgutil; print(sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_')))"
    proc = subprocess.run([sys.executable, "-c", code], env=_unactivated_env(), capture_output=True, text=True,
                          timeout=60, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert "pyspark_rocketmq" in proc.stdout


async def _send(addr: str, topic: str, count: int) -> None:
    async with await WireClient.connect(addr) as client:
        for i in range(count):
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, i % 2, props()), f"net-{i}".encode())
            assert resp.code == R.SUCCESS, resp.remark


def test_an_unactivated_venv_reads_without_register(broker_store, broker_factory, tmp_path):
    """Both modes: a store directory, and a live broker through its name server."""
    broker = broker_factory("broker-autoload")
    asyncio.run(_send(broker.addr, "AutoloadNet", 12))
    env = _unactivated_env()
    proc = subprocess.run([sys.executable, "-c", READ, str(broker_store.store_dir), "messages",
                           broker.namesrv_addr, "AutoloadNet"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    result = _result(proc)
    assert result["rows"] == _audit_rows(broker_store)
    assert result["network_bodies"] == sorted(f"net-{i}" for i in range(12))
    assert result["driver_pyspark_python"] == sys.executable
    assert result["worker_executable"] == sys.executable
    # Spark put pip's pyspark/python/lib/pyspark.zip first on the worker's path; the .pth took it off, so pyspark
    # came from site-packages (compiled once), not from the zip (compiled again by every new Python process)
    import pyspark

    assert result["worker_pyspark"] == pyspark.__file__ and "pyspark.zip" not in result["worker_pyspark"]


def test_pyspark_python_set_by_the_user_is_kept(broker_store, tmp_path):
    chosen = _wrapper(tmp_path)
    env = {**_unactivated_env(), "PYSPARK_PYTHON": str(chosen)}
    proc = subprocess.run([sys.executable, "-c", READ, str(broker_store.store_dir), "topics"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=240)
    result = _result(proc)
    assert result["rows"] == 1  # the topic's row of the topics table
    assert result["driver_pyspark_python"] == str(chosen)
    assert result["worker_wrapper"] == "1"  # the workers ran the user's interpreter


def test_spark_pyspark_python_given_to_spark_submit_is_kept(broker_store, tmp_path):
    """spark-submit --conf spark.pyspark.python=X runs the driver with X and PYSPARK_PYTHON=X; the hook keeps it.

    Spark's JVM looks data sources up with PYSPARK_PYTHON from its own environment, else python3 from PATH,
    never with that conf: spark-submit is run here with the venv's bin folder on PATH, as from an activated venv."""
    import pyspark

    chosen = _wrapper(tmp_path)
    script = tmp_path / "read.py"
    script.write_text(READ)
    env = _unactivated_env()
    env["PATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(sys.executable)), env["PATH"]])
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    proc = subprocess.run([str(submit), "--master", "local[1]", "--conf", f"spark.pyspark.python={chosen}",
                           str(script), str(broker_store.store_dir), "topics"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    result = _result(proc)
    assert result["rows"] == 1
    assert result["driver_pyspark_python"] == str(chosen)
    assert result["worker_wrapper"] == "1"
