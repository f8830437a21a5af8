"""Spark and Arrow schemas of the tables the `rocketmq` data source provides.

The Arrow schemas must match the Spark DDL exactly (int32 for `int`, int64 for `long`, `timestamp[us, UTC]`
for `timestamp`, nullability included): Spark rejects a Python data source batch whose schema differs.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "TABLES", "TABLE_FIELDS", "MESSAGES_DDL", "CONSUME_QUEUE_DDL", "OFFSETS_DDL", "TOPICS_DDL",
    "MESSAGES_ARROW", "CONSUME_QUEUE_ARROW", "OFFSETS_ARROW", "TOPICS_ARROW", "ddl_for", "arrow_for",
    "DEFAULT_BATCH_ROWS",
]

# records per walk and per RecordBatch: a walk's bytes stay in the CPU caches (here, not in records.py, so that
# options parsing never loads the decoder's numba kernels)
DEFAULT_BATCH_ROWS = 8192

_TS = pa.timestamp("us", tz="UTC")
_MAP = pa.map_(pa.string(), pa.string())

# One row per commit-log record (every field of the record, plus the well-known properties pulled out).
# Columns every record has are NOT NULL: Spark then skips a null check per value when it turns the Arrow batches
# into rows (~10% of the JVM's CPU for an all-columns read). The body (include_body=false) and the properties
# pulled out (absent in many records) can be null.
MESSAGES_FIELDS: list[tuple[str, str, pa.DataType]] = [
    ("topic", "string NOT NULL", pa.string()),
    ("broker", "string NOT NULL", pa.string()),  # the brokerName (replicas of one broker share it)
    ("queue_id", "int NOT NULL", pa.int32()),
    ("queue_offset", "long NOT NULL", pa.int64()),
    ("commitlog_offset", "long NOT NULL", pa.int64()),
    ("size", "int NOT NULL", pa.int32()),
    ("magic", "int NOT NULL", pa.int32()),
    ("body", "binary", pa.binary()),
    ("body_length", "int NOT NULL", pa.int32()),
    ("body_crc", "int NOT NULL", pa.int32()),
    ("compressed", "boolean NOT NULL", pa.bool_()),
    ("flag", "int NOT NULL", pa.int32()),
    ("sysflag", "int NOT NULL", pa.int32()),
    ("tags", "string", pa.string()),
    ("keys", "string", pa.string()),
    ("uniq_key", "string", pa.string()),
    ("properties", "map<string,string> NOT NULL", _MAP),
    ("born_timestamp", "timestamp NOT NULL", _TS),
    ("born_host", "string NOT NULL", pa.string()),
    ("store_timestamp", "timestamp NOT NULL", _TS),
    ("store_host", "string NOT NULL", pa.string()),
    ("reconsume_times", "int NOT NULL", pa.int32()),
    ("prepared_transaction_offset", "long NOT NULL", pa.int64()),
    ("retry_topic", "string", pa.string()),
    ("real_topic", "string", pa.string()),
]

CONSUME_QUEUE_FIELDS: list[tuple[str, str, pa.DataType]] = [
    ("topic", "string", pa.string()),
    ("broker", "string", pa.string()),
    ("queue_id", "int", pa.int32()),
    ("queue_offset", "long", pa.int64()),
    ("commitlog_offset", "long", pa.int64()),
    ("size", "int", pa.int32()),
    ("tags_code", "long", pa.int64()),
]

OFFSETS_FIELDS: list[tuple[str, str, pa.DataType]] = [
    ("topic", "string", pa.string()),
    ("broker", "string", pa.string()),
    ("group", "string", pa.string()),
    ("queue_id", "int", pa.int32()),
    ("offset", "long", pa.int64()),
]

TOPICS_FIELDS: list[tuple[str, str, pa.DataType]] = [
    ("topic", "string", pa.string()),
    ("broker", "string", pa.string()),
    ("read_queue_nums", "int", pa.int32()),
    ("write_queue_nums", "int", pa.int32()),
    ("perm", "int", pa.int32()),
    ("topic_filter_type", "string", pa.string()),
    ("topic_sys_flag", "int", pa.int32()),
    ("order", "boolean", pa.bool_()),
    ("attributes", "map<string,string>", _MAP),
]


def _ddl(fields: list[tuple[str, str, pa.DataType]]) -> str:
    return ", ".join(f"`{name}` {spark_type}" for name, spark_type, _ in fields)


def _arrow(fields: list[tuple[str, str, pa.DataType]]) -> pa.Schema:
    return pa.schema([pa.field(name, arrow_type, nullable=not spark_type.endswith(" NOT NULL"))
                      for name, spark_type, arrow_type in fields])


MESSAGES_DDL = _ddl(MESSAGES_FIELDS)
CONSUME_QUEUE_DDL = _ddl(CONSUME_QUEUE_FIELDS)
OFFSETS_DDL = _ddl(OFFSETS_FIELDS)
TOPICS_DDL = _ddl(TOPICS_FIELDS)
MESSAGES_ARROW = _arrow(MESSAGES_FIELDS)
CONSUME_QUEUE_ARROW = _arrow(CONSUME_QUEUE_FIELDS)
OFFSETS_ARROW = _arrow(OFFSETS_FIELDS)
TOPICS_ARROW = _arrow(TOPICS_FIELDS)

TABLE_FIELDS = {
    "messages": MESSAGES_FIELDS,
    "consume_queue": CONSUME_QUEUE_FIELDS,
    "offsets": OFFSETS_FIELDS,
    "topics": TOPICS_FIELDS,
}

TABLES = {
    "messages": (MESSAGES_DDL, MESSAGES_ARROW),
    "consume_queue": (CONSUME_QUEUE_DDL, CONSUME_QUEUE_ARROW),
    "offsets": (OFFSETS_DDL, OFFSETS_ARROW),
    "topics": (TOPICS_DDL, TOPICS_ARROW),
}


def ddl_for(table: str) -> str:
    return TABLES[_check(table)][0]


def arrow_for(table: str) -> pa.Schema:
    return TABLES[_check(table)][1]


def _check(table: str) -> str:
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; expected one of {', '.join(TABLES)}")
    return table
