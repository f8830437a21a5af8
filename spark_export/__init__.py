"""Read a RocketMQ broker's store directory (commit log, consume queues, config JSON) as Spark DataFrames.

    from spark_export import register
    register(spark)                                   # format "rocketmq"
    spark.read.format("rocketmq").load("/path/to/store")

pyspark is imported lazily so that the decoding modules work (and ship to executors) without it.
"""

from __future__ import annotations

__all__ = ["register", "RocketMQDataSource", "package_zip"]


def register(spark) -> None:
    """Register the `rocketmq` data source on a SparkSession."""
    from spark_export.datasource import register as register_source

    register_source(spark)


def __getattr__(name: str):
    if name == "RocketMQDataSource":
        from spark_export.datasource import RocketMQDataSource

        return RocketMQDataSource
    if name == "package_zip":
        from spark_export.job import package_zip

        return package_zip
    raise AttributeError(name)
