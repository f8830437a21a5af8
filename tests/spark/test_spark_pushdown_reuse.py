"""Pushdown must never let one query's narrowed read answer another query.

Spark 4.1-4.3 keep the read (partitions and read function) that filter pushdown planned on the relation, i.e. on
every DataFrame derived from one `load()`, and hand it to each later scan of that relation that pushes no filter to
Python, and to every scan of a query that scans the relation twice (the last to push wins). Each sequence below
answered wrongly while the reader narrowed its read there; every count is checked against a fresh DataFrame per
query with pushdown off."""

from __future__ import annotations

import pytest

from spark_export import pushdown

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
ORDERS = "topic = 'SparkOrders'"
AUDIT_Q1 = "topic = 'SparkAudit' AND queue_id = 1"
KEY = "keys = 'order-300 user-11'"
NOT_PUSHED = "tags = 'TagA' OR queue_id = 1"  # an OR: Spark does not hand it to a Python reader


@pytest.fixture
def pushdown_on(spark):
    spark.conf.set(PUSHDOWN, "true")
    try:
        yield spark
    finally:
        spark.conf.set(PUSHDOWN, "false")


class Counts:
    """Expected counts (a fresh DataFrame, nothing pushed), and the mismatches seen, all reported at once."""

    def __init__(self, spark, store) -> None:
        self.spark, self.store, self.wrong = spark, str(store), []
        self._known: dict[str | None, int] = {}

    def expected(self, where: str | None) -> int:
        if where not in self._known:
            df = self.spark.read.format("rocketmq").option("pushdown", "false").load(self.store)
            before = self.spark.conf.get(PUSHDOWN)
            self.spark.conf.set(PUSHDOWN, "false")
            try:
                self._known[where] = (df.where(where) if where else df).count()
            finally:
                self.spark.conf.set(PUSHDOWN, before)
        return self._known[where]

    def check(self, label: str, got: int, where: str | None = None, want: int | None = None) -> None:
        want = self.expected(where) if want is None else want
        if got != want:
            self.wrong.append(f"{label}: {got}, not {want}")


def test_one_dataframe_filtered_then_unfiltered_and_otherwise(pushdown_on, broker_store):
    spark, counts = pushdown_on, Counts(pushdown_on, broker_store.store_dir)
    assert len({counts.expected(w) for w in (None, ORDERS, AUDIT_Q1, KEY, NOT_PUSHED)}) == 5  # all tell apart
    df = spark.read.format("rocketmq").load(str(broker_store.store_dir))
    counts.check("filtered", df.where(ORDERS).count(), ORDERS)
    counts.check("then unfiltered", df.count(), None)
    counts.check("then an OR only", df.where(NOT_PUSHED).count(), NOT_PUSHED)
    counts.check("then another filter", df.where(AUDIT_Q1).count(), AUDIT_Q1)
    counts.check("then a key", df.where(KEY).count(), KEY)
    counts.check("then a grouped unfiltered query", sum(r["count"] for r in df.groupBy("topic").count().collect()),
                 None)
    derived = df.where(AUDIT_Q1)
    counts.check("a derived DataFrame", derived.count(), AUDIT_Q1)
    counts.check("its parent after it", df.count(), None)
    spark.conf.set(PUSHDOWN, "false")
    counts.check("pushdown off: unfiltered", df.count(), None)
    counts.check("pushdown off: filtered", df.where(ORDERS).count(), ORDERS)
    assert not counts.wrong, counts.wrong


def test_a_view_over_one_dataframe(pushdown_on, broker_store):
    spark, counts = pushdown_on, Counts(pushdown_on, broker_store.store_dir)
    spark.read.format("rocketmq").load(str(broker_store.store_dir)).createOrReplaceTempView("rocketmq_reuse")
    try:
        sql = "SELECT count(*) FROM rocketmq_reuse"
        counts.check("view filtered", spark.sql(f"{sql} WHERE {KEY}").first()[0], KEY)
        counts.check("view unfiltered", spark.sql(sql).first()[0], None)
        counts.check("view filtered again", spark.sql(f"{sql} WHERE {ORDERS}").first()[0], ORDERS)
        counts.check("view, an OR", spark.sql(f"{sql} WHERE {NOT_PUSHED}").first()[0], NOT_PUSHED)
    finally:
        spark.catalog.dropTempView("rocketmq_reuse")
    assert not counts.wrong, counts.wrong


def test_one_query_scanning_one_dataframe_twice(pushdown_on, broker_store):
    """Both scans of one query are planned before either reads: the last to push served them both."""
    spark, counts = pushdown_on, Counts(pushdown_on, broker_store.store_dir)
    total, orders, audit = counts.expected(None), counts.expected(ORDERS), counts.expected(AUDIT_Q1)
    df = spark.read.format("rocketmq").load(str(broker_store.store_dir))
    counts.check("filtered union filtered", df.where(ORDERS).unionAll(df.where(AUDIT_Q1)).count(),
                 want=orders + audit)
    counts.check("filtered union unfiltered", df.where(ORDERS).unionAll(df).count(), want=orders + total)
    counts.check("unfiltered union filtered", df.unionAll(df.where(AUDIT_Q1)).count(), want=total + audit)
    counts.check("anti join", df.join(df.where(ORDERS), "commitlog_offset", "left_anti").count(),
                 want=total - orders)
    assert not counts.wrong, counts.wrong


def test_pushdown_true_is_refused_where_spark_shares_a_pushed_read(pushdown_on, broker_store):
    if pushdown.pushed_reads_stay_with_their_scan():
        pytest.skip("this Spark keeps a pushed read with its scan")
    df = pushdown_on.read.format("rocketmq").option("pushdown", "true").load(str(broker_store.store_dir))
    with pytest.raises(Exception, match="pushdown=true is refused"):
        df.where(ORDERS).count()


def test_the_topics_option_narrows_the_table_for_every_query(pushdown_on, broker_store):
    """The narrowing that stays: an option belongs to the relation, so every scan of it agrees."""
    spark, counts = pushdown_on, Counts(pushdown_on, broker_store.store_dir)
    df = spark.read.format("rocketmq").option("topics", "SparkOrders").load(str(broker_store.store_dir))
    counts.check("topics option, queue 1", df.where("queue_id = 1").count(), "topic = 'SparkOrders' AND queue_id = 1")
    counts.check("topics option, all", df.count(), ORDERS)
    counts.check("topics option, union", df.where("queue_id = 1").unionAll(df).count(),
                 want=counts.expected("topic = 'SparkOrders' AND queue_id = 1") + counts.expected(ORDERS))
    assert not counts.wrong, counts.wrong


@pytest.mark.parametrize(("since", "version", "stays"), [
    (None, "4.3.0", False), (None, "9.9.9", False), ((5, 0), "4.3.0", False), ((5, 0), "5.0.0", True),
    ((5, 0), "5.1.0.dev0", True), ((5, 0), "5.0.0rc1", True), ((5, 0), "weird", False)])
def test_the_version_gate(monkeypatch, since, version, stays):
    monkeypatch.setattr(pushdown, "SCAN_SCOPED_READS_SINCE", since)
    assert pushdown.pushed_reads_stay_with_their_scan(version) is stays
