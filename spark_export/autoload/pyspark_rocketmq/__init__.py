"""The `rocketmq` data source, registered in every Spark session without a register() call.

Spark (4.0 and later) looks, when a session first needs a Python data source, for installed top-level modules
named ``pyspark_*`` with a ``DefaultSource``; this module is installed as ``pyspark_rocketmq`` (it lives in
spark_export/autoload/ so that the project keeps its layout; an editable install puts that folder on sys.path
through the start-up .pth of spark_export/startup.py, which also makes Spark's Python workers the interpreter the
package is installed in). ``spark_export.register(spark)`` still works, for sessions that cannot see installed
modules (a zip shipped with --py-files).
"""

from spark_export.datasource import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
