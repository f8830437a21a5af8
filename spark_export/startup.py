"""The start-up hook that lets `spark.read.format("rocketmq")` work from any interpreter the package is installed in.

Spark starts its Python workers, including the one that looks up installed ``pyspark_*`` data sources, with
``PYSPARK_PYTHON`` or else ``python3`` from PATH. From a venv that is not activated that is another interpreter,
without this package: the lookup finds nothing and the read fails with DATA_SOURCE_NOT_FOUND. So the build writes
`pyspark_python` and `apply` into a ``.pth`` file (setup.py, `pth_text`), which every interpreter of the environment
runs at start-up, before any user code: it points PYSPARK_PYTHON at that interpreter when Spark would pick another.
An editable install's ``.pth`` also names the folder of ``pyspark_rocketmq``: setuptools' editable finder imports
it, but `pkgutil.iter_modules()`, which Spark's lookup uses, only lists modules found in sys.path folders.

A second line of the same file speeds up every Python process Spark starts. Spark puts
``$SPARK_HOME/python/lib/pyspark.zip`` first on their PYTHONPATH; for a pip-installed pyspark that zip is a copy of
the installed package without bytecode, so each new process (the worker daemon, every streaming query's source
runner, every planner) compiled pyspark from source: 0.4-0.6 s of CPU each, half of what an empty streaming query
costs. `drop_bundled_pyspark_zip` takes the zip off sys.path when it is the installed package's own copy, so pyspark
is imported from site-packages, compiled once and cached. A zip of any other Spark (a Spark distribution's
SPARK_HOME) is left alone.

The hook runs in every Python process of the environment, so it uses only os and sys (already imported by then),
a few stat calls over PATH, and never raises; the second line does nothing unless PYTHONPATH names a pyspark.zip.
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


def drop_bundled_pyspark_zip(path: list[str]) -> bool:
    """Remove from `path` (sys.path) an entry ``<site>/pyspark/python/lib/pyspark.zip`` whose ``<site>`` comes
    later in `path` and holds the package (``<site>/pyspark/__init__.py``): the same files, minus the bytecode
    cache. Kept when an entry between the two could provide another pyspark (a folder holding one, another
    pyspark.zip): removing the zip would then change which pyspark is imported. Returns whether it removed one."""
    norm = [os.path.normcase(os.path.abspath(entry)) if entry else entry for entry in path]
    for i, entry in enumerate(norm):
        if not entry or os.path.basename(entry) != "pyspark.zip":
            continue
        lib = os.path.dirname(entry)
        package = os.path.dirname(os.path.dirname(lib))
        if (os.path.basename(lib) != "lib" or os.path.basename(os.path.dirname(lib)) != "python"
                or os.path.basename(package) != "pyspark"):
            continue
        site = os.path.dirname(package)
        if site not in norm[i + 1:] or not os.path.isfile(os.path.join(package, "__init__.py")):
            continue
        between = norm[i + 1:norm.index(site, i + 1)]
        if any(e and (os.path.basename(e) == "pyspark.zip" or os.path.isfile(os.path.join(e, "pyspark", "__init__.py")))
               for e in between):
            continue
        del path[i]
        return True
    return False


def pth_text(autoload_dir: str | None = None) -> str:
    """The .pth file: one line that runs `pyspark_python` and `apply` (their code, docstrings dropped, executed
    in a namespace of their own: nothing is imported or left behind), then, for an editable install, the folder
    holding pyspark_rocketmq. Called at build time only."""
    import ast
    import inspect

    def source(*functions) -> str:
        tree = ast.parse("".join(inspect.getsource(f) for f in functions))
        for node in tree.body:  # docstrings and annotations cost start-up time for nothing
            if isinstance(node, ast.FunctionDef):
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                    node.body = node.body[1:]
                node.returns = None
                for arg in node.args.args:
                    arg.annotation = None
        return ast.unparse(tree)

    code = source(pyspark_python, apply) + "\napply(os.environ, sys.executable)\n"
    # Checked first, to spare the compilation of `code` where it would change nothing: the user's choice, a driver
    # started by spark-submit, a Spark worker (its environment has PYSPARK_PYTHON), an activated venv.
    guard = ("os.environ.get('PYSPARK_PYTHON') or os.environ.get('PYSPARK_GATEWAY_PORT') "
             "or os.environ.get('VIRTUAL_ENV') == sys.prefix")
    text = f"import os, sys; {guard} or exec({code!r}, {{'os': os, 'sys': sys}})\n"
    # Only a process whose PYTHONPATH names a pyspark.zip (one Spark started) compiles and runs the second function.
    drop = source(drop_bundled_pyspark_zip) + "\ntry:\n    drop_bundled_pyspark_zip(sys.path)\nexcept (OSError, ValueError):\n    pass\n"
    text += f"import os, sys; 'pyspark.zip' not in os.environ.get('PYTHONPATH', '') or exec({drop!r}, {{'os': os, 'sys': sys}})\n"
    if autoload_dir:
        text += os.path.abspath(autoload_dir) + "\n"
    return text


if __name__ == "__main__":  # python -m spark_export.startup: print the .pth of a wheel
    sys.stdout.write(pth_text())
