"""Build hooks that pyproject.toml cannot declare: the start-up .pth of the Spark data source.

Everything else (metadata, packages, package data) is in pyproject.toml. The .pth must sit at the top of
site-packages, which package data cannot reach, and must be there for `pip install .` (a wheel) and for
`pip install -e .` (a PEP 660 editable wheel, built by setuptools' editable_wheel command, which leaves out the
files that build_py writes): see spark_export/startup.py for what it does.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import io
import os
import zipfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

ROOT = Path(__file__).resolve().parent
AUTOLOAD = ROOT / "spark_export" / "autoload"  # holds pyspark_rocketmq


def _startup():
    """spark_export/startup.py, loaded by path: the build must not import the package (or pyspark)."""
    spec = importlib.util.spec_from_file_location("_pyrocketmq_startup", ROOT / "spark_export" / "startup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithPth(build_py):
    """Writes the .pth next to the packages in build_lib, so the wheel carries it at the top of purelib."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:  # an editable wheel takes its .pth from EditableWheelWithPth
            startup = _startup()
            target = Path(self.build_lib, startup.PTH_NAME)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(startup.pth_text(), encoding="utf-8")

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        if not self.editable_mode:
            outputs.append(os.path.join(self.build_lib, _startup().PTH_NAME))
        return outputs


class EditableWheelWithPth(editable_wheel):
    """Adds the .pth, with the folder of pyspark_rocketmq in this checkout, to the editable wheel just built."""

    def run(self) -> None:
        super().run()
        wheels = sorted(Path(self.dist_dir).glob("*.editable-*.whl"), key=lambda p: p.stat().st_mtime)
        if not wheels:
            raise RuntimeError(f"editable_wheel wrote no wheel into {self.dist_dir}")
        startup = _startup()
        _add_to_wheel(wheels[-1], startup.PTH_NAME, startup.pth_text(str(AUTOLOAD)).encode("utf-8"))


def _add_to_wheel(wheel: Path, name: str, data: bytes) -> None:
    """Rewrite `wheel` with one more top-level file, listed with its hash in RECORD (installers check it)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    partial = wheel.with_name(wheel.name + ".part")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as dst:
        records = [i.filename for i in src.infolist() if i.filename.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise RuntimeError(f"{wheel.name}: expected one .dist-info/RECORD, found {len(records)}")
        dst.writestr(name, data)  # first: the .dist-info folder stays at the end of the archive
        for item in src.infolist():
            if item.filename == name:
                continue
            payload = src.read(item)
            if item.filename == records[0]:
                rows = [r for r in csv.reader(io.StringIO(payload.decode("utf-8"))) if r and r[0] != name]
                own = [r for r in rows if r[0] == records[0]]  # RECORD's own row (no hash) stays last
                rows = [r for r in rows if r[0] != records[0]] + [[name, f"sha256={digest}", str(len(data))]] + own
                out = io.StringIO()
                csv.writer(out, lineterminator="\n").writerows(rows)
                payload = out.getvalue().encode("utf-8")
            dst.writestr(item, payload)
    os.replace(partial, wheel)


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
