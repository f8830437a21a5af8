"""Output helpers for mqadmin: aligned text tables for people, JSON for scripts."""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any, Iterable, Sequence, TextIO

from protocol.message import MessageRecord

BODY_PREVIEW_CHARS = 120


def format_time(ms: int | None) -> str:
    """``2024-05-01 12:00:00,123`` (local time) for a positive epoch-ms value, ``-`` otherwise."""
    if not ms or ms <= 0:
        return "-"
    seconds, millis = divmod(int(ms), 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) + f",{millis:03d}"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO | None = None) -> None:
    """Print rows under headers, columns padded to their widest cell (numbers right-aligned)."""
    out = out or sys.stdout
    cells = [[("-" if value is None else str(value)) for value in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    numeric = [all(_is_number(row[i]) for row in cells) and bool(cells) for i in range(len(headers))]

    def line(values: Sequence[str], is_header: bool = False) -> str:
        parts = []
        for i, value in enumerate(values):
            parts.append(value.rjust(widths[i]) if numeric[i] and not is_header else value.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    print(line(list(headers), True), file=out)
    for row in cells:
        print(line(row), file=out)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text == "-"
    return True


def key_values(pairs: Iterable[tuple[str, Any]], out: TextIO | None = None) -> None:
    """``key : value`` lines with aligned colons."""
    out = out or sys.stdout
    items = [(str(k), "-" if v is None else str(v)) for k, v in pairs]
    width = max((len(k) for k, _ in items), default=0)
    for key, value in items:
        print(f"{key.ljust(width)} : {value}", file=out)


_INT_TEXT = re.compile(r"-?\d+")
_FLOAT_TEXT = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")


def numbers_as_numbers(table: dict[str, Any]) -> dict[str, Any]:
    """A broker's key/value table (all strings on the wire) with the values that are one number as JSON numbers."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, str):
            if _INT_TEXT.fullmatch(value):
                value = int(value)
            elif _FLOAT_TEXT.fullmatch(value):
                value = float(value)
        out[key] = value
    return out


def dump_json(obj: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    json.dump(obj, out, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    out.write("\n")


def body_text(body: bytes, limit: int | None = BODY_PREVIEW_CHARS) -> str:
    """The body as text when it is UTF-8, else a hex preview; cut to `limit` characters."""
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError:
        text = "0x" + bytes(body[: (limit or 64) // 2]).hex()
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def message_json(record: MessageRecord, full_body: bool = True) -> dict[str, Any]:
    """A stored message as a JSON-ready dict (what ``--json`` prints for message commands)."""
    return {
        "topic": record.topic,
        "queueId": record.queue_id,
        "queueOffset": record.queue_offset,
        "msgId": record.uniq_key or record.offset_msg_id,
        "offsetMsgId": record.offset_msg_id,
        "commitLogOffset": record.physical_offset,
        "tags": record.tags,
        "keys": record.keys,
        "reconsumeTimes": record.reconsume_times,
        "bornTimestamp": record.born_timestamp,
        "bornHost": f"{record.born_host[0]}:{record.born_host[1]}",
        "storeTimestamp": record.store_timestamp,
        "storeHost": f"{record.store_host[0]}:{record.store_host[1]}",
        "bodySize": len(record.body),
        "body": body_text(record.body, None if full_body else BODY_PREVIEW_CHARS),
        "properties": dict(record.properties),
    }


def print_message(record: MessageRecord, out: TextIO | None = None) -> None:
    """The detailed view used by queryMsgById / queryMsgByOffset."""
    out = out or sys.stdout
    key_values([
        ("Topic", record.topic),
        ("Tags", record.tags),
        ("Keys", " ".join(record.keys) or None),
        ("Queue ID", record.queue_id),
        ("Queue Offset", record.queue_offset),
        ("CommitLog Offset", record.physical_offset),
        ("Reconsume Times", record.reconsume_times),
        ("Born Timestamp", format_time(record.born_timestamp)),
        ("Store Timestamp", format_time(record.store_timestamp)),
        ("Born Host", f"{record.born_host[0]}:{record.born_host[1]}"),
        ("Store Host", f"{record.store_host[0]}:{record.store_host[1]}"),
        ("Message ID", record.uniq_key or record.offset_msg_id),
        ("Offset Message ID", record.offset_msg_id),
        ("Properties", ", ".join(f"{k}={v}" for k, v in sorted(record.properties.items())) or None),
        ("Body Size", len(record.body)),
        ("Body", body_text(record.body, 4096)),
    ], out)
