"""Read throughput of the `rocketmq` source vs Spark's Parquet reader over the same messages.

    python -m spark_export.bench [--messages 1000000] [--body 128] [--master local[2]] [--dir DIR] [--runs 5]
                                 [--decode-only]

Writes a synthetic store (one pre-allocated 1 GiB commit-log file, zero tail included) with the project's
record codec, exports it to Parquet, then times count() and groupBy(topic, tags).count() on both in one Spark
session: a warm-up of every case, then --runs rounds that run every case once (median and best reported).

Spark's Python Data Source API has no column pruning: a `rocketmq` DataFrame decodes and ships every column
of its schema whatever the query uses, while Parquet reads only what the query needs (count() reads none).
So the `rocketmq` source is timed twice: with all columns, and with `option("columns", ...)` listing the
columns the query uses (topic, tags for the groupBy; commitlog_offset, the cheapest, for count()). A
"no-decode python source" (precomputed rows, same row count, partitions and batch size) shows what Spark's
Python Data Source machinery costs by itself: no Python reader can beat it. The ratios against Parquet are
printed at the end. --decode-only skips Spark and times each partition's read() in-process (the Python
side alone). Driver-side only: needs the checkout's `protocol` package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

FILE_SIZE = 1 << 30


TOPICS = 10
CQ_FILE_SIZE = 6_000_000  # the broker's default consume-queue file (300,000 units)


def write_store(root: Path, messages: int, body_size: int) -> int:
    """The commit log, and the consume queues a broker would have dispatched (so that reads can go through them)."""
    import numpy as np

    from protocol.hashing import tags_code
    from protocol.ids import pack_host
    from protocol.message import pack_record_into, record_size
    from protocol.properties import encode_properties

    log_dir = root / "commitlog"
    log_dir.mkdir(parents=True, exist_ok=True)
    born, store = pack_host("10.0.0.7", 51000), pack_host("10.0.0.1", 10911)
    chunk = bytearray(64 << 20)
    written = 0
    units: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    keys_of: dict[tuple[str, int], list[str]] = {}
    with open(log_dir / f"{0:020d}", "wb") as f:
        f.truncate(FILE_SIZE)  # pre-allocated, zero-filled (sparse)
        pos = 0
        body = bytes(range(256))[:body_size] * (body_size // 256 + 1)
        body = body[:body_size]
        for i in range(messages):
            topic = f"BenchTopic{i % TOPICS}".encode()
            tag = f"tag{i % 16}"
            props = encode_properties({"TAGS": tag, "KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}"}).encode()
            size = record_size(len(body), len(topic), len(props), False, False)
            if pos + size > len(chunk):
                f.seek(written)
                f.write(chunk[:pos])
                written += pos
                pos = 0
            queue = units.setdefault((topic.decode(), i % 4), [])
            pack_record_into(chunk, pos, queue_id=i % 4, flag=0, queue_offset=len(queue),
                             physical_offset=written + pos,
                             sys_flag=0, born_timestamp=1_700_000_000_000 + i, born_host=born,
                             store_timestamp=1_700_000_000_100 + i, store_host=store, reconsume_times=0,
                             prepared_transaction_offset=0, body=body, topic=topic, properties=props)
            queue.append((written + pos, size, tags_code(tag)))
            keys_of.setdefault((topic.decode(), i % 4), []).append(f"k{i}")
            pos += size
        f.seek(written)
        f.write(chunk[:pos])
        written += pos
    write_index(root / "index", [(t, k, off) for (t, _q), rows in units.items() for (off, _s, _c), k in
                                 zip(rows, keys_of[(t, _q)])])
    unit = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
    for (topic_name, queue_id), rows in units.items():
        directory = root / "consumequeue" / topic_name / str(queue_id)
        directory.mkdir(parents=True, exist_ok=True)
        per_file = CQ_FILE_SIZE // 20
        for k in range(0, len(rows), per_file):
            table = np.array(rows[k:k + per_file], unit)
            with open(directory / f"{k * 20:020d}", "wb") as cq:
                cq.truncate(CQ_FILE_SIZE)
                cq.write(table.tobytes())
    return written


def write_index(directory: Path, entries: list[tuple[str, str, int]]) -> None:
    """One index file in the reference's layout holding topic#key -> commit-log offset for every entry (as the
    broker writes for KEYS), four entries per hash slot."""
    import numpy as np

    from protocol.hashing import index_key_hash

    directory.mkdir(parents=True, exist_ok=True)
    n = len(entries)
    slots = max(1, -(-(n + 1) // 4))  # room for entry 0 (never used) and n entries
    hashes = np.array([index_key_hash(f"{t}#{k}") for t, k, _ in entries], np.int64)
    offsets = np.array([off for _, _, off in entries], np.int64)
    slot = hashes % slots
    index = np.arange(1, n + 1, dtype=np.int64)  # entry 0 is never used
    order = np.lexsort((index, slot))
    sorted_slot, sorted_index = slot[order], index[order]
    previous = np.zeros(n, np.int64)
    same = sorted_slot[1:] == sorted_slot[:-1]
    previous[order[1:]] = np.where(same, sorted_index[:-1], 0)
    last = np.ones(n, bool)
    last[:-1] = ~same
    table = np.zeros(slots, ">i4")
    table[sorted_slot[last]] = sorted_index[last]
    entry = np.zeros(n + 1, np.dtype([("hash", ">i4"), ("offset", ">i8"), ("diff", ">i4"), ("prev", ">i4")]))
    entry["hash"][1:], entry["offset"][1:], entry["prev"][1:] = hashes, offsets, previous
    header = np.array([(1_700_000_000_000, 1_700_000_000_000 + n, int(offsets.min()), int(offsets.max()),
                        int(last.sum()), n + 1)],
                      np.dtype([("b", ">i8"), ("e", ">i8"), ("bo", ">i8"), ("eo", ">i8"), ("s", ">i4"), ("c", ">i4")]))
    with open(directory / "20231114221320000", "wb") as f:
        f.write(header.tobytes())
        f.write(table.tobytes())
        f.write(entry.tobytes())
        f.write(bytes(20 * (4 * slots - n - 1)) if 4 * slots > n + 1 else b"")


def floor_source():
    """A Python data source with no decoding at all: `rows` precomputed rows in `partitions` partitions, in
    batches of the size the rocketmq reader yields. Its timings are what Spark itself costs for a Python
    source (task start, Arrow transfer, rows into the JVM), the lower bound for any Python reader."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class _Part(InputPartition):
        def __init__(self, rows: int, index: int = 0) -> None:
            self.rows = rows
            self.index = index

    class _Reader(DataSourceReader):
        def __init__(self, options) -> None:
            self.options = options

        def partitions(self):
            rows, parts = int(self.options["rows"]), int(self.options.get("partitions", 2))
            return [_Part(rows * (k + 1) // parts - rows * k // parts, k) for k in range(parts)]

        def read(self, partition):
            import numpy as np
            import pyarrow as pa
            import pyarrow.compute as pc

            from spark_export.records import DEFAULT_BATCH_ROWS

            n, step = partition.rows, DEFAULT_BATCH_ROWS
            if self.options.get("store"):  # every column: the real reader's batches, decoded once per worker
                import builtins

                from spark_export.file_source import ReadOptions, RocketMQReader
                from spark_export.schema import arrow_for

                key = "_rocketmq_bench_floor_batches"
                cached = builtins.__dict__.get(key)
                if cached is None:
                    real = RocketMQReader(ReadOptions.parse({"path": self.options["store"]}), arrow_for("messages"))
                    cached = builtins.__dict__[key] = [list(real.read(p)) for p in real.partitions()]
                yield from cached[partition.index % len(cached)]
                return
            if self.options.get("strings"):
                index = pa.array(np.arange(n, dtype=np.int32))
                topic = pa.array([f"BenchTopic{i}" for i in range(8)]).take(pc.bit_wise_and(index, 7))
                tags = pa.array([f"tag{i}" for i in range(16)]).take(pc.bit_wise_and(index, 15))
                for i in range(0, n, step):
                    yield pa.RecordBatch.from_arrays([topic.slice(i, step), tags.slice(i, step)], ["topic", "tags"])
            else:
                values = pa.array(np.arange(n, dtype=np.int64))
                for i in range(0, n, step):
                    yield pa.RecordBatch.from_arrays([values.slice(i, step)], ["commitlog_offset"])

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "python_floor"

        def schema(self) -> str:
            if self.options.get("store"):
                from spark_export.schema import ddl_for

                return ddl_for("messages")
            return "topic string, tags string" if self.options.get("strings") else "commitlog_offset long"

        def reader(self, schema):
            return _Reader(self.options)

    return FloorSource


def timed_rounds(cases: list[tuple[str, object]], rounds: int) -> dict[str, list[float]]:
    """Seconds per run of every case: one warm-up each, then `rounds` rounds that run each case once, so a
    slow phase of the machine hits all cases alike instead of whichever case ran then."""
    for _, fn in cases:
        fn()
    times: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(rounds):
        for name, fn in cases:
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_export.bench")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body", type=int, default=128)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    parser.add_argument("--runs", type=int, default=5, help="timed rounds (each runs every case once)")
    parser.add_argument("--decode-only", action="store_true",
                        help="no Spark: time the reader's read() per partition in this process")
    args = parser.parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="mq-spark-bench-"))
    try:
        return _run(args, work)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


