"""`rocketmq` PySpark data source (Python Data Source API, Spark 4.x): batch tables and a streaming source.

    spark.dataSource.register(RocketMQDataSource)
    spark.read.format("rocketmq").option("table", "messages").load("/path/to/store")
    spark.read.format("rocketmq").load(["/a/store", "/b/store"])        # a cluster: the `broker` column tells apart
    spark.read.format("rocketmq").option("nameServer", "h:p").option("topic", "T").load()   # over the network

This module only picks the mode: the file mode (spark_export.file_source) and the network mode
(spark_export.cluster) are imported when a read uses them. Every Spark process that plans or runs a read imports
this module first (a streaming query starts a new one per query), and the file mode's decoder loads numba
(~0.3 s) that a network read's planning never needs.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from spark_export.cluster.options import ClusterOptions, is_network_read
from spark_export.schema import arrow_for, ddl_for

__all__ = ["RocketMQDataSource", "register"]  # and, imported on first use, the file mode's names (_FILE_MODE)

_FILE_MODE = {"ReadOptions", "RocketMQReader", "RocketMQFilteringReader", "RocketMQStreamReader",
              "current_end_offset", "scan_forward"}


def __getattr__(name: str):
    """The file mode's names, as before the split (imported on first use)."""
    if name in _FILE_MODE:
        import spark_export.file_source as file_source

        return getattr(file_source, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RocketMQDataSource(DataSource):
    """Format `rocketmq`: tables messages (default), consume_queue, offsets, topics; streaming: messages."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> str:
        if is_network_read(self.options):
            return _network_ddl(self.options)
        from spark_export.file_source import ReadOptions

        options = ReadOptions.parse(self.options)
        if options.columns:
            return _columns_ddl(options.table, options.columns)
        return ddl_for(options.table)

    def reader(self, schema: StructType) -> DataSourceReader:
        if is_network_read(self.options):
            from spark_export.cluster.source import ClusterBatchReader

            return ClusterBatchReader(ClusterOptions.parse(self.options), _requested_arrow_schema("messages", schema))
        from spark_export.file_source import ReadOptions, RocketMQFilteringReader, RocketMQReader
        from spark_export.pushdown import reader_takes_filters

        options = ReadOptions.parse(self.options)
        arrow_schema = _requested_arrow_schema(options.table, schema)
        if reader_takes_filters(options.pushdown):
            return RocketMQFilteringReader(options, arrow_schema)
        return RocketMQReader(options, arrow_schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if is_network_read(self.options):
            from spark_export.cluster.source import ClusterStreamReader

            return ClusterStreamReader(ClusterOptions.parse(self.options), _requested_arrow_schema("messages", schema))
        from spark_export.file_source import ReadOptions, RocketMQStreamReader

        options = ReadOptions.parse(self.options)
        if options.table != "messages":
            raise ValueError("rocketmq streaming reads the messages table only")
        options.require_single_store()
        return RocketMQStreamReader(options, _requested_arrow_schema(options.table, schema))


def _network_ddl(raw_options) -> str:
    """Network mode reads the messages table (option `columns` prunes it)."""
    table = str({str(k).lower(): v for k, v in dict(raw_options).items()}.get("table") or "messages").lower()
    if table != "messages":
        raise ValueError(f"rocketmq: network mode (option nameServer) reads the messages table, not {table!r}")
    options = ClusterOptions.parse(raw_options)
    return _columns_ddl("messages", options.columns) if options.columns else ddl_for("messages")


def _columns_ddl(table: str, columns: tuple[str, ...]) -> str:
    """DDL for the `columns` option: the named columns of the table, in the order given.

    Spark's Python Data Source API (4.x) does not tell a reader which columns a query uses, so every column of
    the schema is decoded and shipped to the JVM; `columns` (or a user-given schema) is the way to prune.
    """
    full = arrow_for(table)
    unknown = [c for c in columns if full.get_field_index(c) < 0]
    if unknown:
        raise ValueError(f"rocketmq table {table!r} has no column(s) {unknown}; columns: {full.names}")
    spark_types = dict(_spark_types(table))
    return ", ".join(f"`{c}` {spark_types[c]}" for c in columns)


def _spark_types(table: str) -> list[tuple[str, str]]:
    from spark_export.schema import TABLE_FIELDS

    return [(name, spark_type) for name, spark_type, _ in TABLE_FIELDS[table]]


def _requested_arrow_schema(table: str, schema: StructType) -> pa.Schema:
    """The Arrow schema for the columns Spark asks for (a user-given schema may list a subset, in any order, and
    declare columns nullable that never are: Spark checks each batch against its own nullability)."""
    full = arrow_for(table)
    names = [f.name for f in schema.fields]
    unknown = [n for n in names if full.get_field_index(n) < 0]
    if unknown:
        raise ValueError(f"rocketmq table {table!r} has no column(s) {unknown}; columns: {full.names}")
    maybe_null = [f.name for f in schema.fields if not f.nullable and full.field(f.name).nullable]
    if maybe_null:
        raise ValueError(f"rocketmq table {table!r}: column(s) {maybe_null} can be null; declare them without NOT NULL")
    return pa.schema([full.field(f.name).with_nullable(f.nullable) for f in schema.fields])


def register(spark) -> None:
    """Register the `rocketmq` format on a SparkSession."""
    spark.dataSource.register(RocketMQDataSource)
