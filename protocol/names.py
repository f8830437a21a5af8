"""Legal topic names and queue ids, checked where a name arrives (requests) and where it is read back (the store).

One rule for both: a topic is 1..127 characters of ``[%|a-zA-Z0-9_-]`` (255 for ``%RETRY%``/``%DLQ%`` topics), the
reference client's and broker's rule. The store turns a record's topic and queue id into a directory
(``consumequeue/<topic>/<queueId>``), and the topic bytes of a commit-log record are not covered by its CRC: a record
read back from the log (recovery, a slave applying its master's stream) is checked here before it can become a path
or a queue, so ``../x`` or ``a/b`` never leaves the store. A leaf module (no imports from the project) so the
protocol, store and managers floors can all use it.
"""

from __future__ import annotations

import re

__all__ = ["TOPIC_MAX_LENGTH", "RETRY_DLQ_TOPIC_MAX_LENGTH", "RETRY_GROUP_TOPIC_PREFIX", "DLQ_GROUP_TOPIC_PREFIX",
           "MAX_QUEUE_ID", "topic_problem", "queue_id_problem", "record_names_problem"]

TOPIC_MAX_LENGTH = 127
RETRY_DLQ_TOPIC_MAX_LENGTH = 255
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
# Queue ids a record may carry: topics have at most 1024 queues (UPDATE_AND_CREATE_TOPIC's bound), delay levels and
# POP revive queues fewer; the margin keeps hand-made topics working while a garbage id (negative, or millions of
# directories) is refused.
MAX_QUEUE_ID = 65535

_TOPIC_CHARS = re.compile(r"[%|a-zA-Z0-9_-]+")  # used with fullmatch: "$" would let a trailing newline through
_RAW_TOPIC_CHARS = re.compile(rb"[%|a-zA-Z0-9_-]+")
_RETRY_DLQ_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)
_RAW_RETRY_DLQ_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX.encode(), DLQ_GROUP_TOPIC_PREFIX.encode())
_KNOWN_GOOD_MAX = 8192
_known_good: set[bytes] = set()  # raw topics already found legal: a record check is a set lookup


def topic_problem(topic: str | None) -> str | None:
    """None when ``topic`` is a legal name, else the reason (used as a response remark)."""
    if not topic:
        return "The specified topic is blank."
    limit = RETRY_DLQ_TOPIC_MAX_LENGTH if topic.startswith(_RETRY_DLQ_PREFIXES) else TOPIC_MAX_LENGTH
    if len(topic) > limit:
        return f"The specified topic is longer than topic max length {limit}."
    if not _TOPIC_CHARS.fullmatch(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    return None


def queue_id_problem(queue_id: int) -> str | None:
    """None when a record may carry ``queue_id``, else the reason."""
    if 0 <= queue_id <= MAX_QUEUE_ID:
        return None
    return f"queue id {queue_id} is outside 0..{MAX_QUEUE_ID}"


def record_names_problem(raw_topic: bytes | bytearray | memoryview, queue_id: int) -> str | None:
    """None when a commit-log record's topic bytes and queue id are legal, else the reason (names the bytes).

    Per record on recovery and replication: a topic seen legal before costs one set lookup."""
    raw = bytes(raw_topic)
    if raw in _known_good:
        return queue_id_problem(queue_id)
    limit = RETRY_DLQ_TOPIC_MAX_LENGTH if raw.startswith(_RAW_RETRY_DLQ_PREFIXES) else TOPIC_MAX_LENGTH
    shown = raw if len(raw) <= 80 else raw[:80] + b"..."
    if not raw:
        return "blank topic"
    if len(raw) > limit:
        return f"topic of {len(raw)} bytes, longer than {limit} ({shown!r})"
    if not _RAW_TOPIC_CHARS.fullmatch(raw):
        return f"illegal topic name {shown!r} (only [%|a-zA-Z0-9_-] are allowed)"
    if len(_known_good) >= _KNOWN_GOOD_MAX:
        _known_good.clear()
    _known_good.add(raw)
    return queue_id_problem(queue_id)
