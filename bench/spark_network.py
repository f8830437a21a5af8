"""Spark network read benchmark: the `rocketmq` source reading a two-broker cluster over remoting vs the file source
reading the same brokers' store directories.

    python bench/spark_network.py [--messages 1000000] [--body 128] [--queues-per-broker 5] [--master local[2]]
                                  [--runs 3] [--max-per-trigger 200000] [--pull-batch-size N] [--pulls-in-flight N]
                                  [--answer-cap BYTES] [--standalone] [--profile FILE] [--no-spark] [--dir DIR]

Starts broker-a (embedded name server) and broker-b (registered with it), creates one topic with
--queues-per-broker queues on each (UPDATE_AND_CREATE_TOPIC), sends --messages messages (tags, a key each) with
the project's producer in batches, then in one SparkSession (local[2], spark_export.job.build_session as
spark_export/bench.py) times, after a warm-up, --runs rounds of:
  file      spark.read.format("rocketmq").load(store) of each broker's store directory, union-ed
  network   spark.read.format("rocketmq").option("nameServer", ns).option("topic", T).load()
  stream    spark.readStream ... startingOffsets earliest, into the noop sink, with no maxOffsetsPerTrigger (one
            micro-batch) and with --max-per-trigger, with
            trigger(availableNow=True), timed from start() to termination (a fresh checkpoint per run); and the same
            query from 'latest' (nothing to read): what a streaming query costs by itself
for count(), a batch write of every row to the noop sink (what the stream does with its rows: count() lets the JVM
skip converting the columns) and groupBy(topic, tags).count(), with CPU seconds per run (JVM, Python workers, brokers) and the rate
ratios network/file and stream/file at the end. Then the Python workers' peak memory (RssAnon from /proc, one task
per worker) for network reads of whole ranges, of a tenth of each range and with a bigger pull size.

--standalone (or --no-spark: only this) reads every queue in this process with spark_export.cluster.pull_reader:
the pulls alone (RangePuller) and pulls + decode (read_range), to separate the Python side from Spark's costs,
and this process's RssAnon while all the messages pass through one reader; --profile FILE writes a cProfile (CPU
time) of a read_range pass. --answer-cap sets the brokers' maxTransferBytesOnMessageInMemory.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for where in (str(ROOT), str(ROOT / "bench")):
    if where not in sys.path:
        sys.path.insert(0, where)
# Spark's Python workers (planning next to the driver, reading in the executors) import spark_export too.
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if str(ROOT) not in _paths:
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *_paths])

from spark_network_cluster import (
    TOPIC,
    Cluster,
    WorkerMemory,
    cpu_seconds,
    prepare,
    rss_anon,
    run_available_now,
    spark_cpu,
)


def reader_options(cluster: Cluster, args) -> dict[str, str]:
    """The network read's options (the pull settings only when given: otherwise the source's defaults)."""
    opts = {"nameServer": cluster.namesrv, "topic": TOPIC}
    if args.pull_batch_size:
        opts["pullBatchSize"] = str(args.pull_batch_size)
    if args.pulls_in_flight:
        opts["pullsInFlight"] = str(args.pulls_in_flight)
    return opts


def record_size(cluster: Cluster) -> int:
    """Bytes of one stored record (all are alike): the size field of queue 0's first consume-queue unit."""
    with open(Path(cluster.stores[0]) / "consumequeue" / TOPIC / "0" / f"{0:020d}", "rb") as f:
        return int.from_bytes(f.read(20)[8:12], "big")


