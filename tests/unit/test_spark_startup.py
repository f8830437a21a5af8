"""The start-up hook of the Spark data source (spark_export/startup.py): which interpreter Spark's Python workers
get, and the .pth text that runs it in every interpreter of an environment where the package is installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_export.startup import PTH_NAME, apply, drop_bundled_pyspark_zip, pth_text, pyspark_python


def _exe(path: Path, target: str | None = None) -> Path:
    """An executable file at `path` (or a symlink to `target`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if target:
        path.symlink_to(target)
    else:
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return path


@pytest.fixture()
def venv(tmp_path) -> Path:
    """A venv-like bin folder: python (the interpreter) and python3 -> python, as `python -m venv` makes them."""
    bin_dir = tmp_path / "venv" / "bin"
    _exe(bin_dir / "python")
    _exe(bin_dir / "python3", "python")
    return bin_dir


def test_an_unactivated_venv_gets_its_own_interpreter(tmp_path, venv):
    system = _exe(tmp_path / "usr" / "bin" / "python3").parent
    environ = {"PATH": os.pathsep.join([str(tmp_path / "nothing"), str(system), str(venv)])}
    assert pyspark_python(environ, str(venv / "python")) == str(venv / "python")
    apply(environ, str(venv / "python"))
    assert environ["PYSPARK_PYTHON"] == str(venv / "python")


def test_an_activated_venv_is_left_alone(tmp_path, venv):
    system = _exe(tmp_path / "usr" / "bin" / "python3").parent
    environ = {"PATH": os.pathsep.join([str(venv), str(system)])}
    assert pyspark_python(environ, str(venv / "python")) is None
    assert pyspark_python(environ, str(venv / "python3")) is None
    apply(environ, str(venv / "python"))
    assert "PYSPARK_PYTHON" not in environ


def test_another_python_in_the_same_folder_is_not_this_one(tmp_path):
    """/usr/bin/python3.12 with the package, while /usr/bin/python3 is 3.11: the folder alone does not decide."""
    bin_dir = tmp_path / "usr" / "bin"
    _exe(bin_dir / "python3.11")
    _exe(bin_dir / "python3", "python3.11")
    _exe(bin_dir / "python3.12")
    environ = {"PATH": str(bin_dir)}
    assert pyspark_python(environ, str(bin_dir / "python3.12")) == str(bin_dir / "python3.12")
    assert pyspark_python(environ, str(bin_dir / "python3.11")) is None


def test_what_the_jvm_would_not_run_is_skipped(tmp_path, venv):
    (tmp_path / "a" / "python3").mkdir(parents=True)  # a folder named python3
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "python3").write_text("not executable")
    environ = {"PATH": os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b"), str(venv)])}
    assert pyspark_python(environ, str(venv / "python")) is None
    environ["PATH"] = os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")])  # no python3 at all
    assert pyspark_python(environ, str(venv / "python")) == str(venv / "python")


def test_the_users_choice_and_spark_submit_win(tmp_path, venv):
    environ = {"PATH": str(tmp_path), "PYSPARK_PYTHON": "/opt/py/bin/python3"}
    apply(environ, str(venv / "python"))
    assert environ["PYSPARK_PYTHON"] == "/opt/py/bin/python3"
    environ = {"PATH": str(tmp_path), "PYSPARK_GATEWAY_PORT": "40123"}  # spark-submit started this driver
    apply(environ, str(venv / "python"))
    assert "PYSPARK_PYTHON" not in environ
    environ = {"PATH": str(venv)}
    apply(environ, "")  # embedded interpreter without sys.executable
    assert "PYSPARK_PYTHON" not in environ


def test_a_failing_check_changes_nothing(tmp_path, venv):
    environ = {"PATH": str(venv)}
    apply(environ, str(venv / "gone"))  # same folder, samefile() on a missing file raises: swallowed
    assert "PYSPARK_PYTHON" not in environ


def _run_pth(pth_dir: Path, env: dict[str, str]) -> list[str]:
    """A clean interpreter (-S: no site-packages, so no installed hook) processing `pth_dir` as site does."""
    code = ("import os, site, sys; site.addsitedir(sys.argv[1]); "
            "print(os.environ.get('PYSPARK_PYTHON', '-')); print(sys.path[-1])")
    proc = subprocess.run([sys.executable, "-S", "-c", code, str(pth_dir)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return proc.stdout.splitlines()


def test_the_pth_file_sets_pyspark_python_and_names_the_autoload_folder(tmp_path):
    autoload = tmp_path / "autoload"
    (autoload / "pyspark_example").mkdir(parents=True)
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / PTH_NAME).write_text(pth_text(str(autoload)))
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    base = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV", "PYSPARK_GATEWAY_PORT")}
    base["PATH"] = str(empty)  # no python3 on PATH: Spark would run none
    assert _run_pth(site_dir, base) == [sys.executable, str(autoload)]
    assert _run_pth(site_dir, {**base, "PYSPARK_PYTHON": "/opt/py"}) == ["/opt/py", str(autoload)]
    # activated: nothing to do (sys.prefix of an interpreter run with -S, where site has not set it to the venv)
    prefix = subprocess.run([sys.executable, "-S", "-c", "import sys; print(sys.prefix)"], capture_output=True,
                            text=True, timeout=60).stdout.strip()
    assert _run_pth(site_dir, {**base, "VIRTUAL_ENV": prefix})[0] == "-"


def test_a_wheels_pth_has_the_two_hook_lines_only():
    lines = pth_text().splitlines()
    assert len(lines) == 2 and all(line.startswith("import os, sys; ") for line in lines)
    for line in lines:
        compile(line, PTH_NAME, "exec")


def _pip_pyspark(root: Path) -> tuple[Path, Path]:
    """A site-packages folder holding a pyspark package with its bundled python/lib/pyspark.zip, as pip installs it."""
    site_dir = root / "site-packages"
    lib = site_dir / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site_dir / "pyspark" / "__init__.py").write_text("")
    (lib / "pyspark.zip").write_bytes(b"")
    return site_dir, lib / "pyspark.zip"


def test_the_installed_pysparks_own_zip_leaves_the_path(tmp_path):
    site_dir, bundled = _pip_pyspark(tmp_path)
    py4j = str(bundled.parent / "py4j-src.zip")
    path = [str(bundled), py4j, "/work/app", str(site_dir)]
    assert drop_bundled_pyspark_zip(path)
    assert path == [py4j, "/work/app", str(site_dir)]  # only that entry; py4j and the rest stay, in order


def test_another_sparks_zip_stays(tmp_path):
    site_dir, bundled = _pip_pyspark(tmp_path)
    distribution = tmp_path / "opt" / "spark" / "python" / "lib" / "pyspark.zip"  # SPARK_HOME of a Spark download
    for path in ([str(distribution), str(site_dir)],
                 [str(bundled)],  # its site-packages is not on the path: nothing else would provide pyspark
                 [str(site_dir), str(bundled)]):  # site-packages first already: the zip is not what gets imported
        before = list(path)
        assert not drop_bundled_pyspark_zip(path)
        assert path == before
    checkout = tmp_path / "spark-checkout" / "python"  # another pyspark before site-packages: the zip shadowed it
    (checkout / "pyspark").mkdir(parents=True)
    (checkout / "pyspark" / "__init__.py").write_text("")
    for between in (str(checkout), str(distribution)):
        path = [str(bundled), between, str(site_dir)]
        assert not drop_bundled_pyspark_zip(path) and len(path) == 3
    (site_dir / "pyspark" / "__init__.py").unlink()  # a zip beside no package: kept
    path = [str(bundled), str(site_dir)]
    assert not drop_bundled_pyspark_zip(path) and len(path) == 2


def test_the_pth_drops_the_zip_only_where_pythonpath_names_it(tmp_path):
    """The second .pth line, run by site as in a Python process Spark starts (PYTHONPATH = the zip first)."""
    site_dir, bundled = _pip_pyspark(tmp_path)
    pth_dir = tmp_path / "pth"
    pth_dir.mkdir()
    (pth_dir / PTH_NAME).write_text(pth_text())
    code = ("import os, site, sys; sys.path.append(sys.argv[2]); site.addsitedir(sys.argv[1]); "
            "print(sum(p.endswith('pyspark.zip') for p in sys.path))")
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    base["PYSPARK_PYTHON"] = sys.executable  # the first line has nothing to do

    def zips(env: dict[str, str]) -> int:
        proc = subprocess.run([sys.executable, "-S", "-c", code, str(pth_dir), str(site_dir)], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and not proc.stderr, proc.stderr
        return int(proc.stdout)

    assert zips({**base, "PYTHONPATH": str(bundled)}) == 0
    other = tmp_path / "elsewhere" / "pyspark.zip"
    assert zips({**base, "PYTHONPATH": os.pathsep.join([str(other), str(bundled)])}) == 1  # another Spark's stays
