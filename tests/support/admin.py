"""mqadmin as a subprocess and the Prometheus endpoint scraped, for the tests that check a broker through them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker_process import PROJECT_ROOT

CLI_TIMEOUT_S = 30


def mqadmin(namesrv: str | None, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("NAMESRV_ADDR", None)
    argv = [sys.executable, "-m", "client.admin.cli", *args]
    if namesrv:
        argv += ["-n", namesrv]
    return subprocess.run(argv, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)


def ok_json(namesrv: str, *args: str):
    result = mqadmin(namesrv, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def mqadmin_in_thread(*args: str) -> subprocess.CompletedProcess:
    """mqadmin without -n, in a thread: fake brokers of the test keep heartbeating meanwhile."""
    return await asyncio.to_thread(mqadmin, None, *args)


def http_get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, "", exc.read().decode()


async def scrape(port: int) -> dict[tuple[str, tuple], float]:
    status, content_type, text = await asyncio.get_running_loop().run_in_executor(
        None, http_get, f"http://127.0.0.1:{port}/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples
