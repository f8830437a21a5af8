"""The start-up hook that lets `spark.read.format("rocketmq")` work from any interpreter the package is installed in.

Spark starts its Python workers, including the one that looks up installed ``pyspark_*`` data sources, with
``PYSPARK_PYTHON`` or else ``python3`` from PATH. From a venv that is not activated that is another interpreter,
without this package: the lookup finds nothing and the read fails with DATA_SOURCE_NOT_FOUND. So the build writes
`pyspark_python` and `apply` into a ``.pth`` file (setup.py, `pth_text`), which every interpreter of the environment
runs at start-up, before any user code: it points PYSPARK_PYTHON at that interpreter when Spark would pick another.
An editable install's ``.pth`` also names the folder of ``pyspark_rocketmq``: setuptools' editable finder imports
it, but `pkgutil.iter_modules()`, which Spark's lookup uses, only lists modules found in sys.path folders.

The hook runs in every Python process of the environment, so it uses only os and sys (already imported by then),
a few stat calls over PATH, and never raises.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, MutableMapping

PTH_NAME = "pyrocketmq_broker_spark.pth"


def pyspark_python(environ: Mapping[str, str], executable: str) -> str | None:
    """The interpreter Spark's Python workers should run: `executable`, or None to leave Spark's choice alone.

    None when the user chose (PYSPARK_PYTHON; spark-submit exports spark.pyspark.python as it), when spark-submit
    started this interpreter (its choice stands; on a cluster a local path could be wrong), or when `python3` from
    PATH is this very interpreter (an activated venv: same folder and same binary)."""
    if not executable or environ.get("PYSPARK_PYTHON") or environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    here = os.path.normcase(os.path.abspath(os.path.dirname(executable)))
    for folder in environ.get("PATH", os.defpath).split(os.pathsep):
        folder = folder or os.curdir
        candidate = os.path.join(folder, "python3")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):  # the one the JVM would run
            if os.path.normcase(os.path.abspath(folder)) == here and os.path.samefile(candidate, executable):
                return None  # same folder (so same pyvenv.cfg) and same binary
            return executable
    return executable  # no python3 on PATH: Spark could not start a worker at all


def apply(environ: MutableMapping[str, str], executable: str) -> None:
    """Set PYSPARK_PYTHON when `pyspark_python` says so; a broken PATH entry leaves everything as it was."""
    try:
        choice = pyspark_python(environ, executable)
    except (OSError, ValueError):  # e.g. a NUL byte in PATH
        return
    if choice:
        environ["PYSPARK_PYTHON"] = choice


def pth_text(autoload_dir: str | None = None) -> str:
    """The .pth file: one line that runs `pyspark_python` and `apply` (their code, docstrings dropped, executed
    in a namespace of their own: nothing is imported or left behind), then, for an editable install, the folder
    holding pyspark_rocketmq. Called at build time only."""
    import ast
    import inspect

    tree = ast.parse("".join(inspect.getsource(f) for f in (pyspark_python, apply)))
    for node in tree.body:  # docstrings and annotations cost start-up time for nothing
        if isinstance(node, ast.FunctionDef):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                node.body = node.body[1:]
            node.returns = None
            for arg in node.args.args:
                arg.annotation = None
    code = ast.unparse(tree) + "\napply(os.environ, sys.executable)\n"
    # Checked first, to spare the compilation of `code` where it would change nothing: the user's choice, a driver
    # started by spark-submit, a Spark worker (its environment has PYSPARK_PYTHON), an activated venv.
    guard = ("os.environ.get('PYSPARK_PYTHON') or os.environ.get('PYSPARK_GATEWAY_PORT') "
             "or os.environ.get('VIRTUAL_ENV') == sys.prefix")
    text = f"import os, sys; {guard} or exec({code!r}, {{'os': os, 'sys': sys}})\n"
    if autoload_dir:
        text += os.path.abspath(autoload_dir) + "\n"
    return text


if __name__ == "__main__":  # python -m spark_export.startup: print the .pth of a wheel
    sys.stdout.write(pth_text())
