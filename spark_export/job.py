"""Export job: write the store's tables with Spark and print a summary.

    python -m spark_export --store DIR --out DIR [--format parquet|json|csv] [--topics T1,T2] [--master URL]
    mq-spark-export ...                                   (console script, same arguments)
    spark-submit --master URL --py-files spark_export.zip spark_export/job.py --store DIR --out DIR

The job ships its own package to the executors (SparkContext.addPyFile of a zip built on the fly), so an
installed package or --py-files is only needed when the job is driven some other way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

if __package__ in (None, ""):  # run as a file (spark-submit spark_export/job.py): make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_export.store import StoreError, StoreLayout, data_extent, open_store  # noqa: E402

__all__ = ["main", "package_zip", "check_store", "build_session", "export"]

TABLES = ("messages", "consume_queue", "offsets", "topics")
# The columns the summary reads back from each written table (any format, no schema inference).
_SUMMARY_SCHEMAS = {
    "messages": "topic string",
    "consume_queue": "topic string, queue_id int, queue_offset long",
    "offsets": "topic string, `group` string, queue_id int, offset long",
    "topics": "topic string",
}


class JobError(Exception):
    """A problem the user must fix; printed without a traceback."""


def package_zip(dest_dir: str | None = None) -> str:
    """A zip of the spark_export package for --py-files / addPyFile (the package has no other project deps)."""
    pkg = Path(__file__).resolve().parent
    dest = Path(dest_dir or tempfile.mkdtemp(prefix="spark_export-"))
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / "spark_export.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(pkg.glob("*.py")):
            zf.write(path, f"spark_export/{path.name}")
    return str(out)


def stable_package_zip() -> str:
    """package_zip() at a path named after the package's content, built once: numba caches the compiled kernels by
    their source location, so a new zip per run would compile them again in every Python worker (~4 s)."""
    import hashlib

    pkg = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(pkg.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    user = getattr(os, "getuid", lambda: "user")()
    home = Path(tempfile.gettempdir()) / f"spark_export-{user}-{digest.hexdigest()[:16]}"
    target = home / "spark_export.zip"
    if not target.exists():
        staging = Path(package_zip(tempfile.mkdtemp(prefix="spark_export-build-")))
        home.mkdir(parents=True, exist_ok=True)
        os.replace(staging, target)  # atomic: a concurrent job sees the old or the complete new zip
        shutil.rmtree(staging.parent, ignore_errors=True)
    return str(target)


def check_store(layout: StoreLayout) -> list[str]:
    """Problems that make an export incomplete: commit-log files shorter than their neighbours say."""
    from spark_export.records import ChainEnd, locate_records
    from spark_export.store import mapped

    problems = []
    files = layout.commit_log_files
    sizes = [size for _, _, size in files]
    for i, (base, path, size) in enumerate(files):
        expected = files[i + 1][0] - base if i + 1 < len(files) else (max(sizes[:-1]) if len(files) > 1 else None)
        if expected is not None and size < expected:
            problems.append(f"{path}: truncated ({size} bytes, expected {expected})")
    if files:
        base, path, size = files[-1]
        with mapped(path) as buf:
            _, pos, why = locate_records(buf, base, 0)
            if why == ChainEnd.DATA and pos + 4 <= size:
                declared = int.from_bytes(bytes(buf[pos:pos + 4]), "big", signed=True)
                if declared > 0 and pos + declared > size:
                    problems.append(f"{path}: truncated inside the record at offset {base + pos} "
                                    f"({declared} bytes declared, {size - pos} present)")
    return problems


def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return True
    return shutil.which("java") is not None


SMALL_STORE_BYTES = 256 << 20  # below this much commit log the job tunes Spark for a short run


def build_session(master: str | None, app_name: str = "rocketmq-spark-export", *, progress: bool = True,
                  small: bool = False):
    """A SparkSession with the `rocketmq` source registered and this package shipped to the executors.

    small=True (a small store, a local master): settings for a run of seconds, where start-up dominates: the JVM's
    quick compiler only, no web UI, few shuffle partitions."""
    if not _java_available():
        raise JobError("no Java runtime found: Spark needs Java 17 or newer on PATH or in JAVA_HOME "
                       "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless)")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise JobError("pyspark is not installed: pip install 'pyrocketmq-broker[spark]'") from None
    # Spark starts its Python workers with `python3` from PATH unless told otherwise; from a venv that is not
    # activated that interpreter lacks pyarrow (and this package). Use the running interpreter, unless the user
    # chose one (PYSPARK_PYTHON), or spark-submit started us (it has chosen the workers' Python already).
    if not os.environ.get("PYSPARK_PYTHON") and not _under_spark_submit():
        os.environ["PYSPARK_PYTHON"] = sys.executable
    if (master or "local").startswith("local") and ".zip" not in __file__:
        # Local Python workers import this package from where it is, not from a zip that Spark copies to a new
        # directory per run: numba caches the compiled kernels by source path (a new path costs ~3 s per worker).
        where = str(Path(__file__).resolve().parent.parent)
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if where not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([where, *paths])
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1" if (master or "local").startswith("local") else "")
    if not os.environ["SPARK_LOCAL_IP"]:
        del os.environ["SPARK_LOCAL_IP"]
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    builder = builder.config("spark.ui.showConsoleProgress", "true" if progress else "false")
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    if small and (master or "local").startswith("local"):
        builder = (builder.config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
                   .config("spark.ui.enabled", "false")
                   .config("spark.sql.shuffle.partitions", "4"))
    # Spark >= 4.1 talks to its Python workers over Unix domain sockets when asked: each Python task (and so
    # each rocketmq read) starts ~30 ms sooner than over loopback TCP. Older Spark ignores the key.
    builder = builder.config("spark.python.unix.domain.socket.enabled", "true")
    # Let the rocketmq source skip what a query's filters exclude, on a Spark that keeps a pushed read with its scan
    # (none released yet: elsewhere the source takes no filter and Spark applies them all; see README, "Filter
    # pushdown").
    builder = builder.config("spark.sql.python.filterPushdown.enabled", "true")
    spark = builder.getOrCreate()
    shipped = spark.sparkContext.getConf().get("spark.submit.pyFiles", "") or ""
    local = (master or spark.sparkContext.master or "").startswith("local")
    if "spark_export" not in shipped and ".zip" not in __file__ and not local:
        spark.sparkContext.addPyFile(stable_package_zip())  # executors elsewhere: ship the package
    from spark_export.datasource import register  # the module, not the package: no import circle

    register(spark)
    return spark


def _writable(df, fmt: str):
    """CSV has no map/binary types: properties become JSON text, body base64."""
    if fmt != "csv":
        return df
    from pyspark.sql import functions as F

    for name, dtype in df.dtypes:
        if dtype.startswith("map"):
            df = df.withColumn(name, F.to_json(F.col(name)))
        elif dtype == "binary":
            df = df.withColumn(name, F.base64(F.col(name)))
    return df


def existing_tables(out: str) -> list[str]:
    """Tables of an earlier export under `out` (their directories exist)."""
    return [t for t in TABLES if os.path.exists(os.path.join(out, t))]


def export(spark, store: str, out: str, fmt: str = "parquet", topics: list[str] | None = None,
           include_body: bool = True, mode: str = "error") -> dict:
    """Write every table under out/<table> and return the summary (also printed by main). mode: error (refuse an
    existing table directory), overwrite or append."""
    if mode not in ("error", "overwrite", "append"):
        raise JobError(f"--mode must be error, overwrite or append, not {mode!r}")
    if mode == "error" and existing_tables(out):
        raise JobError(f"{out} already holds an export ({', '.join(existing_tables(out))}): pass --mode overwrite "
                       "to replace it or --mode append to add to it, or choose another --out")
    from pyspark.sql import functions as F

    reader = spark.read.format("rocketmq")
    if topics:
        reader = reader.option("topics", ",".join(topics))
    reader = reader.option("include_body", str(include_body).lower())
    counts = {}
    written = {}
    for table in TABLES:
        started = time.monotonic()
        print(f"[spark_export] writing {table} ...", flush=True)
        path = os.path.join(out, table)
        writer = _writable(reader.option("table", table).load(store), fmt).write
        if fmt == "csv":
            writer = writer.option("header", "true")
        writer.mode("overwrite" if mode == "error" else mode).format(fmt).save(path)
        # The summary reads what was written (Spark's own readers: no second decode of the store in Python).
        back = spark.read.schema(_SUMMARY_SCHEMAS[table]).format(fmt)
        written[table] = (back.option("header", "true") if fmt == "csv" else back).load(path)
        counts[table] = written[table].count()
        print(f"[spark_export] {table}: {counts[table]} rows in {time.monotonic() - started:.1f}s", flush=True)
    per_topic = {r["topic"]: r["count"] for r in written["messages"].groupBy("topic").count().collect()}
    max_offsets = (written["consume_queue"].groupBy("topic", "queue_id")
                   .agg((F.max("queue_offset") + 1).alias("max_offset")))
    lag_rows = (written["offsets"].join(max_offsets, ["topic", "queue_id"], "left")
                .withColumn("max_offset", F.coalesce("max_offset", F.lit(0)))
                .withColumn("lag", F.greatest(F.col("max_offset") - F.col("offset"), F.lit(0)))
                .orderBy("group", "topic", "queue_id").collect())
    summary = {
        "messages_per_topic": dict(sorted(per_topic.items())),
        "lag": [(r["group"], r["topic"], r["queue_id"], r["max_offset"], r["offset"], r["lag"]) for r in lag_rows],
        "retry_messages": sum(c for t, c in per_topic.items() if t.startswith("%RETRY%")),
        "dlq_messages": sum(c for t, c in per_topic.items() if t.startswith("%DLQ%")),
        "rows": counts,
    }
    return summary


def print_summary(summary: dict) -> None:
    print("\nMessages per topic:")
    for topic, count in summary["messages_per_topic"].items():
        print(f"  {topic:<40} {count:>12}")
    print("\nConsumer lag (max offset - committed offset):")
    print(f"  {'group':<28} {'topic':<28} {'queue':>5} {'max':>10} {'committed':>10} {'lag':>10}")
    for group, topic, queue_id, max_offset, offset, lag in summary["lag"]:
        print(f"  {group:<28} {topic:<28} {queue_id:>5} {max_offset:>10} {offset:>10} {lag:>10}")
    print(f"\nRetry messages: {summary['retry_messages']}   DLQ messages: {summary['dlq_messages']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mq-spark-export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="broker store directory (storePathRootDir)")
    parser.add_argument("--out", help="output directory (one sub-directory per table)")
    parser.add_argument("--format", default="parquet", choices=("parquet", "json", "csv"))
    parser.add_argument("--topics", help="comma-separated topics to export (default: all)")
    parser.add_argument("--master", help="Spark master URL (default: spark-submit's, else local[*])")
    parser.add_argument("--no-body", action="store_true", help="leave message bodies out")
    parser.add_argument("--mode", default="error", choices=("error", "overwrite", "append"),
                        help="when --out already holds an export: error (default), overwrite or append")
    parser.add_argument("--allow-truncated", action="store_true",
                        help="export the complete records of a truncated store instead of failing")
    parser.add_argument("--make-zip", metavar="DIR", help="only write DIR/spark_export.zip (for --py-files)")
    args = parser.parse_args(argv)
    if args.make_zip:
        print(package_zip(args.make_zip))
        return 0
    if not args.store or not args.out:
        parser.error("--store and --out are required")
    try:
        layout = open_store(args.store)
        problems = check_store(layout)
        if args.mode == "error" and existing_tables(args.out):
            raise JobError(f"{args.out} already holds an export ({', '.join(existing_tables(args.out))}): pass "
                           "--mode overwrite to replace it or --mode append to add to it, or choose another --out")
        if problems and not args.allow_truncated:
            raise JobError("the store is truncated (a partial copy?): " + "; ".join(problems)
                           + ". Re-copy it, or pass --allow-truncated to export the complete records only.")
        for problem in problems:
            print(f"[spark_export] warning: {problem}", file=sys.stderr)
        master = args.master or (None if _under_spark_submit() else "local[*]")
        small = sum(size for _, _, size in layout.commit_log_files) <= SMALL_STORE_BYTES or \
            sum(data_extent(path, size) for _, path, size in layout.commit_log_files) <= SMALL_STORE_BYTES
        spark = build_session(master, small=small)
        try:
            topics = [t.strip() for t in args.topics.split(",") if t.strip()] if args.topics else None
            summary = export(spark, args.store, args.out, args.format, topics, include_body=not args.no_body,
                             mode=args.mode)
        finally:
            spark.stop()
    except (StoreError, JobError) as exc:
        print(f"mq-spark-export: error: {exc}", file=sys.stderr)
        return 2
    print_summary(summary)
    return 0


def _under_spark_submit() -> bool:
    """spark-submit starts the Python driver with a py4j gateway already running (and the master chosen)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


if __name__ == "__main__":
    sys.exit(main())