# ------------------------------------------------------------------------------------------------ no Spark
def standalone(cluster: Cluster, args) -> None:
    """Every queue read in this process, one after the other: pulls alone, then pulls + decode into Arrow."""
    from spark_export.cluster.options import ClusterOptions
    from spark_export.cluster.pull_reader import RangePuller, read_range
    from spark_export.cluster.remote import ClusterClient
    from spark_export.schema import arrow_for

    options = ClusterOptions.parse(reader_options(cluster, args))
    schema = arrow_for("messages")
    with ClusterClient(options) as client:
        homes = client.run(client.queues(options.topics))

    def pulls_only() -> int:
        rows = 0
        for queue, addrs in homes.items():
            with ClusterClient(options) as client:
                runs = RangePuller(client, queue, addrs).runs(0, cluster.counts[(queue.broker, queue.queue_id)])
                for _ in range(10_000_000):  # bounded: one step per pull answer
                    try:
                        rows += client.run(runs.__anext__())[1]
                    except StopAsyncIteration:
                        break
        return rows

    def decoded() -> int:
        return sum(batch.num_rows for queue, addrs in homes.items()
                   for batch in read_range(options, queue, addrs, 0, cluster.counts[(queue.broker, queue.queue_id)],
                                           schema))

    print(f"\nstandalone (no Spark, one queue after the other, pullBatchSize {options.pull_batch_size}, "
          f"pullsInFlight {options.pulls_in_flight}):")
    for label, fn in (("pulls only (RangePuller)", pulls_only), ("pulls + decode (read_range)", decoded)):
        times = []
        for _ in range(args.runs + 1):
            brokers = sum(cpu_seconds(b.pid) for b in cluster.brokers)
            started, cpu = time.perf_counter(), time.process_time()
            rows = fn()
            times.append((time.perf_counter() - started, time.process_time() - cpu,
                          sum(cpu_seconds(b.pid) for b in cluster.brokers) - brokers))
            assert rows == cluster.total, (label, rows, cluster.total)
        wall = min(t[0] for t in times[1:])
        cpu, brokers = (statistics.median(t[k] for t in times[1:]) for k in (1, 2))
        print(f"  {label:<30} best {wall:6.2f} s {rows / wall:>11,.0f} msgs/s   CPU s (median): reader {cpu:5.2f}, "
              f"brokers {brokers:5.2f}")
    memory_curve(cluster, options, homes, schema)
    if args.profile:
        profiler = cProfile.Profile(time.process_time)  # CPU time: steady when other jobs share the cores
        profiler.runcall(decoded)
        profiler.dump_stats(args.profile)
        print(f"  cProfile (CPU time) of one read_range pass: {args.profile} (python -c \"import pstats; pstats.Stats("
              f"'{args.profile}').sort_stats('tottime').print_stats(25)\")")


