"""The console scripts named in pyproject.toml (mqbroker, mqnamesrv) resolve to callables."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_console_scripts_resolve():
    scripts = tomllib.loads(PYPROJECT.read_text())["project"]["scripts"]
    assert {"mqbroker", "mqnamesrv"} <= set(scripts)
    for target in scripts.values():
        module_name, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module_name), attr)), target


def test_namesrv_rejects_a_bad_port(capsys):
    from broker.namesrv.__main__ import main

    try:
        main(["-p", "70000"])
    except SystemExit as exc:
        assert exc.code != 0
    else:  # pragma: no cover
        raise AssertionError("port 70000 was accepted")
    assert "70000" in capsys.readouterr().err
