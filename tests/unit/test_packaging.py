"""Every non-Python file inside a package must be declared as package data, or `pip install .` (not -e, as the
Dockerfile does) ships a package that fails at run time (e.g. the SQL92 grammar)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "client", "protocol", "spark_export")  # spark_export/autoload: pyspark_rocketmq (Python)


def test_non_python_package_files_are_declared_as_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = config["tool"]["setuptools"].get("package-data", {})
    missing = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
                continue
            if not _declared(path, package_data):
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"add to [tool.setuptools.package-data] in pyproject.toml: {missing}"


def _declared(path: Path, package_data: dict[str, list[str]]) -> bool:
    """A pattern of the file's package or of an enclosing one matches its path below that package
    ("broker.console" = ["static/*"] covers broker/console/static/app.js)."""
    parts = path.relative_to(ROOT).parts
    for depth in range(len(parts) - 1, 0, -1):
        owner = ".".join(parts[:depth])
        below = "/".join(parts[depth:])
        patterns = package_data.get(owner, []) + package_data.get("*", [])
        if any(fnmatch.fnmatch(below, pattern) for pattern in patterns):
            return True
    return False