def decode_only(path: str, runs: int) -> None:
    """The Python side alone: each partition's read() in this process (warm, best of `runs`), per column set:
    what a Spark task's Python worker spends decoding, without Spark's own costs around it."""
    import pyarrow as pa

    from spark_export.file_source import ReadOptions, RocketMQReader
    from spark_export.schema import arrow_for

    full = arrow_for("messages")
    print(f"{'columns':<20} {'partition':>9} {'records':>9} {'best ms':>8} {'records/s':>12}")
    for columns in ("commitlog_offset", "topic,tags", None):
        options = ReadOptions.parse({"path": path, **({"columns": columns} if columns else {})})
        schema = full if columns is None else pa.schema([full.field(c) for c in options.columns])
        reader = RocketMQReader(options, schema)
        for index, partition in enumerate(reader.partitions()):
            times, rows = [], 0
            for _ in range(runs + 1):  # the first is a warm-up (page cache, compiled kernels)
                started = time.perf_counter()
                rows = sum(batch.num_rows for batch in reader.read(partition))
                times.append(time.perf_counter() - started)
            best = min(times[1:])
            print(f"{columns or 'all':<20} {index:>9} {rows:>9} {best * 1000:>8.1f} {rows / best:>12,.0f}")


def _run(args, work: Path) -> int:
    store = work / "store"
    started = time.perf_counter()
    data_bytes = write_store(store, args.messages, args.body)
    print(f"store: {args.messages} messages, {data_bytes / 1e6:.1f} MB in a 1 GiB file "
          f"({time.perf_counter() - started:.1f}s to write)")
    if args.decode_only:
        decode_only(str(store), args.runs)
        return 0

    from spark_export.job import build_session
    from spark_export.pushdown import pushed_reads_stay_with_their_scan

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = build_session(args.master, "rocketmq-bench", progress=False)
    spark.sparkContext.setLogLevel("ERROR")
    path = str(store)
    full = spark.read.format("rocketmq").load(path)
    pruned = spark.read.format("rocketmq").option("columns", "topic,tags").load(path)
    offsets_only = spark.read.format("rocketmq").option("columns", "commitlog_offset").load(path)
    spark.dataSource.register(floor_source())
    floor_long = spark.read.format("python_floor").option("rows", args.messages).load()
    floor_strings = spark.read.format("python_floor").option("rows", args.messages).option("strings", "1").load()
    floor_all = spark.read.format("python_floor").option("rows", args.messages).option("store", str(store)).load()
    parquet_dir = str(work / "parquet")
    full.write.mode("overwrite").parquet(parquet_dir)
    parquet = spark.read.parquet(parquet_dir)
    n = args.messages

    def group(df):
        return lambda: df.groupBy("topic", "tags").count().collect()

    def pushed(on: bool, query):
        def run():
            spark.conf.set("spark.sql.python.filterPushdown.enabled", "true" if on else "false")
            try:
                return query()
            finally:
                spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        return run

    # A fresh DataFrame per query: Spark keeps the read first planned for a DataFrame (per load()) and reuses it.
    def fresh():
        return spark.read.format("rocketmq").load(path)

    one_topic = lambda: fresh().where("topic = 'BenchTopic3'").groupBy("tags").count().collect()  # noqa: E731
    # The same answer with the topic in the `topics` option: the table itself is narrowed (safe on every Spark).
    topic_option = lambda: (spark.read.format("rocketmq").option("topics", "BenchTopic3").load(path)  # noqa: E731
                            .groupBy("tags").count().collect())
    one_key = lambda: fresh().where(f"keys = 'k{n // 2 + 3}'").collect()  # noqa: E731
    # The same query shape when the consume queues hold no matching unit (there is no queue 9): what Spark costs per
    # pushed query before any row is read (planning worker, two stages, Python task start-up).
    def no_match():
        return fresh().where("topic = 'BenchTopic3' AND queue_id = 9").groupBy("tags").count().collect()

    # The same query reading 100 rows (the first 50 of each of the topic's two queues): the per-query cost once read
    # tasks run and the aggregation's second stage has rows, the floor of any pushed query that finds something.
    def few_rows():
        return fresh().where("topic = 'BenchTopic3' AND queue_offset < 50").groupBy("tags").count().collect()

    cases = [
        ("parquet: count()", lambda: parquet.count()),
        ("parquet: groupBy(topic,tags)", group(parquet)),
        ("rocketmq all columns: count()", lambda: full.count()),
        ("rocketmq all columns: groupBy(topic,tags)", group(full)),
        ("rocketmq columns=commitlog_offset: count()", lambda: offsets_only.count()),
        ("rocketmq columns=topic,tags: count()", lambda: pruned.count()),
        ("rocketmq columns=topic,tags: groupBy", group(pruned)),
        ("no-decode python source: count()", lambda: floor_long.count()),
        ("no-decode python source: groupBy", group(floor_strings)),
        ("no-decode python source, all columns: groupBy", group(floor_all)),
        ("parquet: sum(length(body)) (full scan)", lambda: parquet.selectExpr("sum(length(body))").collect()),
        ("rocketmq: sum(length(body)) (full scan)", lambda: full.selectExpr("sum(length(body))").collect()),
        ("rocketmq: one topic of ten, pushed", pushed(True, one_topic)),
        ("rocketmq: one topic of ten, scanned", pushed(False, one_topic)),
        ("rocketmq: one topic of ten, topics option", topic_option),
        ("rocketmq: keys = one key, pushed", pushed(True, one_key)),
        ("rocketmq: keys = one key, scanned", pushed(False, one_key)),
    ]
    narrows = pushed_reads_stay_with_their_scan()
    if narrows:  # what a pushed query costs before its rows do (meaningless where the reader takes no filter)
        cases += [("rocketmq: one topic, no unit matches, pushed", pushed(True, no_match)),
                  ("rocketmq: one topic, 100 rows, pushed", pushed(True, few_rows))]
        assert pushed(True, no_match)() == pushed(False, no_match)() == []
        assert sorted(pushed(True, few_rows)()) == sorted(pushed(False, few_rows)()) != []
    assert sorted(pushed(True, one_topic)()) == sorted(pushed(False, one_topic)()) == sorted(topic_option())
    assert pushed(True, one_key)() == pushed(False, one_key)() and len(one_key()) == 1
    assert full.count() == n == parquet.count() == pruned.count()
    assert sorted(group(full)()) == sorted(group(parquet)()) == sorted(group(pruned)())
    print(f"timing {len(cases)} cases, {args.runs} rounds after a warm-up ...", flush=True)
    times = timed_rounds(cases, args.runs)
    print(f"{'case':<45} {'best s':>8} {'median s':>9} {'rows/s (median)':>16}")
    best, median = {}, {}
    for name, _ in cases:
        best[name], median[name] = min(times[name]), statistics.median(times[name])
        print(f"{name:<45} {best[name]:>8.3f} {median[name]:>9.3f} {n / median[name]:>16,.0f}")
    print("\nrocketmq rate / parquet rate (target >= 0.5), from medians and from best runs:")
    for query, pq, rows in (
        ("count()", "parquet: count()", ("rocketmq columns=commitlog_offset: count()",
                                         "rocketmq columns=topic,tags: count()", "rocketmq all columns: count()",
                                         "no-decode python source: count()")),
        ("groupBy(topic,tags)", "parquet: groupBy(topic,tags)", ("rocketmq columns=topic,tags: groupBy",
                                                                 "rocketmq all columns: groupBy(topic,tags)",
                                                                 "no-decode python source: groupBy",
                                                                 "no-decode python source, all columns: groupBy")),
    ):
        for name in rows:
            label = name.split(":")[0].replace("rocketmq ", "")
            ratios = f"median {median[pq] / median[name]:>5.2f}x   best {best[pq] / best[name]:>5.2f}x"
            print(f"  {query:<20} {label:<28} {ratios}")
    print("(no-decode python source: Spark's own cost for a Python data source, the ceiling for any reader)")
    print("\nfilter pushdown (scanned time / pushed time, target >= 5x for one topic of ten);\n  this Spark "
          + ("keeps a pushed read with its scan: pushed filters narrow the read" if narrows else
             "shares a pushed read between scans: the reader takes no filter (pushed = scanned)"))
    for label, name, how in (("where topic = one of ten, groupBy(tags)", "one topic of ten", "pushed"),
                             ("topics option = one of ten, groupBy(tags)", "one topic of ten", "topics option"),
                             ("where keys = one key", "keys = one key", "pushed")):
        on, off = f"rocketmq: {name}, {how}", f"rocketmq: {name}, scanned"
        print(f"  {label:<42} median {median[off] / median[on]:>6.1f}x   best {best[off] / best[on]:>6.1f}x")
    if narrows:
        scanned = median["rocketmq: one topic of ten, scanned"]
        empty, few = median["rocketmq: one topic, no unit matches, pushed"], median[
            "rocketmq: one topic, 100 rows, pushed"]
        print(f"  (Spark's cost per pushed topic query: median {empty:.3f} s when no unit matches, {few:.3f} s when a "
              f"few\n   rows are read and aggregated; scanned / those: {scanned / empty:.1f}x and {scanned / few:.1f}x, "
              f"the ceiling of the topic ratio\n   for a reader whose rows cost nothing)")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