def memory_curve(cluster: Cluster, options, homes, schema) -> None:
    """This process's RssAnon while read_range reads every queue, one after the other: all messages pass through
    one reader, so a reader holding its ranges would grow by their size; a bounded one levels off."""
    from spark_export.cluster.pull_reader import read_range

    points, rows, peak = [], 0, 0
    every = max(1, cluster.total // 10)
    before = rss_anon()
    for queue, addrs in homes.items():
        for batch in read_range(options, queue, addrs, 0, cluster.counts[(queue.broker, queue.queue_id)], schema):
            rows += batch.num_rows
            now = rss_anon()
            peak = max(peak, now)
            if rows // every > len(points):
                points.append(now)
    mib = 2 ** 20
    print(f"  RssAnon of this process (MiB) before {before / mib:.0f}, after every tenth of the "
          f"{rows:,} records ({rows * record_size(cluster) / mib:.0f} MiB) read: "
          + " ".join(f"{p / mib:.0f}" for p in points) + f"; peak {peak / mib:.0f}")


# ------------------------------------------------------------------------------------------------ Spark
def timed_rounds(cases, rounds: int, brokers: list[int]) -> tuple[dict[str, list[float]], dict[str, list[tuple]]]:
    """One warm-up of every case, then `rounds` rounds running each case once (a slow moment hits all alike).
    Returns the seconds per run and the CPU seconds per run of (Spark: driver, JVM, Python workers; brokers)."""
    for _, fn in cases:
        fn()
    times: dict[str, list[float]] = {name: [] for name, _ in cases}
    cpu: dict[str, list[tuple]] = {name: [] for name, _ in cases}
    for _ in range(rounds):
        for name, fn in cases:
            (jvm, python), brokers_before = spark_cpu(set(brokers)), sum(cpu_seconds(b) for b in brokers)
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
            jvm_after, python_after = spark_cpu(set(brokers))
            cpu[name].append((jvm_after - jvm, python_after - python,
                              sum(cpu_seconds(b) for b in brokers) - brokers_before))
    return times, cpu


def run_spark(cluster: Cluster, args) -> None:
    from spark_export.job import build_session

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = build_session(args.master, "rocketmq-network-bench", progress=False)
    spark.sparkContext.setLogLevel("ERROR")
    n = cluster.total
    opts = reader_options(cluster, args)

    def files():
        frames = [spark.read.format("rocketmq").load(store) for store in cluster.stores]
        return frames[0].unionByName(frames[1])

    def network(**extra: str):
        reader = spark.read.format("rocketmq")
        for key, value in {**opts, **extra}.items():
            reader = reader.option(key, value)
        return reader.load()

    file_df, net_df = files(), network()
    streams = 0
    phases: dict[str, int] = {}  # the last stream's durationMs, summed over its micro-batches

    def stream(starting: str = "earliest", expect: int = n, limit: int | None = args.max_per_trigger) -> int:
        """availableNow from `starting` (everything, or nothing with 'latest': what a streaming query costs by
        itself), maxOffsetsPerTrigger per micro-batch (limit None: no limit, everything in one micro-batch),
        into the noop sink."""
        nonlocal streams
        streams += 1
        checkpoint = cluster.workdir / "checkpoints" / str(streams)
        reader = spark.readStream.format("rocketmq").option("startingOffsets", starting)
        for key, value in opts.items():
            reader = reader.option(key, value)
        if limit:
            reader = reader.option("maxOffsetsPerTrigger", str(limit))
        query = (reader.load().writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(checkpoint)).start())
        run_available_now(query)
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        batches = sum(1 for p in query.recentProgress if p["numInputRows"])
        if expect:
            phases.clear()
            for progress in query.recentProgress:
                for key, ms in (progress.get("durationMs") or {}).items():
                    phases[key] = phases.get(key, 0) + ms
        shutil.rmtree(checkpoint, ignore_errors=True)
        if rows != expect:
            raise RuntimeError(f"the streaming query read {rows} rows in {batches} micro-batches, not {expect}")
        return batches

    def group(df):
        return lambda: df.groupBy("topic", "tags").count().collect()

    assert file_df.count() == n == net_df.count(), (file_df.count(), net_df.count(), n)
    assert sorted(group(file_df)()) == sorted(group(net_df)())
    batches = stream()
    print(f"checked: {n:,} rows from both sources, equal groupBy(topic, tags); the stream read them in {batches} "
          f"micro-batches", flush=True)

    def noop(df):
        """Every row materialized, as the stream's noop sink does (count() lets the JVM skip the columns)."""
        return lambda: df.write.format("noop").mode("overwrite").save()

    cases = [
        ("file: count()", lambda: file_df.count()),
        ("network: count()", lambda: net_df.count()),
        ("file: write noop", noop(file_df)),
        ("network: write noop", noop(net_df)),
        ("file: groupBy(topic,tags)", group(file_df)),
        ("network: groupBy(topic,tags)", group(net_df)),
        ("stream availableNow, one micro-batch", lambda: stream(limit=None)),
        (f"stream availableNow, {args.max_per_trigger:,}/trigger", stream),
        ("stream availableNow, nothing to read", lambda: stream("latest", 0)),
    ]
    print(f"timing {len(cases)} cases, {args.runs} rounds after a warm-up ...", flush=True)
    times, cpu = timed_rounds(cases, args.runs, [b.pid for b in cluster.brokers])
    print(f"{'case':<42} {'best s':>8} {'median s':>9} {'msgs/s (median)':>16}   CPU s (median): JVM, Python, "
          "brokers")
    median = {name: statistics.median(t) for name, t in times.items()}
    best = {name: min(t) for name, t in times.items()}
    whole_name, stream_name, empty_name = cases[-3][0], cases[-2][0], cases[-1][0]
    for name, _ in cases:
        used = [statistics.median(c[k] for c in cpu[name]) for k in range(3)]
        rate = "-" if name == empty_name else f"{n / median[name]:,.0f}"
        print(f"{name:<42} {best[name]:>8.3f} {median[name]:>9.3f} {rate:>16}   "
              + " ".join(f"{u:6.2f}" for u in used))
    print("  (last stream run, ms summed over its micro-batches: "
          + ", ".join(f"{k} {v:,}" for k, v in sorted(phases.items(), key=lambda kv: -kv[1])) + ")")
    print("\nrate ratios (target: network/file >= 0.5, stream/file >= 0.4), from medians and from best runs:")
    for label, num, den in (("network / file, count()", "network: count()", "file: count()"),
                            ("network / file, groupBy", "network: groupBy(topic,tags)", "file: groupBy(topic,tags)"),
                            ("network / file, write noop", "network: write noop", "file: write noop"),
                            ("stream (one batch) / file count()", whole_name, "file: count()"),
                            ("stream (one batch) / file noop", whole_name, "file: write noop"),
                            ("stream / file count()", stream_name, "file: count()"),
                            ("stream / file write noop", stream_name, "file: write noop"),
                            ("stream / network count()", stream_name, "network: count()")):
        print(f"  {label:<34} median {median[den] / median[num]:>5.2f}x   best {best[den] / best[num]:>5.2f}x")
    net = median[stream_name] - median[empty_name]
    print(f"  the stream without a streaming query's own cost (the nothing-to-read query's {median[empty_name]:.2f} s): "
          f"{n / net:,.0f} msgs/s, {median['file: count()'] / net:.2f}x the file count() rate")
    spark.stop()
    memory(cluster, args)


