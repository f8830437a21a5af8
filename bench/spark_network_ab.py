"""A/B timing of two checkouts of the Spark network read against one cluster: interleaved, so a busy moment of a
shared machine hits both alike.

    python bench/spark_network_ab.py --old DIR [--new DIR] [--messages 1000000] [--rounds 2] [--runs 2]
                                     [--max-per-trigger 200000] [--dir WORK]

--old / --new are source trees of this project (e.g. `git archive <commit> | tar -x -C DIR`; --new defaults to this
checkout). The cluster of bench/spark_network.py (two brokers, one topic, 10 queues) is prepared once; then each
round runs one Spark session per checkout (the order alternates between rounds), with PYTHONPATH on that checkout, so
the driver, the streaming source's runner and the Python workers all import its spark_export. In a session, after a
warm-up of every case, --runs runs of each: the file source's count(), the network count(), a
trigger(availableNow=True) stream from earliest with maxOffsetsPerTrigger into the noop sink, and the same stream
from latest (nothing to read). Printed: per session the median (and best) seconds, the ratios stream / file and
network / file and the last stream's phases (durationMs); at the end, per checkout, the median over its sessions
of those ratios, from the median runs and from the best runs (on a shared machine, a load spike only ever adds
time: the best runs are the steadier figure).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CASES = ("file count", "network count", "stream", "stream nothing")


def child(info_path: str) -> int:
    """One Spark session of the checkout on PYTHONPATH: the cases' median seconds as one JSON line."""
    info = json.loads(Path(info_path).read_text())
    from spark_export.job import build_session

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = build_session(info["master"], "rocketmq-network-ab", progress=False)
    spark.sparkContext.setLogLevel("ERROR")
    opts = {"nameServer": info["namesrv"], "topic": info["topic"]}
    total = info["total"]
    checkpoints = Path(info["workdir"]) / "ab-checkpoints"
    made = 0
    phases: dict[str, int] = {}  # the last reading stream's durationMs, summed over its micro-batches

    def files() -> int:
        frames = [spark.read.format("rocketmq").load(store) for store in info["stores"]]
        return frames[0].unionByName(frames[1]).count()

    def network() -> int:
        return spark.read.format("rocketmq").options(**opts).load().count()

    def stream(starting: str = "earliest", expect: int = total) -> int:
        nonlocal made
        made += 1
        checkpoint = checkpoints / str(made)
        query = (spark.readStream.format("rocketmq").options(**opts).option("startingOffsets", starting)
                 .option("maxOffsetsPerTrigger", str(info["max_per_trigger"])).load()
                 .writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(checkpoint)).start())
        try:
            if not query.awaitTermination(600):
                raise RuntimeError("the availableNow query did not end within 600 s")
        finally:
            query.stop()
            shutil.rmtree(checkpoint, ignore_errors=True)
        if query.exception() is not None:
            raise RuntimeError(f"the streaming query failed: {query.exception()}")
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        if expect:
            phases.clear()
            for progress in query.recentProgress:
                for key, ms in (progress.get("durationMs") or {}).items():
                    phases[key] = phases.get(key, 0) + ms
        if rows != expect:
            raise RuntimeError(f"the stream read {rows} rows, not {expect}")
        return rows

    cases = {"file count": files, "network count": network, "stream": stream,
             "stream nothing": lambda: stream("latest", 0)}
    assert files() == total == network(), "counts differ"
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(info["runs"]):
        for name, fn in cases.items():
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    spark.stop()
    print("AB " + json.dumps({**{name: statistics.median(t) for name, t in times.items()}, "phases": phases,
                              "best": {name: min(t) for name, t in times.items()}}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/spark_network_ab.py")
    parser.add_argument("--old", help="source tree of the 'before' code (required)")
    parser.add_argument("--new", default=str(ROOT), help="source tree of the 'after' code (default: this checkout)")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body", type=int, default=128)
    parser.add_argument("--queues-per-broker", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rounds", type=int, default=2, help="sessions per checkout (interleaved)")
    parser.add_argument("--runs", type=int, default=2, help="timed runs of each case per session")
    parser.add_argument("--max-per-trigger", type=int, default=200_000)
    parser.add_argument("--dir", help="work directory (default: ab-work/ in this checkout, removed at the end)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child)
    if not args.old:
        parser.error("--old DIR is required")
    sys.path[:0] = [str(ROOT), str(HERE)]
    from spark_network_cluster import TOPIC, prepare

    work = Path(args.dir) if args.dir else ROOT / "ab-work"
    work.mkdir(parents=True, exist_ok=True)
    trees = {"old": str(Path(args.old).resolve()), "new": str(Path(args.new).resolve())}
    cluster = prepare(work / "cluster", args.messages, args.body, args.queues_per_broker)
    results: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    try:
        info = {"namesrv": cluster.namesrv, "topic": TOPIC, "stores": cluster.stores, "total": cluster.total,
                "workdir": str(work), "master": args.master, "runs": args.runs,
                "max_per_trigger": args.max_per_trigger}
        info_path = work / "ab-info.json"
        info_path.write_text(json.dumps(info))
        for round_ in range(args.rounds):
            for label in (("old", "new") if round_ % 2 == 0 else ("new", "old")):
                env = dict(os.environ, PYTHONPATH=trees[label], NUMBA_CACHE_DIR=str(work / "numba-cache"))
                out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(info_path)],
                                     env=env, cwd=str(work), capture_output=True, text=True, timeout=3600)
                line = next((x for x in out.stdout.splitlines() if x.startswith("AB ")), None)
                if out.returncode != 0 or line is None:
                    raise RuntimeError(f"{label} session failed: {out.stderr[-3000:]}")
                median = json.loads(line[3:])
                results[label].append(median)
                print(f"round {round_ + 1} {label}: " + ", ".join(f"{k} {median[k]:.2f} s" for k in CASES)
                      + " (best " + ", ".join(f"{median['best'][k]:.2f}" for k in CASES) + ")"
                      + f"; stream/file {median['file count'] / median['stream']:.2f}x, network/file "
                      f"{median['file count'] / median['network count']:.2f}x\n  last stream, ms summed over its "
                      "micro-batches: " + ", ".join(f"{k} {v:,}" for k, v in sorted(median["phases"].items(),
                                                                                      key=lambda kv: -kv[1])),
                      flush=True)
    finally:
        cluster.stop()
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    for label in ("old", "new"):
        runs = results[label]
        if runs:
            ratios = []
            for key in ("median", "best"):
                pick = [r if key == "median" else r["best"] for r in runs]
                stream = statistics.median(r["file count"] / r["stream"] for r in pick)
                net = statistics.median(r["file count"] / r["network count"] for r in pick)
                ratios.append(f"from {key} runs: stream/file {stream:.2f}x, network/file count {net:.2f}x")
            print(f"{label} ({trees[label]}), median over {len(runs)} sessions; " + "; ".join(ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
