"""Spark read benchmark: the `rocketmq` data source vs Spark's Parquet reader over the same messages.

    python bench/spark_read.py [--messages 1000000] [--body 128] [--master local[2]] [--runs 5] [--dir DIR]
                               [--decode-only]

A thin entry for `python -m spark_export.bench` with the issue's defaults: 1 M messages with 128-byte bodies
in one pre-allocated 1 GiB commit-log file, exported to Parquet, then count() and groupBy(topic, tags).count()
on both in one Spark session (a warm-up, then --runs rounds of every case; median and best), with the
rocketmq/Parquet rate ratios at the end. Needs pyspark, pyarrow, numpy, numba and Java 17+ (see README
"Spark export"). Details in bench/README.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# Spark's Python workers (planning next to the driver, reading in the executors) import spark_export too.
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if str(ROOT) not in _paths:
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *_paths])

from spark_export.bench import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