def memory(cluster: Cluster, args) -> None:
    """The Python workers' anonymous memory while reading whole ranges, a tenth of each range, and with a bigger
    pull size: bounded by pulls in flight x pull size (plus the decode batch), not by the range.

    A session of its own with spark.python.worker.reuse=false: every task gets a freshly forked worker, so a
    worker's peak is one task's (one queue range's) peak, not what earlier queries left in its allocator."""
    from pyspark import SparkConf, SparkContext

    from spark_export.cluster.options import ClusterOptions
    from spark_export.job import build_session

    # A context made first with the core settings build_session would give (and no worker reuse): its getOrCreate
    # then takes this context and adds its session settings.
    SparkContext.getOrCreate(SparkConf().setMaster(args.master).setAppName("rocketmq-network-bench-memory")
                             .set("spark.python.worker.reuse", "false")
                             .set("spark.python.unix.domain.socket.enabled", "true")
                             .set("spark.ui.showConsoleProgress", "false"))
    spark = build_session(args.master, "rocketmq-network-bench-memory", progress=False)
    assert spark.sparkContext.getConf().get("spark.python.worker.reuse") == "false"
    spark.sparkContext.setLogLevel("ERROR")
    opts = reader_options(cluster, args)

    def network(**extra: str):
        reader = spark.read.format("rocketmq")
        for key, value in {**opts, **extra}.items():
            reader = reader.option(key, value)
        return reader.load()

    size = record_size(cluster)
    per_queue = max(cluster.counts.values())
    defaults = ClusterOptions.parse(opts)
    tenth = {TOPIC: {b: {str(q): c // 10 for (bb, q), c in cluster.counts.items() if bb == b}
                     for b, _ in cluster.counts}}
    bigger = str(defaults.pull_batch_size * 4)
    frames = [spark.read.format("rocketmq").load(store) for store in cluster.stores]
    print(f"\nPython worker memory (RssAnon sampled every 10 ms, a fresh worker per task; a record is {size} bytes, "
          f"one queue's range {per_queue:,} records = {per_queue * size / 2**20:.1f} MiB; pullBatchSize "
          f"{defaults.pull_batch_size} records = {defaults.pull_batch_size * size / 2**20:.2f} MiB, "
          f"{defaults.pulls_in_flight} in flight):")
    for label, fn in (
        ("network count(), a tenth of each range", lambda: network(endingOffsets=json.dumps(tenth)).count()),
        ("network count(), whole ranges", lambda: network().count()),
        (f"network count(), pullBatchSize {bigger}", lambda: network(pullBatchSize=bigger).count()),
        ("file source count() (its files are mapped)", lambda: frames[0].unionByName(frames[1]).count()),
    ):
        with WorkerMemory() as sampled:
            fn()
        print(f"  {label:<44} {sampled.summary()}", flush=True)
    spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/spark_network.py")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body", type=int, default=128)
    parser.add_argument("--queues-per-broker", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--runs", type=int, default=3, help="timed rounds (each runs every case once)")
    parser.add_argument("--max-per-trigger", type=int, default=200_000, help="maxOffsetsPerTrigger of the stream")
    parser.add_argument("--pull-batch-size", type=int, help="option pullBatchSize (default: the source's)")
    parser.add_argument("--pulls-in-flight", type=int, help="option pullsInFlight (default: the source's)")
    parser.add_argument("--answer-cap", type=int, metavar="BYTES",
                        help="the brokers' maxTransferBytesOnMessageInMemory (default: theirs, 256 KiB)")
    parser.add_argument("--standalone", action="store_true", help="also time read_range in this process, no Spark")
    parser.add_argument("--no-spark", action="store_true", help="only the standalone read (implies --standalone)")
    parser.add_argument("--profile", metavar="FILE", help="cProfile of one standalone read_range pass")
    parser.add_argument("--dir", help="work directory (default: a temporary one, removed at the end)")
    args = parser.parse_args(argv)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="mq-spark-net-"))
    work.mkdir(parents=True, exist_ok=True)
    extra = {"maxTransferBytesOnMessageInMemory": args.answer_cap} if args.answer_cap else None
    cluster = prepare(work / "cluster", args.messages, args.body, args.queues_per_broker, extra)
    try:
        if args.standalone or args.no_spark or args.profile:
            standalone(cluster, args)
        if not args.no_spark:
            run_spark(cluster, args)
    finally:
        cluster.stop()
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
