"""Spark and Arrow schemas of the tables the `rocketmq` data source provides.

The Arrow schemas must match the Spark DDL exactly (int32 for `int`, int64 for `long`, `timestamp[us, UTC]`
for `timestamp`): Spark rejects a Python data source batch whose types differ.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "TABLES", "TABLE_FIELDS", "MESSAGES_DDL", "CONSUME_QUEUE_DDL", "OFFSETS_DDL", "TOPICS_DDL",
    "MESSAGES_ARROW", "CONSUME_QUEUE_ARROW", "OFFSETS_ARROW", "TOPICS_ARROW", "ddl_for", "arrow_for",
]

_TS = pa.timestamp("us", tz="UTC")
_MAP = pa.map_(pa.string(), pa.string())

# One row per commit-log record (every field of the record, plus the well-known properties pulled out).
MESSAGES_FIELDS: list[tuple[str, str, pa.DataType]] = [
    ("topic", "string", pa.string()),
    ("queue_id", "int", pa.int32()),
    ("queue_offset", "long", pa.int64()),
    ("commitlog_offset", "long", pa.int64()),
    ("size", "int", pa.int32()),
    ("magic", "int", pa.int32()),
    ("body", "binary", pa.binary()),
    ("body_length", "int", pa.int32()),
    ("body_crc", "int", pa.int32()),
    ("compressed", "boolean", pa.bool_()),
    ("flag", "int", pa.int32()),
    ("sysflag", "int", pa.int32()),
    ("tags", "string", pa.string()),
    ("keys", "string", pa.string()),
    ("uniq_key", "string", pa.string()),
    ("properties", "map<string,string>", _MAP),
    ("born_timestamp", "timestamp", _TS),
    ("born_host", "string", pa.string()),
    ("store_timestamp", "timestamp", _TS),
    ("store_host", "string", pa.string()),
    ("reconsume_times", "int", pa.int32()),
    ("prepared_transaction_offset", "long", pa.int64()),
    ("retry_topic", "string", pa.string()),
    ("real_topic", "string", pa.string()),
]

CONSUME_QUEUE_FIELDS: list[tuple[str, str, pa.DataType]] = [
    ("topic", "string", pa.string()),
    ("queue_id", "int", pa.int32()),
    ("queue_offset", "long", pa.int64()),
    ("commitlog_offset", "long", pa.int64()),
    ("size", "int", pa.int32()),
    ("tags_code", "long", pa.int64()),
]

OFFSETS_FIELDS: list[tuple[str, str, pa.DataType]] = [
    ("topic", "string", pa.string()),
    ("group", "string", pa.string()),
    ("queue_id", "int", pa.int32()),
    ("offset", "long", pa.int64()),
]

TOPICS_FIELDS: list[tuple[str, str, pa.DataType]] = [
    ("topic", "string", pa.string()),
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
    return pa.schema([pa.field(name, arrow_type) for name, _, arrow_type in fields])


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
